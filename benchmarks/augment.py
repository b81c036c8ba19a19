"""Quality benchmark (not a test) of `--augment`: train the same preset for the same minutes without and with
augmentation, and score Multi30k test_2016_flickr (English -> German) as written, upper-cased and title-cased.

    python benchmarks/augment.py --minutes 30 [--augment upper=0.05,title=0.05,typos=0.02,noise=0.01] [--write]

Both runs train `--preset` (default `multi30k-pre-ln`) on Multi30k's train split with `--max_train_minutes
MINUTES` (the recipe plans its steps from the measured step time, training/budget.py), the second with `--augment
SPEC`; any further options go to both runs (`python -m vanilla_transformer.training.train`). Each final model (the
preset's checkpoint average) translates the test sources three times, as written, `str.upper()`-ed and title-cased
as OpusTrainer's TitleCase does (training/augmentation.py), with `vanilla_transformer.translate` and the model's
generation config; each output is scored against the references as written by case-insensitive sacreBLEU (13a,
`lowercase=True`): the question is whether the model still translates, not whether it mirrors the input's case.
`--data_dir` defaults to Multi30k beside the checkout (../shared/data/multi30k, or ../../shared/... from a
worktree). `--write` replaces this benchmark's section of benchmarks/RESULTS.md. Whether augmentation may become a
preset's default is decided on this table: no BLEU lost on the text as written.
"""

import argparse
import json
import os
import shlex
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
from benchmarks.checkout import ROOT as REPO_ROOT  # noqa: E402
from benchmarks.report import RESULTS, machine_description, software_versions, write_section  # noqa: E402

SECTION = "## Augmentation: ALL-CAPS and Title Case input"
DEFAULT_AUGMENT = "upper=0.05,title=0.05,typos=0.02,noise=0.01"
# Multi30k beside the checkout (../shared), or beside the folder of worktrees (../../shared)
DATA = next((folder / "shared" / "data" / "multi30k" for folder in (REPO_ROOT.parent, REPO_ROOT.parent.parent)
             if (folder / "shared" / "data" / "multi30k").is_dir()), REPO_ROOT.parent / "shared" / "data" / "multi30k")
FORMS = ("as written", "upper-cased", "title-cased")


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def score_forms(folder: str, sources: list[str], references: list[str]) -> dict[str, float]:
    """Case-insensitive sacreBLEU of `folder`'s translations of `sources` in each of `FORMS`."""
    import sacrebleu

    from vanilla_transformer.training.augmentation import title_case, upper_case
    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    model, tokenizer = load_model_and_tokenizer(folder)  # on the GPU when there is one
    bleu = sacrebleu.BLEU(tokenize="13a", lowercase=True)
    scores = {}
    for form, change in zip(FORMS, (str, upper_case, title_case)):
        hypotheses = translate(model, tokenizer, [change(s) for s in sources], batch_size=64)
        scores[form] = round(bleu.corpus_score([h.strip() for h in hypotheses], [references]).score, 2)
    scores["signature"] = str(bleu.get_signature())
    return scores


def main(argv: list[str] | None = None) -> None:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", "--data-dir", type=Path, default=DATA,
                        help=f"folder with train/val/test_2016_flickr .en and .de files (default: {DATA})")
    parser.add_argument("--minutes", type=float, default=30.0, help="wall-clock training budget of each run")
    parser.add_argument("--preset", default="multi30k-pre-ln", help="training preset (default: multi30k-pre-ln)")
    parser.add_argument("--augment", default=DEFAULT_AUGMENT, help=f"the second run's --augment (default: "
                                                                   f"{DEFAULT_AUGMENT})")
    parser.add_argument("--output_dir", "--output-dir", default=os.path.join("outputs", "augment-benchmark"),
                        help="the runs go to OUTPUT_DIR/plain and OUTPUT_DIR/augment")
    parser.add_argument("--write", action="store_true", help="replace this benchmark's section of RESULTS.md")
    parser.add_argument("--results", type=Path, default=RESULTS, help="default: benchmarks/RESULTS.md")
    args, train_options = parser.parse_known_args(argv)
    if not args.minutes > 0:
        parser.error("--minutes must be positive")
    from vanilla_transformer.training.augmentation import parse_augment

    try:
        parse_augment(args.augment)
    except ValueError as error:
        parser.error(str(error))
    files = {f"{split}_{side}": str(args.data_dir / f"{name}.{lang}")
             for split, name in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr"))
             for side, lang in (("source", "en"), ("target", "de"))}
    missing = [path for path in files.values() if not os.path.isfile(path)]
    if missing:
        parser.error(f"missing Multi30k files: {', '.join(missing)}")

    from vanilla_transformer.training.train import main as train_main

    machine, started = machine_description(), time.monotonic()
    sources, references = read_lines(files["test_source"]), read_lines(files["test_target"])
    rows = []
    for arm, extra in (("plain", []), ("augment", ["--augment", args.augment])):
        output_dir = os.path.join(args.output_dir, arm)
        train_main(["--preset", args.preset, *[item for k, v in files.items() for item in (f"--{k}", v)],
                    "--max_train_minutes", str(args.minutes), "--output_dir", output_dir,
                    "--overwrite_output_dir", "true", *extra, *train_options])
        with open(os.path.join(output_dir, "trainer_state.json"), encoding="utf-8") as f:
            steps = json.load(f)["global_step"]
        rows.append((arm, extra, steps, score_forms(output_dir, sources, references)))

    command = "python benchmarks/augment.py " + " ".join(shlex.quote(a) for a in argv)
    table = "\n".join(f"| {'`--augment ' + args.augment + '`' if extra else 'none'} | {steps:,} | "
                      + " | ".join(f"{scores[form]:.2f}" for form in FORMS) + " |"
                      for arm, extra, steps, scores in rows)
    text = f"""{SECTION}

Multi30k test_2016_flickr, English -> German, preset `{args.preset}`, {args.minutes:g} minutes of training per run
on {machine} ({(time.monotonic() - started) / 60:.0f} min in all). The test sources translated as written,
upper-cased and title-cased (OpusTrainer's TitleCase); case-insensitive sacreBLEU against the references as written
(`{rows[0][3]["signature"]}`). Training pairs changed by `--augment` (training/augmentation.py, docs/train.md).

| augmentation | steps | BLEU as written | upper-cased input | title-cased input |
| --- | --- | --- | --- | --- |
{table}

Command ({datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")}; {software_versions()}):

```bash
{command}
```
"""
    print(text)
    if args.write:
        write_section(SECTION, text, args.results)


if __name__ == "__main__":
    main()
