"""Quality benchmark (not a test): train for a wall-clock budget and score Multi30k test_2016_flickr, English -> German,
in benchmarks/RESULTS.md (section "Translation quality").

    python benchmarks/benchmark_multi30k.py --data_dir ../shared/data/multi30k --minutes 30

`--data_dir` holds train/val/test_2016_flickr .en/.de, one sentence per line (and test_2016_flickr.lc.norm.tok.de,
the literature's reference; without it the raw reference goes through the same Moses pipeline, which reproduces
that file line for line). The run trains `--preset` (default `multi30k`) with `--max_train_minutes` and no
`--max_steps`: the recipe plans its steps, warmup, decay and the checkpoints to average from the measured step time
(training/budget.py). Any further options go to `python -m vanilla_transformer.training.train`.

`--nproc_per_node N` trains with N data-parallel processes of one thread each (`torchrun`, gloo), each taking
1/N of the preset's batch tokens (`--max_tokens`), so the batch per step stays the preset's. Whether that beats one
process with N threads depends on the machine and the hour: measure with benchmarks/cpu_processes.py first
(benchmarks/experiments/processes-vs-threads.md; docs/train.md "Processes or threads on a CPU").

Three scores (training/metrics.py) for the final weights and for the average of the last `--average_last`
checkpoints (default: the preset's), both decoded alike: in float32 by `vanilla_transformer.translate` with the
checkpoint's generation config (beam 4, length penalty 1.4 for the Multi30k presets). The training run's own test
scores (in its precision: bf16 autocast where the CPU has bf16, training/precision.py) stay in its all_results.json
and model card. The scores: sacreBLEU (cased, 13a, with its
signature), chrF, and the literature's BLEU (lowercased, Moses-normalised and -tokenised, against
test_2016_flickr.lc.norm.tok.de, the metric in which Wu et al. 2021 report 41.02 for Transformer-Tiny). The report
also gives the steps made, the plan, the CPU flags and the machine's load at the start and the end.
"""

import argparse
import json
import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
from benchmarks.checkout import ROOT  # noqa: E402
from benchmarks.report import RESULTS, machine_description, software_versions, write_section  # noqa: E402

SECTION = "## Translation quality"


