"""Quality benchmark (not a test) of `--augment`: train the same preset for the same minutes without and with
augmentation, and score Multi30k test_2016_flickr (English -> German) as written, upper-cased and title-cased.

    python benchmarks/augment.py --minutes 30 [--augment upper=0.05,title=0.05,typos=0.02,noise=0.01] [--write]
    python benchmarks/augment.py --score-only --output-dir DIR [--write]   # score the two runs DIR already holds

Both runs train `--preset` (default `multi30k-pre-ln`) on Multi30k's train split with `--max_train_minutes
MINUTES` (the recipe plans its steps from the measured step time, training/budget.py), the second with `--augment
SPEC`; any further options go to both runs (`python -m vanilla_transformer.training.train`). Each final model (the
preset's checkpoint average) translates the test sources three times, as written, `str.upper()`-ed and title-cased
as OpusTrainer's TitleCase does (training/augmentation.py), with `vanilla_transformer.translate` and the model's
generation config, the upper- and title-cased ones twice: by the model alone (`recase=False`) and recased as
`translate` does by default (vanilla_transformer/casing.py); each output is scored against the references as
written by case-insensitive sacreBLEU (13a, both sides case-folded: `str.casefold`, so that a German "STRASSE"
matches "Straße", which `lowercase=True` would not): the question is whether the model still translates, not whether
it mirrors the input's case.
`--data_dir` defaults to Multi30k beside the checkout (../shared/data/multi30k, or ../../shared/... from a
worktree). `--score-only` trains nothing and scores the runs OUTPUT_DIR holds (after a change to translation).
`--write` replaces this benchmark's section of benchmarks/RESULTS.md. Whether augmentation may become a
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
# (column, change of the source, recased by `translate`)
FORMS = (("as written", str, True), ("upper-cased, model alone", "upper", False),
         ("title-cased, model alone", "title", False), ("upper-cased, recased", "upper", True),
         ("title-cased, recased", "title", True))


def read_lines(path: str) -> list[str]:
    with open(path, encoding="utf-8") as f:
        return f.read().splitlines()


def score_forms(folder: str, sources: list[str], references: list[str]) -> dict[str, float]:
    """Case-insensitive sacreBLEU of `folder`'s translations of `sources` in each of `FORMS`."""
    import sacrebleu

    from vanilla_transformer.training.augmentation import title_case, upper_case
    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    model, tokenizer = load_model_and_tokenizer(folder)  # on the GPU when there is one
    bleu = sacrebleu.BLEU(tokenize="13a")  # on case-folded text: "ß" and "SS" are one
    references = [reference.casefold() for reference in references]
    changes = {"upper": upper_case, "title": title_case}
    scores = {}
    for form, change, recase in FORMS:
        change = changes.get(change, change)
        hypotheses = translate(model, tokenizer, [change(s) for s in sources], batch_size=64, recase=recase)
        scores[form] = round(bleu.corpus_score([h.strip().casefold() for h in hypotheses], [references]).score, 2)
    scores["signature"] = str(bleu.get_signature())
    return scores


def spec_of(probabilities: dict[str, float]) -> str:
    """The `--augment` value of a run's recorded probabilities."""
    from vanilla_transformer.training.augmentation import MODIFIERS

    return ",".join(f"{name}={probabilities[name]:g}" for name in MODIFIERS if probabilities.get(name))


def steps_of(output_dir: str) -> int:
    with open(os.path.join(output_dir, "trainer_state.json"), encoding="utf-8") as f:
        return json.load(f)["global_step"]


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
    parser.add_argument("--score-only", action="store_true",
                        help="train nothing: score the runs OUTPUT_DIR/plain and OUTPUT_DIR/augment already hold")
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
        if args.score_only:
            with open(os.path.join(output_dir, "all_results.json"), encoding="utf-8") as f:
                results = json.load(f)
            extra = ["--augment", spec_of(results["augmentation"])] if results.get("augmentation") else []
            args.minutes = results.get("time_budget", {}).get("minutes", args.minutes)  # what the runs trained
            rows.append((arm, extra, steps_of(output_dir), score_forms(output_dir, sources, references)))
            continue
        train_main(["--preset", args.preset, *[item for k, v in files.items() for item in (f"--{k}", v)],
                    "--max_train_minutes", str(args.minutes), "--output_dir", output_dir,
                    "--overwrite_output_dir", "true", *extra, *train_options])
        rows.append((arm, extra, steps_of(output_dir), score_forms(output_dir, sources, references)))

    command = "python benchmarks/augment.py " + " ".join(shlex.quote(a) for a in argv)
    table = "\n".join(f"| {'`' + ' '.join(extra) + '`' if extra else 'none'} | {steps:,} | "
                      + " | ".join(f"{scores[form]:.2f}" for form, _, _ in FORMS) + " |"
                      for arm, extra, steps, scores in rows)
    text = f"""{SECTION}

Multi30k test_2016_flickr, English -> German, preset `{args.preset}`, {args.minutes:g} minutes of training per run
on {machine} ({(time.monotonic() - started) / 60:.0f} min {"of scoring" if args.score_only else "in all"}). The test
sources translated as written, upper-cased and title-cased (OpusTrainer's TitleCase), the last two by the model alone
(`recase=False`) and recased as `translate`, `serve` and the pipeline do by default (vanilla_transformer/casing.py);
sacreBLEU on case-folded text (`str.casefold` of both sides, so that "STRASSE" is "Straße") against the references
as written (`{rows[0][3]["signature"]}`). Training pairs changed
by `--augment` (training/augmentation.py, docs/train.md).

| augmentation | steps | {" | ".join(form for form, _, _ in FORMS)} |
| --- | --- |{" --- |" * len(FORMS)}
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
