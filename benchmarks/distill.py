"""Sequence-level knowledge distillation on Multi30k En->De (not a test): `vanilla-transformer distill` with a given
teacher, and the same student trained on the original pairs for the same minutes.

    python benchmarks/distill.py --teacher outputs/multi30k --minutes 30              # print the table
    python benchmarks/distill.py --teacher outputs/multi30k --minutes 30 --write      # and into RESULTS.md
    python benchmarks/distill.py --teacher outputs/m120 --reference outputs/m30 --minutes 30 --write
    python benchmarks/distill.py --teacher T --preset multi30k-student -- --encoder-layers 4 --decoder-layers 2

Two runs of the student preset (`--preset`, default `multi30k-student`), each with a time budget of `--minutes`, or
each of `--steps` steps (the same student makes the same steps in the same minutes on a quiet machine; a step count
keeps the two runs equal where other work shares the machine, or where they run side by side):

- distilled: `vanilla-transformer distill --teacher T` on Multi30k's train.en (the teacher translates it with its own
  beam search), validation val.{en,de}, test test_2016_flickr.{en,de}; its report.md compares teacher and student;
  with `--closest-to-original`, `distill --closest-to train.de`: of the teacher's beam's best translations of each
  line, the one closest to the original (Kim & Rush's sequence-level interpolation);
- original: the recipe on the original pairs train.{en,de}, the same options, exported to CTranslate2 int8 as distill
  exports its student, and scored the same way (`training.distill.timed`, `translation_scores`).

With `--reference R` (the issue's yardstick: the 30-minute `multi30k-pre-ln` model), R is exported and measured the
same way, and the table ends with the student's BLEU difference and speed ratio against it.

The table: BLEU and chrF on val and test2016 (CTranslate2 int8), sentences/s (int8, beam as each model's
generation_config, 1 thread and every thread), parameters and size of the int8 export, for the teacher, the two
students and the reference; then distilled minus original pairs, and the student against the reference.
The speeds are measured anew by every run, side by side: all the int8 exports translate test2016 in alternating rounds
(`--rounds`, after one warm-up round), and the table gives each one's median, so the ratios compare models timed under
the same conditions (the distillation's own report times each model once, when its stage ends).

Everything lives in `--out` (default outputs/distill-benchmark): a benchmark stopped midway continues where it was
when run again with the same options. Multi30k is found beside the checkout (../shared/data/multi30k) or
beside its folder of worktrees, as the other benchmarks find it; `--data` overrides. The extra recipe options after
`--` go to both students.
"""

import argparse
import json
import os
import sys
from datetime import date
from pathlib import Path

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.checkout import ROOT  # noqa: E402

SECTION = "## Distillation: Multi30k En->De"
DATA = next((folder / "shared" / "data" / "multi30k" for folder in (ROOT.parent, ROOT.parent.parent)
             if (folder / "shared" / "data" / "multi30k").is_dir()), ROOT.parent / "shared" / "data" / "multi30k")
FILES = {"train": ("train.en", "train.de"), "validation": ("val.en", "val.de"),
         "test": ("test_2016_flickr.en", "test_2016_flickr.de")}


def recipe_options(args) -> list[str]:
    budget = ["--max-steps", str(args.steps)] if args.steps else ["--max-train-minutes", f"{args.minutes:g}"]
    return ["--preset", args.preset, *budget, *args.recipe]


def distilled(args, data: Path, out: Path) -> dict:
    """The chain (resumed when stopped); its report.json."""
    from vanilla_transformer.cli.main import main as command_line

    files = {split: [str(data / name) for name in names] for split, names in FILES.items()}
    interpolation = ["--closest-to", files["train"][1]] if args.closest_to_original else []
    command_line(["distill", "--teacher", args.teacher, "--out", str(out / "distilled"), *interpolation,
                  "--train-source", files["train"][0], "--validation-source", files["validation"][0],
                  "--validation-target", files["validation"][1], "--test-source", files["test"][0],
                  "--test-target", files["test"][1], "--", *recipe_options(args)])
    return json.loads((out / "distilled" / "report.json").read_text(encoding="utf-8"))


def original(args, data: Path, out: Path, bleu_tokenize: str) -> dict:
    """The same student on the original pairs (resumed when stopped), exported to int8 and measured as distill
    measures its student (BLEU with the distillation's tokenization: the preset's)."""
    from transformers.trainer_utils import get_last_checkpoint

    from vanilla_transformer.cli.main import main as command_line

    folder = out / "original"
    if not (out / "original.json").is_file() and not (folder / "all_results.json").is_file():
        resume = ["--resume-from-checkpoint", "true"] if folder.is_dir() and get_last_checkpoint(str(folder)) else []
        command_line(["train", *recipe_options(args), "--train-source", str(data / FILES["train"][0]),
                      "--train-target", str(data / FILES["train"][1]), "--output-dir", str(folder), *resume])
    return measured(args, data, out, "original", folder, bleu_tokenize)