def load_average() -> str:
    if not hasattr(os, "getloadavg"):
        return "n/a"
    return " / ".join(f"{value:.2f}" for value in os.getloadavg())


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def score_folder(folder: str, sources: list[str], references: list[str], literature_references: list[str],
                 bleu_tokenize: str) -> dict:
    from vanilla_transformer.training.metrics import translation_scores
    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    model, tokenizer = load_model_and_tokenizer(folder)  # on the GPU when there is one
    hypotheses = translate(model, tokenizer, sources, batch_size=64)
    return translation_scores(hypotheses, references, bleu_tokenize, target_lang="de",
                              literature_references=literature_references)


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="folder with train/val/test_2016_flickr .en and .de files")
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock training budget")
    parser.add_argument("--preset", default="multi30k", help="training preset (default: multi30k)")
    parser.add_argument("--output_dir", default=os.path.join("outputs", "multi30k-benchmark"))
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: benchmarks/RESULTS.md")
    parser.add_argument("--average_last", type=int, default=None,
                        help="checkpoints the plan saves and the second score averages (default: the preset's)")
    parser.add_argument("--nproc_per_node", type=int, default=1,
                        help="data-parallel training processes of one thread each, under torchrun; each takes 1/N of "
                             "the batch tokens (default: 1, one process with torch's threads)")
    args, train_options = parser.parse_known_args(argv)
    if args.minutes <= 0:
        parser.error("--minutes must be positive")
    if args.nproc_per_node < 1:
        parser.error(f"--nproc_per_node must be at least 1, got {args.nproc_per_node}")
    files = {f"{split}_{side}": os.path.join(args.data_dir, f"{name}.{lang}")
             for split, name in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr"))
             for side, lang in (("source", "en"), ("target", "de"))}
    missing = [path for path in files.values() if not os.path.isfile(path)]
    if missing:
        parser.error(f"missing Multi30k files: {', '.join(missing)}")

    from transformers import GenerationConfig

    from vanilla_transformer.training.average_checkpoints import (
        CHECKPOINT_PATTERN,
        average_checkpoints,
        last_checkpoints,
    )
    from vanilla_transformer.training.metrics import moses_tokenize
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.train import main as train_main

    if args.preset not in PRESETS:
        parser.error(f"unknown --preset {args.preset!r}; choose one of {', '.join(PRESETS)}")
    average_last = args.average_last or PRESETS[args.preset].training.get("average_last_n_checkpoints", 5)
    processes = args.nproc_per_node
    if processes > 1 and not any(o.replace("-", "_").split("=")[0] == "__max_tokens" for o in train_options):
        # the preset's batch per step, split between the processes
        train_options = ["--max_tokens", str(PRESETS[args.preset].training["max_tokens"] // processes), *train_options]
    machine = machine_description()
    load_start = load_average()
    train_argv = ["--preset", args.preset, *[item for k, v in files.items() for item in (f"--{k}", v)],
                  "--max_train_minutes", str(args.minutes), "--budget_checkpoints", str(average_last),
                  "--save_total_limit", str(average_last), "--average_last_n_checkpoints", "0",
                  "--literature_bleu", "true", "--output_dir", args.output_dir, "--overwrite_output_dir", "true",
                  *train_options]
    started = time.monotonic()
    if processes == 1:
        metrics = train_main(train_argv)  # the final weights, scored on the test set by the run
    else:
        print(f"Training with {processes} processes of one thread each (torchrun): {' '.join(train_options)}")
        launcher = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", str(processes)]
        environment = {**os.environ, "OMP_NUM_THREADS": "1",
                       "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
        finished = subprocess.run([*launcher, "-m", "vanilla_transformer.training.train", *train_argv], env=environment)
        if finished.returncode != 0:
            sys.exit(f"benchmark_multi30k: training under torchrun failed (exit status {finished.returncode}); "
                     "its output is above.")
        with open(os.path.join(args.output_dir, "all_results.json"), encoding="utf-8") as f:
            metrics = json.load(f)  # what the run wrote: its test-set scores and its plan
    run_scores = {k.removeprefix("test_"): v for k, v in metrics.items() if k.startswith("test_")}
    plan = metrics.get("time_budget", {})

    saved = sum(bool(CHECKPOINT_PATTERN.match(name)) for name in os.listdir(args.output_dir))
    checkpoints = last_checkpoints(args.output_dir, min(average_last, saved))
    averaged_dir = os.path.join(args.output_dir, "averaged")
    average_checkpoints(checkpoints, averaged_dir, overwrite=True)  # this script made it on an earlier run
    sources, references = read_lines(files["test_source"]), read_lines(files["test_target"])
    tokenized_path = os.path.join(args.data_dir, "test_2016_flickr.lc.norm.tok.de")
    if os.path.isfile(tokenized_path):
        literature_references, literature_source = read_lines(tokenized_path), "test_2016_flickr.lc.norm.tok.de"
    else:
        literature_references = moses_tokenize(references, "de")
        literature_source = "test_2016_flickr.de through the same pipeline (no .lc.norm.tok.de file in --data_dir)"
    bleu_tokenize = run_scores.get("bleu_signature", "tok:13a").split("tok:")[1].split("|")[0]
    # the final weights are decoded again, as the averaged ones are: the run's own test scores came from its
    # precision (bf16 autocast on a CPU with bf16), which moved them by up to 0.13 BLEU on Multi30k
    final = score_folder(args.output_dir, sources, references, literature_references, bleu_tokenize)
    averaged = score_folder(averaged_dir, sources, references, literature_references, bleu_tokenize)
    decoding = GenerationConfig.from_pretrained(averaged_dir)  # what both scorings decoded with
    total_minutes = (time.monotonic() - started) / 60
    load_end = load_average()

    state = json.load(open(os.path.join(args.output_dir, "trainer_state.json"), encoding="utf-8"))
    steps = [int(CHECKPOINT_PATTERN.match(os.path.basename(c)).group(1)) for c in checkpoints]
    command = "python benchmarks/benchmark_multi30k.py " + " ".join(shlex.quote(a) for a in argv)
    planned = (f"{plan['total_steps']:,} steps expected at {plan['seconds_per_step']:.3f} s/step (timed over "
               f"{plan['measured_steps']}), warmup {plan['warmup_steps']:,}, {plan['schedule']} decay to 0"
               + (f" ({plan['note']})" if plan.get("note") else "")
               if plan else "none (the budget ran out before the plan)")
    text = f"""{SECTION}

Multi30k test_2016_flickr, English -> German, after a wall-clock training budget, preset `{args.preset}`
(docs/train.md). Scores (training/metrics.py): sacreBLEU `{final["bleu_signature"]}`; chrF
`{final["chrf_signature"]}`; the literature's BLEU: hypotheses lowercased, Moses-normalised and -tokenised
with sacremoses, scored without further tokenisation against {literature_source} (the metric of Wu et al. 2021,
whose Transformer-Tiny reaches 41.02 after ~8,000 updates of 4,096 tokens on a GPU).
Both weights decoded in float32, beam {decoding.num_beams}, length penalty {decoding.length_penalty:g} (the
checkpoint's generation config).
The test set is reported here; it is never used to choose the recipe.

| budget | machine | steps | final weights BLEU / chrF | average of last {len(checkpoints)} checkpoints BLEU / chrF | literature BLEU final / averaged | plan |
| --- | --- | --- | --- | --- | --- | --- |
| {args.minutes:g} min training{f" on {processes} processes of one thread" if processes > 1 else ""} ({total_minutes:.0f} min in all) | {machine}; load average {load_start} (1/5/15 min) at the start, {load_end} at the end | {state["global_step"]} | {final["bleu"]:.2f} / {final["chrf"]:.2f} | {averaged["bleu"]:.2f} / {averaged["chrf"]:.2f} | {final["literature_bleu"]:.2f} / {averaged["literature_bleu"]:.2f} | {planned}; averaged steps {", ".join(map(str, steps))} |

Command ({datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}; {software_versions()}):

```bash
{command}
```
"""  # noqa: E501  (a Markdown table row)
    write_section(SECTION, text, args.results)
    print(text)


if __name__ == "__main__":
    main()
