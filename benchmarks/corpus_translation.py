"""Corpus translation speed (not a test): `vanilla-transformer translate --input FILE --output OUT` end to end
against CTranslate2's own `Translator.translate_batch` on the same sentences.

    python benchmarks/corpus_translation.py --model outputs/multi30k            # 10,000 lines of Multi30k English
    python benchmarks/corpus_translation.py --model DIR --lines 100000 --num-beams 4 --write

The corpus: the English lines of Multi30k's test_2016_flickr and val (../shared/data/multi30k beside the checkout)
repeated to `--lines` lines, or `--source FILE` repeated so. The two sides, with the same sentences, beam, batches
and threads:

- the command, run in this process as `vanilla-transformer translate --model DIR --input corpus.en --output
  corpus.de`: it reads the file, tokenizes, sorts each chunk by length into batches of `--batch-size`, translates
  with the engine it picks (for a PyTorch folder: CTranslate2 through the export it caches, made once before the
  timing, whose time is not counted), detokenizes and writes; its load of the model counts;
- CTranslate2's `Translator.translate_batch` on the corpus tokenized beforehand (token strings, untimed), loaded
  beforehand from the same cached export, with `max_batch_size=--batch-size` (CTranslate2 sorts by length itself)
  and the decoding options the command gives it (`CTranslate2Translator.translate_options`: beam, length penalty,
  end token, tokens never to generate) and one maximum length for all sentences (`--max-new-tokens`, given to the
  command too, so both do the same work; the command's default per-sentence bound is not CTranslate2's).

Both use the threads the engine chooses for the folder (`CTranslate2Translator`: the faster of one thread and
CTranslate2's default, measured once per machine and model shape). A third side, translate_batch with CTranslate2's
default threads (`intra_threads=0`, what the command used before it measured), shows what the choice is worth.
`--rounds` runs of each, alternating, the median of each; the ratio is the command's sentences/s over
translate_batch's at the same threads. The outputs are
compared line by line (translate_batch's detokenized by the tokenizer). `--write` puts the "Corpus translation"
section into benchmarks/RESULTS.md.
"""

import argparse
import os
import statistics
import sys
import tempfile
import time
from datetime import date
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.checkout import ROOT  # noqa: E402
from benchmarks.report import RESULTS, machine_description, write_section  # noqa: E402

SECTION = "## Corpus translation: the command vs CTranslate2's translate_batch"
MULTI30K = ROOT.parent / "shared" / "data" / "multi30k"
DEFAULT_SOURCES = [MULTI30K / "test_2016_flickr.en", MULTI30K / "val.en"]


