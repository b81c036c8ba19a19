"""How the recipe's start grows with the corpus: time to the first training step, peak memory, cache size.

    python -m benchmarks.data_scale [--pairs 300000 1000000 4000000] [--data ../shared/data/multi30k] [--write]
    python -m benchmarks.data_scale --pairs 1000000 --duplicates 0.02   # 2 % repeated lines, dropped by cleaning
    python -m benchmarks.data_scale --pairs 1000000 --code ../old        # another checkout's recipe, same machine
    python -m benchmarks.data_scale --loader 1000000 [--duplicates 0.02]   # the cost of a batch: cache vs memory
    python -m benchmarks.data_scale --pairs 4000000 --against "--train_while_tokenizing false"   # two recipes, one run

For each size it builds a distinct synthetic corpus from any parallel files (Multi30k's by default): line k of each
side joins the sentences i and j of the source files, with (i, j) different for every k, so no two lines repeat
(with `--duplicates F`, every 1/F-th line repeats the one before it, as crawled corpora do: the cleaning drops
them, and the run trains on a selection of the cached rows).
Then it runs `python -m vanilla_transformer.training.train --preset multi30k` on it twice (2 steps, no evaluation),
each time in a new process with a new output folder and the same corpus cache:

- first run: the files are read into the cache, the BPE vocabulary trained on its sample, the pairs tokenized;
- second run: everything comes from the cache (a resume reads it the same way).

Reported per run: seconds from the start of the process to the end of its first optimizer step (the time the
Trainer's step-1 log line appears), the peak resident memory of the whole process tree (psutil, every 0.05 s, as
the peak of the first training steps lasts tenths of a second; the sum over the process and its children), and the
cache's size on disk. The load average is printed: the machine may be
shared. `--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:  # run from a checkout, installed or not
    sys.path.insert(0, str(REPO_ROOT))

from benchmarks.report import machine_description, software_versions, write_section  # noqa: E402
from vanilla_transformer.training.cleaning import clean_corpus  # noqa: E402
from vanilla_transformer.training.corpus_cache import read_corpus, sample_texts, tokenize_corpus  # noqa: E402
from vanilla_transformer.training.tokenizer import train_tokenizer  # noqa: E402

SECTION = "## Large corpora: time to the first step and memory"
DEFAULT_DATA = next((folder / "shared" / "data" / "multi30k" for folder in (REPO_ROOT.parent, REPO_ROOT.parent.parent)
                     if (folder / "shared" / "data" / "multi30k").is_dir()), REPO_ROOT.parent / "shared" / "data"
                    / "multi30k")


def build_corpus(source: Path, target: Path, pairs: int, folder: Path, duplicates: float = 0.0) -> tuple[Path, Path]:
    """`pairs` pairs: line k joins pair i = k mod n and pair (i + 1 + k div n) mod n of the inputs, so no two lines
    repeat, except that with `duplicates` (a fraction) every 1/duplicates-th line repeats the line before it, as
    crawled corpora repeat lines (the cleaning drops them, and trains on a selection of the cached rows)."""
    sources = source.read_text(encoding="utf-8").splitlines()
    targets = target.read_text(encoding="utf-8").splitlines()
    unique = list(dict.fromkeys(zip(sources, targets)))
    n = len(unique)
    if pairs > n * (n - 1):
        raise SystemExit(f"{n} distinct input pairs make at most {n * (n - 1)} joined pairs")
    every = round(1 / duplicates) if duplicates > 0 else 0
    name = f"train{pairs}" + (f"-dup{every}" if every else "")
    out = folder / f"{name}.en", folder / f"{name}.de"
    if all(path.exists() for path in out):
        return out

    def joined(k):
        k = k - 1 if every and k % every == every - 1 else k
        return unique[k % n], unique[(k % n + 1 + k // n) % n]

    with open(out[0], "w", encoding="utf-8") as f_source, open(out[1], "w", encoding="utf-8") as f_target:
        for start in range(0, pairs, 100_000):
            picked = [joined(k) for k in range(start, min(start + 100_000, pairs))]
            f_source.write("".join(f"{a[0]} {b[0]}\n" for a, b in picked))
            f_target.write("".join(f"{a[1]} {b[1]}\n" for a, b in picked))
    return out


def _tree_memory(process: psutil.Process) -> tuple[int, int]:
    """(resident, private) bytes summed over `process` and its children. Resident counts the pages of the
    memory-mapped Arrow files a process has touched, which the kernel drops again when memory is needed; private
    (resident minus file-backed and shared pages, psutil's `rss - shared` on Linux) is what a process holds."""
    resident = private = 0
    for member in [process, *process.children(recursive=True)]:
        try:
            info = member.memory_info()
        except psutil.Error:
            continue
        resident += info.rss
        private += info.rss - getattr(info, "shared", 0)
    return resident, private


def run_once(files: tuple[Path, Path], cache: Path, output: Path, extra: list[str], code: Path = REPO_ROOT) -> dict:
    """One training run of 2 steps of the recipe in the checkout `code`; -> {first_step_s, peak_rss_gb,
    peak_private_gb, total_s, log}."""
    command = [sys.executable, "-m", "vanilla_transformer.training.train", "--preset", "multi30k",
               "--train_source", str(files[0]), "--train_target", str(files[1]), "--output_dir", str(output),
               "--data_cache_dir", str(cache), "--max_steps", "2", "--logging_steps", "1", "--save_strategy", "no",
               "--average_last_n_checkpoints", "0", "--report_to", "none", "--disable_tqdm", "true", *extra]
    started = time.monotonic()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env={**os.environ, "PYTHONPATH": str(code)}, cwd=code)
    watched, peak, first_step, log = psutil.Process(process.pid), [0, 0], None, []

    def watch():
        while process.poll() is None:
            peak[:] = [max(old, new) for old, new in zip(peak, _tree_memory(watched))]
            time.sleep(0.05)  # often enough for the first steps' brief peak (benchmarks/experiments/large-corpora.md)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    for line in process.stdout:
        log.append((time.monotonic() - started, line))
        if first_step is None and "'loss'" in line:
            first_step = time.monotonic() - started
    process.wait()
    watcher.join()
    if process.returncode != 0:
        raise SystemExit("the training run failed:\n" + "".join(line for _, line in log[-30:]))
    phases = ("Read ", "Reusing", "Trained the BPE", "Tokenized", "Cleaning")  # each line's time: where time goes
    return {"first_step_s": first_step, "peak_rss_gb": peak[0] / 1e9, "peak_private_gb": peak[1] / 1e9,
            "total_s": time.monotonic() - started,
            "log": [f"{seconds:6.0f} s  {line.strip()}" for seconds, line in log if line.startswith(phases)]}