def measured(args, data: Path, out: Path, name: str, folder: Path, bleu_tokenize: str) -> dict:
    """A trained folder exported to CTranslate2 int8 (in `out`/NAME-ct2) and scored as distill scores its student:
    BLEU and chrF on val and test2016 (its speed is `side_by_side`'s); kept in NAME.json."""
    from vanilla_transformer.files import read_text_lines
    from vanilla_transformer.training.distill import Distillation, export, folder_bytes, parameters, timed, write_json
    from vanilla_transformer.training.metrics import translation_scores

    results = out / f"{name}.json"
    if results.is_file():
        return json.loads(results.read_text(encoding="utf-8"))
    exported = export(str(folder), str(out / f"{name}-ct2"), "int8")
    measuring = Distillation(teacher=args.teacher, out=str(out), train_source=str(data / FILES["train"][0]))
    entry = {"folder": str(folder), "parameters": parameters(str(folder)), "size_bytes": folder_bytes(exported),
             "scores": {}}
    for split in ("validation", "test"):
        sources, references = (read_text_lines(str(data / file), file) for file in FILES[split])
        output = str(out / f"{name}.int8.{split}.txt")
        timed(measuring, exported, "int8", measuring.thread_counts[-1], sources, output)  # the translations
        entry["scores"][split] = translation_scores(read_text_lines(output, "translations"), references,
                                                   bleu_tokenize)
    write_json(str(results), entry)
    return entry


def exports(report: dict, out: Path, reference: dict | None) -> dict[str, str]:
    """The int8 CTranslate2 folder of every model in the table: {role: folder}."""
    folders = {"teacher": report["models"]["teacher"]["int8"]["folder"],
               "student": report["models"]["student"]["int8"]["folder"], "original": str(out / "original-ct2")}
    if reference is not None:
        folders["reference"] = str(out / "reference-ct2")
    return folders


def side_by_side(report: dict, data: Path, folders: dict[str, str], rounds: int) -> dict:
    """Sentences/s of every int8 export on test2016, at each of the report's thread counts: the exports translate the
    same sources in alternating rounds (the order reversed every other round; a first round warms up, uncounted), and
    each one's median round counts: {role: {threads: {"sentences", "seconds", "sentences_per_second", "rounds"}}}."""
    import statistics
    import time

    from vanilla_transformer.files import read_text_lines
    from vanilla_transformer.training.distill import translator
    from vanilla_transformer.translate import translate

    sources = read_text_lines(str(data / FILES["test"][0]), FILES["test"][0])
    beams = {"num_beams": report["num_beams"]} if report["num_beams"] else {}  # else each model's own
    options = {"batch_size": report["batch_size"], **beams}
    speeds = {role: {} for role in folders}
    for threads in report["threads"]:
        loaded = {role: translator(folder, "int8", threads) for role, folder in folders.items()}
        seconds = {role: [] for role in folders}
        for index in range(rounds + 1):
            for role in (list(folders) if index % 2 == 0 else list(reversed(folders))):
                model, tokenizer = loaded[role]
                start = time.perf_counter()
                translate(model, tokenizer, sources, **options)
                if index:
                    seconds[role].append(time.perf_counter() - start)
        for role, times in seconds.items():
            median = statistics.median(times)
            speeds[role][str(threads)] = {"sentences": len(sources), "seconds": median,
                                          "sentences_per_second": len(sources) / median, "rounds": rounds}
        del loaded
    return speeds


def table(args, report: dict, baseline: dict, reference: dict | None, speeds: dict) -> str:
    from benchmarks.report import machine_description, software_versions

    distilled_name = ("student on the teacher's translations closest to the original"
                      if args.closest_to_original else "student on the teacher's translations")
    rows = {"teacher": (report["teacher"], report["models"]["teacher"]["int8"], speeds["teacher"]),
            distilled_name: (report["student"], report["models"]["student"]["int8"], speeds["student"]),
            "student on the original pairs": (baseline, baseline, speeds["original"])}
    if reference is not None:
        rows[f"reference `{args.reference}`"] = (reference, reference, speeds["reference"])
    threads = report["threads"]
    header = ["model", "parameters", "int8 size", "BLEU val", "chrF val", "BLEU test2016", "chrF test2016",
              *[f"sent/s, {n} thread{'s' if n > 1 else ''}" for n in threads]]
    lines = [SECTION, "", f"Measured {date.today().isoformat()} on {machine_description()}; {software_versions()}.",
             f"Command: `python benchmarks/distill.py {' '.join(sys.argv[1:])}`", "",
             f"Teacher `{args.teacher}`; both students: `--preset {args.preset}` with "
             + (f"{args.steps:,} steps" if args.steps else f"a {args.minutes:g}-minute budget")
             + (f" and `{' '.join(args.recipe)}`" if args.recipe else "") + ". Translated by CTranslate2 "
             f"in int8, each model's own beam search; sacreBLEU ({report['bleu_tokenize']} tokenization) and chrF. "
             f"Sentences/s: test2016, {report['batch_size']} sentences a batch, the int8 exports timed side by side "
             f"in this run, medians of {args.rounds} alternating rounds.", "",
             "| " + " | ".join(header) + " |", "|" + " --- |" * len(header)]
    for name, (facts, measured, speed) in rows.items():
        size = facts["size_bytes"] if isinstance(facts["size_bytes"], int) else facts["size_bytes"].get(
            "ctranslate2 int8", facts["size_bytes"].get("ctranslate2 (as given)"))
        scores = [f"{measured['scores'][split][metric]:.2f}" for split in ("validation", "test")
                  for metric in ("bleu", "chrf")]
        rates = [f"{speed[str(n)]['sentences_per_second']:.1f}" for n in threads]
        parameters = f"{facts['parameters']:,}" if facts["parameters"] else "unknown"
        lines.append("| " + " | ".join([name, parameters, f"{size / 1e6:.1f} MB", *scores, *rates]) + " |")
    lines += ["", *comparisons(report["models"]["student"]["int8"], baseline, reference, threads, speeds)]
    return "\n".join(lines) + "\n"