def corpus_lines(sources: list[Path], count: int) -> list[str]:
    """The non-blank lines of `sources`, repeated to `count` lines."""
    lines = [line for source in sources for line in source.read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise SystemExit(f"No lines in {', '.join(map(str, sources))}")
    return [lines[i % len(lines)] for i in range(count)]


def run_command(argv: list[str]) -> float:
    """Seconds `vanilla-transformer ARGV` takes in this process (it must succeed)."""
    from vanilla_transformer.cli.main import main

    start = time.perf_counter()
    try:
        main(argv)
    except SystemExit as exit:
        if exit.code not in (0, None):
            raise SystemExit(f"vanilla-transformer {' '.join(argv)} failed ({exit.code})") from None
    return time.perf_counter() - start


def measure(args) -> dict:
    import ctranslate2
    from transformers import AutoTokenizer

    from vanilla_transformer.checkpoints.kinds import folder_kind
    from vanilla_transformer.interop.ctranslate2_cache import cached_export, export_quantization
    from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator

    lines = corpus_lines([Path(path) for path in args.source], args.lines)
    work = Path(tempfile.mkdtemp(prefix="corpus-translation-"))
    source = work / "corpus.en"
    source.write_text("".join(line + "\n" for line in lines), encoding="utf-8")

    if folder_kind(args.model) == "ctranslate2":
        folder = args.model
    else:  # the command's export, made (or found) in its cache before anything is timed
        folder, _ = cached_export(args.model, export_quantization(args.compute_type))
    wrapper = CTranslate2Translator(folder, device="cpu", compute_type=args.compute_type)
    options = wrapper.translate_options(num_beams=args.num_beams, max_new_tokens=args.max_new_tokens)
    tokenizer = AutoTokenizer.from_pretrained(folder)
    rows = [[wrapper.source_tokens[i] for i in ids] for ids in tokenizer(lines)["input_ids"]]  # untimed
    translator = wrapper.translator
    default = CTranslate2Translator(folder, device="cpu", compute_type=args.compute_type, intra_threads=0).translator

    command = ["translate", "--model", str(args.model), "--input", str(source), "--output", str(work / "out.de"),
               "--num-beams", str(args.num_beams), "--batch-size", str(args.batch_size), "--max-new-tokens",
               str(args.max_new_tokens), "--compute-type", args.compute_type, "--device", "cpu", "--no-progress",
               "--overwrite"]
    timings = {"command": [], "translate_batch": [], "translate_batch, default threads": []}
    outputs = None
    for _ in range(args.rounds):  # alternating, so that a busy spell slows both alike
        timings["command"].append(run_command(command))
        start = time.perf_counter()
        results = translator.translate_batch(rows, max_batch_size=args.batch_size, batch_type="examples",
                                             max_input_length=0, **options)
        timings["translate_batch"].append(time.perf_counter() - start)
        start = time.perf_counter()
        default.translate_batch(rows, max_batch_size=args.batch_size, batch_type="examples", max_input_length=0,
                                **options)
        timings["translate_batch, default threads"].append(time.perf_counter() - start)
        if outputs is None:
            outputs = [tokenizer.decode([wrapper.target_ids[token] for token in result.hypotheses[0]],
                                        skip_special_tokens=True) for result in results]
    written = (work / "out.de").read_text(encoding="utf-8").splitlines()
    identical = sum(a == " ".join(b.splitlines()) for a, b in zip(written, outputs))
    for path in work.iterdir():
        path.unlink()
    work.rmdir()
    medians = {name: statistics.median(seconds) for name, seconds in timings.items()}
    return {"lines": len(lines), "timings": timings, "medians": medians, "identical": identical,
            "speed": {name: len(lines) / seconds for name, seconds in medians.items()},
            "ctranslate2": ctranslate2.__version__, "folder": folder,
            "intra_threads": f"{wrapper.intra_threads} (the engine's choice; measured, seconds of its probe batch: "
                             f"{', '.join(f'{n} thread(s) {t:.3f}' for n, t in wrapper.thread_choice.items())})",
            "default_threads": f"CTranslate2's default intra_threads (4, or fewer cores: "
                               f"{min(4, os.cpu_count() or 1)} here)"}


def render(result: dict, args, command: str) -> str:
    speed = result["speed"]
    ratio = speed["command"] / speed["translate_batch"]
    timings = "; ".join(f"{name} {', '.join(f'{seconds:.2f}' for seconds in values)} s"
                        for name, values in result["timings"].items())
    lines = [SECTION, "",
             f"Measured {date.today().isoformat()} on {machine_description()}; CTranslate2 {result['ctranslate2']}, "
             f"threads: {result['intra_threads']} for the command and translate_batch; "
             f"{result['default_threads']} for the third.",
             f"Command: `{command}`", "",
             f"{result['lines']:,} lines ({', '.join(Path(path).name for path in args.source)} repeated), beam "
             f"{args.num_beams}, batches of {args.batch_size} sentences, at most {args.max_new_tokens} new tokens, "
             f"compute type {args.compute_type}; model {Path(args.model).name}. The command end to end (read, "
             "tokenize, batch by length, translate, detokenize, write; its model load included) against "
             "translate_batch on the tokenized corpus (tokenizing untimed); "
             f"{args.rounds} alternating runs each, medians. Runs: {timings}.", "",
             "| | seconds (median) | sentences/s |", "| --- | ---: | ---: |",
             f"| `vanilla-transformer translate` | {result['medians']['command']:.2f} | {speed['command']:.1f} |",
             f"| CTranslate2 `translate_batch` | {result['medians']['translate_batch']:.2f} | "
             f"{speed['translate_batch']:.1f} |",
             f"| CTranslate2 `translate_batch`, default threads | "
             f"{result['medians']['translate_batch, default threads']:.2f} | "
             f"{speed['translate_batch, default threads']:.1f} |", "",
             f"Ratio: the command runs at **{ratio:.0%}** of translate_batch's sentences/s at the same threads, "
             f"and **{speed['command'] / speed['translate_batch, default threads']:.2f}x** translate_batch's at "
             f"CTranslate2's default threads. Identical outputs: {result['identical']:,}/{result['lines']:,} lines."]
    return "\n".join(lines) + "\n"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True,
                        help="checkpoint folder (save_pretrained, with its tokenizer) or a CTranslate2 export")
    parser.add_argument("--source", nargs="+", default=[str(path) for path in DEFAULT_SOURCES],
                        help="files of sentences repeated to --lines (default: Multi30k test_2016_flickr.en, val.en)")
    parser.add_argument("--lines", type=int, default=10_000, help="lines of the corpus (default 10000)")
    parser.add_argument("--num-beams", type=int, default=4)
    parser.add_argument("--batch-size", type=int, default=32, help="sentences per batch, as the command's")
    parser.add_argument("--max-new-tokens", type=int, default=64, help="longest translation, for both")
    parser.add_argument("--compute-type", default="float32", help="CTranslate2's, for both (default float32)")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each, alternating (default 3)")
    parser.add_argument("--write", action="store_true", help="put the section into benchmarks/RESULTS.md")
    args = parser.parse_args(argv)
    for path in args.source:
        if not Path(path).is_file():
            parser.error(f"--source file not found: {path}")
    if min(args.lines, args.num_beams, args.batch_size, args.max_new_tokens, args.rounds) < 1:
        parser.error("--lines, --num-beams, --batch-size, --max-new-tokens and --rounds must be at least 1")
    result = measure(args)
    text = render(result, args, "python benchmarks/corpus_translation.py " + " ".join(sys.argv[1:] if argv is None
                                                                                        else argv))
    print(text)
    if args.write:
        write_section(SECTION, text)
        print(f"Wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