def tokenization_speeds(files: tuple[Path, Path], work: Path, workers: list[int | None]) -> list:
    """(processes, seconds) to tokenize the cached pairs of `files` with each number of `datasets.map` processes
    (None: one process, the fast tokenizer's batched calls on its own threads), with the BPE vocabulary of a
    50k-pair sample."""
    cache = work / f"tokenize-{os.getpid()}"
    pairs, key = read_corpus(str(files[0]), str(files[1]), "train", str(cache))
    tokenizer = train_tokenizer(sample_texts(pairs, 50_000, 0)[0], vocab_size=8000)
    seconds = []
    for trial, count in enumerate(workers):
        started = time.monotonic()
        tokenize_corpus(pairs, key, tokenizer, 128 + trial, 128, clean=True, cache_dir=str(cache),
                        num_proc=count, log=lambda line: None)  # a new limit: a new cache entry, tokenized anew
        seconds.append((count or 1, round(time.monotonic() - started, 1)))
    shutil.rmtree(cache)  # made here
    return seconds


def loader_times(files: tuple[Path, Path], work: Path, batches: int, max_tokens: int) -> dict:
    """Milliseconds per training batch (the trainer's token-budget sampler on the length columns of the pairs the
    cleaning keeps, then `DataCollatorForSeq2Seq`) from the memory-mapped cache (through the indices mapping of the
    kept rows where the cleaning dropped some, as in training) and from the same tokenized pairs held in memory (as a
    Hub dataset or the demo corpus is), alternating the two; the median over `batches` batches each."""
    import datasets
    from torch.utils.data import DataLoader
    from transformers import DataCollatorForSeq2Seq

    from vanilla_transformer.training.arrow_columns import length_columns, select_kept
    from vanilla_transformer.training.batching import TokenBudgetBatchSampler

    cache = work / f"loader-{os.getpid()}"
    pairs, key = read_corpus(str(files[0]), str(files[1]), "train", str(cache))
    tokenizer = train_tokenizer(sample_texts(pairs, 100_000, 0)[0], vocab_size=8000)
    mapped = tokenize_corpus(pairs, key, tokenizer, 128, 128, clean=True, cache_dir=str(cache),
                             log=lambda line: None)
    lengths = length_columns(mapped)
    kept, _ = clean_corpus(mapped, pairs, 128, 128, lengths=lengths)
    mapped, lengths = select_kept(mapped, kept, lengths)  # as the trainer does
    started = time.monotonic()
    sampler = TokenBudgetBatchSampler(*lengths, max_tokens=max_tokens, seed=0)
    sampler_s = time.monotonic() - started
    columns = ["input_ids", "labels"]
    in_memory = datasets.Dataset.from_dict(mapped.select_columns(columns).to_dict())
    collator = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    loaders = {name: iter(DataLoader(dataset.select_columns(columns), batch_sampler=sampler, collate_fn=collator))
               for name, dataset in (("mapped", mapped), ("in memory", in_memory))}
    times = {name: [] for name in loaders}
    for step in range(batches):
        for name in (list(loaders) if step % 2 == 0 else list(loaders)[::-1]):
            started = time.monotonic()
            next(loaders[name])
            times[name].append(time.monotonic() - started)
    shutil.rmtree(cache)  # made here
    return {"sampler_s": sampler_s, "batches": len(sampler), "kept": len(kept),
            **{name: 1000 * statistics.median(values) for name, values in times.items()}}