def comparisons(student: dict, baseline: dict, reference: dict | None, threads, speeds: dict) -> list[str]:
    """The differences the targets are read from: distilled against original pairs (BLEU), and the student against
    the reference (BLEU, and the side-by-side sentences/s of `side_by_side` at each thread count as a ratio)."""
    def bleu(entry, split):
        return entry["scores"][split]["bleu"]

    found = ["Student on the teacher's translations minus the same student on the original pairs: "
             + ", ".join(f"{bleu(student, split) - bleu(baseline, split):+.2f} BLEU {split}"
                         for split in ("validation", "test")) + "."]
    if reference is not None:
        def speed(role, n):
            return speeds[role][str(n)]["sentences_per_second"]

        ratios = ", ".join(f"{speed('student', n) / speed('reference', n):.2f}x at {n} thread{'s' if n > 1 else ''}"
                           for n in threads)
        found.append("Student on the teacher's translations against the reference: "
                     + ", ".join(f"{bleu(student, split) - bleu(reference, split):+.2f} BLEU {split}"
                                 for split in ("validation", "test")) + f"; sentences/s {ratios}.")
    return found


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog=__doc__.split("\n\n", 1)[1])
    parser.add_argument("--teacher", required=True, help="the teacher: a trained folder or its CTranslate2 export")
    parser.add_argument("--data", default=str(DATA), help=f"the Multi30k folder (default {DATA})")
    parser.add_argument("--out", default=str(ROOT / "outputs" / "distill-benchmark"),
                        help="the benchmark's folder (default outputs/distill-benchmark)")
    parser.add_argument("--preset", default="multi30k-student", help="the students' preset (default multi30k-student)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--minutes", type=float, default=30.0, help="each student's time budget (default 30)")
    budget.add_argument("--steps", type=int, help="each student's steps, instead of a time budget")
    parser.add_argument("--reference", help="a trained folder to compare the student with (e.g. the 30-minute "
                        "multi30k-pre-ln model): exported to int8 and measured the same way")
    parser.add_argument("--closest-to-original", action="store_true",
                        help="distill --closest-to train.de: of the teacher's beam's best translations of each line, "
                             "the one closest to the original (sequence-level interpolation)")
    parser.add_argument("--rounds", type=int, default=3,
                        help="timed rounds of the side-by-side speed measurement (default 3, after a warm-up round)")
    parser.add_argument("--write", action="store_true", help="replace this benchmark's section of RESULTS.md")
    parser.add_argument("recipe", nargs=argparse.REMAINDER, metavar="-- RECIPE OPTIONS",
                        help="more recipe options for both students, after --")
    args = parser.parse_args(argv)
    args.recipe = args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe
    if not args.minutes > 0:
        parser.error(f"--minutes must be positive, got {args.minutes}")
    if args.rounds < 1:
        parser.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.steps is not None and args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    data = Path(args.data)
    missing = [name for names in FILES.values() for name in names if not (data / name).is_file()]
    if missing:
        parser.error(f"--data {data} lacks {', '.join(missing)}")
    for option in ("teacher", "reference"):
        if getattr(args, option) is not None and not os.path.isdir(getattr(args, option)):
            parser.error(f"--{option} folder not found: {getattr(args, option)}")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    report = distilled(args, data, out)
    reference = (measured(args, data, out, "reference", Path(args.reference), report["bleu_tokenize"])
                 if args.reference else None)
    baseline = original(args, data, out, report["bleu_tokenize"])
    speeds = side_by_side(report, data, exports(report, out, reference), args.rounds)
    text = table(args, report, baseline, reference, speeds)
    print("\n" + text)
    if args.write:
        from benchmarks.report import write_section

        write_section(SECTION, text)


if __name__ == "__main__":
    main()
