"""Quality benchmark (not a test): train the `multi30k` preset for a fixed wall-clock budget and report sacreBLEU
on Multi30k test_2016_flickr, English -> German, in benchmarks/RESULTS.md (section "Translation quality").

    python benchmarks/benchmark_multi30k.py --data_dir ../shared/data/multi30k --minutes 25

`--data_dir` holds train/val/test_2016_flickr .en/.de, one sentence per line. Any further options go to
`python -m training.train` (e.g. `--max_tokens 4096`, `--d_model 512`). The score is reported twice: with the
final weights, and with the average of the last checkpoints (section 6.1 of the paper), which is decoded with
`vanilla_transformer.translate` (the checkpoint's generation config, on the GPU when there is one).
"""

import argparse
import json
import os
import shlex
import sys
import time
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # run from a checkout, installed or not
    sys.path.insert(0, str(ROOT))

from benchmarks.report import RESULTS, machine_description, write_section  # noqa: E402

SECTION = "## Translation quality"


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="folder with train/val/test_2016_flickr .en and .de files")
    parser.add_argument("--minutes", type=float, required=True, help="wall-clock training budget")
    parser.add_argument("--output_dir", default=os.path.join("outputs", "multi30k-benchmark"))
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: benchmarks/RESULTS.md")
    parser.add_argument("--average_last", type=int, default=5, help="checkpoints averaged for the second score")
    args, train_options = parser.parse_known_args(argv)
    files = {f"{split}_{side}": os.path.join(args.data_dir, f"{name}.{lang}")
             for split, name in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr"))
             for side, lang in (("source", "en"), ("target", "de"))}
    missing = [path for path in files.values() if not os.path.isfile(path)]
    if missing:
        parser.error(f"missing Multi30k files: {', '.join(missing)}")
    if args.minutes <= 0:
        parser.error("--minutes must be positive")

    from training.average_checkpoints import average_checkpoints, last_checkpoints
    from training.train import main as train_main
    from training.trainer import translation_scores
    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    machine = machine_description()
    train_argv = ["--preset", "multi30k", *[item for k, v in files.items() for item in (f"--{k}", v)],
                  "--max_train_minutes", str(args.minutes), "--max_steps", "1000000", "--save_steps", "100",
                  "--save_total_limit", str(max(args.average_last, 1)), "--average_last_n_checkpoints", "0",
                  "--output_dir", args.output_dir, "--overwrite_output_dir", "true", *train_options]
    started = time.monotonic()
    metrics = train_main(train_argv)
    final = {k.removeprefix("test_"): v for k, v in metrics.items() if k.startswith("test_")}

    checkpoints = last_checkpoints(args.output_dir, min(args.average_last, len(
        [n for n in os.listdir(args.output_dir) if n.startswith("checkpoint-")])))
    averaged_dir = os.path.join(args.output_dir, "averaged")
    average_checkpoints(checkpoints, averaged_dir, overwrite=True)  # this script made it on an earlier run
    sources = open(files["test_source"], encoding="utf-8").read().splitlines()
    references = open(files["test_target"], encoding="utf-8").read().splitlines()
    model, tokenizer = load_model_and_tokenizer(averaged_dir)  # on the GPU when there is one
    averaged = translation_scores(translate(model, tokenizer, sources, batch_size=64), references)
    total_minutes = (time.monotonic() - started) / 60

    state = json.load(open(os.path.join(args.output_dir, "trainer_state.json"), encoding="utf-8"))
    command = "python benchmarks/benchmark_multi30k.py " + " ".join(shlex.quote(a) for a in argv)
    text = f"""{SECTION}

Multi30k test_2016_flickr, English -> German, sacreBLEU (13a, cased) with beam 4 / length penalty 0.6, after a
fixed wall-clock training budget. Published text-only Transformer baselines reach about 38-41 BLEU on this set
after long GPU training; a CPU budget of minutes is far from that and is meant as a reproducible floor.

| budget | machine | steps | final weights BLEU / chrF | average of last {len(checkpoints)} checkpoints BLEU / chrF |
| --- | --- | --- | --- | --- |
| {args.minutes:g} min training ({total_minutes:.0f} min in all) | {machine} | {state["global_step"]} | {final.get("bleu", float("nan")):.2f} / {final.get("chrf", float("nan")):.2f} | {averaged["bleu"]:.2f} / {averaged["chrf"]:.2f} |

Command ({date.today().isoformat()}):

```bash
{command}
```
"""  # noqa: E501  (a Markdown table row)
    write_section(SECTION, text, args.results)
    print(text)


if __name__ == "__main__":
    main()