def folder_size(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def render(rows: list[dict], command: str, load: tuple[float, float], machine: str, duplicates: float = 0.0) -> str:
    compared = any(row.get("options") for row in rows)
    lines = [SECTION, "", f"`{command}`, {time.strftime('%Y-%m-%d')}; {machine}; "
             f"{software_versions()}. Load average {load[0]:.1f} at the start and {load[1]:.1f} at the end "
             "(other jobs share the 2 cores).", "",
             "| training pairs |" + (" recipe options |" if compared else "") + " first run: time to first step | "
             "first run: peak memory, resident / private (process tree) | cache on disk | second run: time to first "
             "step | second run: peak memory, resident / private |",
             "| --- |" + (" --- |" if compared else "") + " --- | --- | --- | --- | --- |"]
    for row in rows:
        first, second = row["first"], row["second"]
        options = f" {'`' + row['options'] + '`' if row.get('options') else 'the defaults'} |" if compared else ""
        lines.append(f"| {row['pairs']:,} |{options} {first['first_step_s']:.0f} s | {first['peak_rss_gb']:.2f} / "
                     f"{first['peak_private_gb']:.2f} GB | {row['cache_gb']:.2f} GB | {second['first_step_s']:.0f} s | "
                     f"{second['peak_rss_gb']:.2f} / {second['peak_private_gb']:.2f} GB |")
    corpus = (f"joined Multi30k pairs, every {round(1 / duplicates)}th line a repeat of the line before it, which the "
              "cleaning drops" if duplicates else "joined Multi30k pairs, no line repeated")
    lines += ["", f"Each corpus is distinct ({corpus}); the first run reads it into the "
              "cache, trains the BPE vocabulary on its sample (`--tokenizer_sample_lines`, 1M sentences: 0.5M "
              "pairs) and tokenizes it; the second run, in a new process, reads everything from the cache "
              "(docs/large-corpora.md)."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pairs", type=int, nargs="+", default=[300_000, 1_000_000, 4_000_000])
    parser.add_argument("--data", type=Path, default=DEFAULT_DATA, help="a folder with train.en and train.de")
    parser.add_argument("--source", default="train.en")
    parser.add_argument("--target", default="train.de")
    parser.add_argument("--work_dir", type=Path, default=None, help="where the corpora and caches go (default: a "
                        "temporary folder, deleted at the end)")
    parser.add_argument("--tokenization", type=int, default=0, metavar="PAIRS", help="instead: time tokenizing a "
                        "corpus of PAIRS pairs in one process (the fast tokenizer's threads) and in 2 processes")
    parser.add_argument("--loader", type=int, default=0, metavar="PAIRS", help="instead: milliseconds per training "
                        "batch read from the memory-mapped cache of a corpus of PAIRS pairs and from the same tokens "
                        "held in memory")
    parser.add_argument("--duplicates", type=float, default=0.0, metavar="FRACTION", help="this fraction of the "
                        "lines repeat the line before them (e.g. 0.02), for the cleaning to drop (default: none)")
    parser.add_argument("--code", type=Path, default=REPO_ROOT, help="the checkout whose recipe runs (default: this "
                        "one; another one, e.g. a `git worktree` of an earlier commit, compares two versions on one "
                        "machine)")
    parser.add_argument("--against", default=None, metavar="OPTIONS", help="also run each size's two runs with these "
                        "recipe options (e.g. '--train_while_tokenizing false'), on a cache of their own, right after "
                        "the default's: the two side by side in one table")
    parser.add_argument("--write", action="store_true", help="replace this benchmark's section of RESULTS.md")
    args, extra = parser.parse_known_args(argv)
    load_start = os.getloadavg()[0]
    machine = machine_description()
    print(machine, flush=True)
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="data-scale-"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    if args.loader:
        files = build_corpus(args.data / args.source, args.data / args.target, args.loader, work, args.duplicates)
        result = loader_times(files, work, batches=200, max_tokens=2048)
        print(f"{args.loader:,} pairs ({result['kept']:,} kept by the cleaning), {result['batches']:,} batches of "
              f"2,048 tokens (the sampler made them in "
              f"{result['sampler_s']:.1f} s): {result['mapped']:.1f} ms per batch from the memory-mapped cache, "
              f"{result['in memory']:.1f} ms from memory (medians of 200); load average {os.getloadavg()[0]:.1f}")
        return
    if args.tokenization:
        files = build_corpus(args.data / args.source, args.data / args.target, args.tokenization, work)
        seconds = tokenization_speeds(files, work, [None, 2, None, 2])
        print(f"Tokenizing {args.tokenization:,} pairs: {seconds}; load average {os.getloadavg()[0]:.1f}")
        return
    variants = [("", extra)] + ([(args.against, [*extra, *shlex.split(args.against)])] if args.against else [])
    try:
        for pairs in args.pairs:
            files = build_corpus(args.data / args.source, args.data / args.target, pairs, work, args.duplicates)
            for number, (label, options) in enumerate(variants):
                # a new folder: the first run starts from an empty cache
                cache = work / f"cache{pairs}-{os.getpid()}-{number}"
                first = run_once(files, cache, work / f"out{pairs}-{number}-first", options, args.code.resolve())
                second = run_once(files, cache, work / f"out{pairs}-{number}-second", options, args.code.resolve())
                row = {"pairs": pairs, "options": label, "first": first, "second": second,
                       "cache_gb": folder_size(cache) / 1e9}
                rows.append(row)
                print(f"{pairs:,} pairs{f' ({label})' if label else ''}: first step after {first['first_step_s']:.0f} "
                      f"s (peak {first['peak_rss_gb']:.2f} GB resident, {first['peak_private_gb']:.2f} GB private), "
                      f"cache {row['cache_gb']:.2f} GB, second run {second['first_step_s']:.0f} s (peak "
                      f"{second['peak_rss_gb']:.2f} GB resident, {second['peak_private_gb']:.2f} GB private); load "
                      f"average {os.getloadavg()[0]:.1f}", flush=True)
                for line in first["log"] + second["log"]:
                    print("   ", line, flush=True)
                if cache.exists():  # made by this benchmark's runs (a --streaming run writes none)
                    shutil.rmtree(cache)
    finally:
        if args.work_dir is None:
            shutil.rmtree(work, ignore_errors=True)
    command = "python -m benchmarks.data_scale " + shlex.join(argv if argv is not None else sys.argv[1:])
    text = render(rows, command.strip(), (load_start, os.getloadavg()[0]), machine, args.duplicates)
    print(text)
    if args.write:
        write_section(SECTION, text)


if __name__ == "__main__":
    main()
