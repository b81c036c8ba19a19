"""`vanilla-transformer distill`: sequence-level knowledge distillation (Kim & Rush 2016) as one command, `python -m
training.distill` by another name (vanilla_transformer.training.distill; docs/small-and-fast.md).

    vanilla-transformer distill --teacher outputs/multi30k --out distilled --train-source train.en \\
        --validation-source val.en --validation-target val.de --test-source test.en --test-target test.de \\
        -- --preset multi30k-student --max-train-minutes 30

The teacher translates the training source (the `translate` command, resumable), the student trains on the teacher's
translations with the recipe options after `--` (default preset `multi30k-student`), the recipe averages its last
checkpoints, the student is exported to CTranslate2 (int8), and report.md / report.json compare teacher and student
side by side. Run again with the same arguments, it continues where it stopped. Needs the train and fast extras.
"""

import argparse
import os
import stat

from vanilla_transformer.cli.options import UsageError, checked, existing_file, positive_int


def _threads(text: str) -> tuple[int, ...]:
    try:
        values = tuple(sorted({int(part) for part in text.split(",") if part.strip()}))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be thread counts separated by commas, e.g. 1,8, got {text!r}") from None
    if not values or values[0] < 1:
        raise argparse.ArgumentTypeError(f"must be thread counts of at least 1, e.g. 1,8, got {text!r}")
    return values


def _file_read_again(text: str) -> str:
    """A file that exists (`existing_file`), and a regular one: distill reads each of its files more than once (the
    checks before the teacher's pass, the pass, the student's run, the report), which a pipe cannot give."""
    from vanilla_transformer.files import is_stream

    if text != "-" and is_stream(text):
        kind = "a pipe" if stat.S_ISFIFO(os.stat(text).st_mode) else "not a regular file"
        raise argparse.ArgumentTypeError(f"{text} is {kind}: distill reads it more than once; give a file")
    return existing_file(text)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.interop import QUANTIZATIONS

    parser = subparsers.add_parser(
        "distill", help="distill a teacher into a small, fast student (sequence-level knowledge distillation)",
        description="Sequence-level knowledge distillation (Kim & Rush 2016): the teacher translates the training "
                    "source, a student trains on its translations, is averaged and exported to CTranslate2, and "
                    "report.md compares the two (BLEU, chrF, sentences/s, size, parameters). Every stage is kept in "
                    "--out; run again with the same arguments, it continues where it stopped.",
        epilog=__doc__.split("\n\n", 1)[1], formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--teacher", required=True, metavar="DIR",
                        help="the teacher: a trained model folder, or its CTranslate2 export")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the distillation's folder (new or empty, or one to continue)")
    parser.add_argument("--train-source", required=True, metavar="FILE", action=checked(_file_read_again),
                        help="the training source sentences, one per line (plain or gzip'd)")
    parser.add_argument("--with-original", metavar="FILE", action=checked(_file_read_again),
                        help="the original translations of --train-source: the student trains on them too, as a "
                             "second corpus beside the teacher's (docs/small-and-fast.md)")
    parser.add_argument("--closest-to", metavar="FILE", action=checked(_file_read_again),
                        help="the original translations of --train-source: the teacher writes, of its beam's best "
                             "translations of each line, the one closest to the original (sentence BLEU; Kim & "
                             "Rush's sequence-level interpolation)")
    for split in ("validation", "test"):
        parser.add_argument(f"--{split}-source", metavar="FILE", action=checked(_file_read_again),
                            help=f"{split} source sentences, for the student's run and the report")
        parser.add_argument(f"--{split}-target", metavar="FILE", action=checked(_file_read_again),
                            help="their reference translations")
    parser.add_argument("--source-lang", metavar="CODE",
                        help="the corpus's source language (default: --train-source's extension, e.g. train.en)")
    parser.add_argument("--target-lang", metavar="CODE",
                        help="its target language (default: the extension of --validation-target or --test-target)")
    parser.add_argument("--quantization", choices=QUANTIZATIONS, default="int8",
                        help="weight type of the student's CTranslate2 export (default int8)")
    parser.add_argument("--teacher-batch-size", action=checked(positive_int), default=32, metavar="N",
                        help="sentences per batch of the teacher's pass (default 32)")
    parser.add_argument("--teacher-compute-type", default="default", metavar="TYPE",
                        help="a CTranslate2 teacher's compute type (int8, float32, ...; default: as exported)")
    parser.add_argument("--device", help="the teacher's device for its pass (cpu, cuda, ...; default: cuda when "
                                         "available)")
    parser.add_argument("--num-beams", action=checked(positive_int), metavar="N",
                        help="the report's beam size (default: each model's own generation_config)")
    parser.add_argument("--batch-size", action=checked(positive_int), default=32, metavar="N",
                        help="the report's sentences per batch (default 32)")
    parser.add_argument("--threads", action=checked(_threads), metavar="N,M",
                        help="the report's CTranslate2 thread counts (default: 1 and every CPU)")
    parser.add_argument("recipe", nargs=argparse.REMAINDER, metavar="-- RECIPE OPTIONS",
                        help="the student's training options (`vanilla-transformer train --help`), after --")
    return parser


def check(args: argparse.Namespace) -> None:
    recipe = args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe
    if recipe and not recipe[0].startswith("-"):
        raise UsageError(f"unexpected {recipe[0]!r}: the recipe's options come after --")
    args.recipe = recipe
    if args.train_source == "-":
        raise UsageError("--train-source must be a file (the teacher's pass resumes from it), not standard input")
    for name in ("with_original", "closest_to"):
        if getattr(args, name) == "-":
            raise UsageError(f"--{name.replace('_', '-')} must be a file, not standard input")
    for split in ("validation", "test"):
        source, target = getattr(args, f"{split}_source"), getattr(args, f"{split}_target")
        if (source is None) != (target is None):
            raise UsageError(f"give --{split}-source and --{split}-target together")
        if "-" in (source, target):
            raise UsageError(f"--{split}-source and --{split}-target must be files, not standard input")
    if args.validation_source is None and args.test_source is None:
        raise UsageError("the report scores teacher and student: give --validation-source/--validation-target, "
                         "--test-source/--test-target, or both")
    for name in ("source_lang", "target_lang"):
        code = getattr(args, name)
        if code is not None and not (code.isalpha() and code.islower() and 2 <= len(code) <= 3):
            raise UsageError(f"--{name.replace('_', '-')} {code!r} is not a language code (two or three lowercase "
                             "letters, e.g. en)")


def _distillation(args: argparse.Namespace):
    from vanilla_transformer.training.distill import Distillation

    pairs = {split: (getattr(args, f"{split}_source"), getattr(args, f"{split}_target"))
             for split in ("validation", "test")}
    return Distillation(
        teacher=args.teacher, out=args.out, train_source=args.train_source, with_original=args.with_original,
        closest_to=args.closest_to,
        validation=pairs["validation"] if pairs["validation"][0] else None,
        test=pairs["test"] if pairs["test"][0] else None, source_lang=args.source_lang,
        target_lang=args.target_lang, recipe_options=tuple(args.recipe), quantization=args.quantization,
        teacher_batch_size=args.teacher_batch_size, teacher_compute_type=args.teacher_compute_type,
        device=args.device, num_beams=args.num_beams, batch_size=args.batch_size, threads=args.threads)


def teacher_pass(d) -> None:
    """Stage 1: the `translate` command, run here with its own checks and its resumable output."""
    from vanilla_transformer.cli import translate as translate_command
    from vanilla_transformer.training.distill import distilled_path, teacher_pass_options

    output = distilled_path(d)
    if os.path.isfile(output):
        print(f"Teacher's translations: finished ({output})", flush=True)
        return
    print(f"Teacher's translations: {d.teacher} translates {d.train_source} into {output}", flush=True)
    parser = argparse.ArgumentParser(prog="vanilla-transformer distill")
    translate_parser = translate_command.add_parser(parser.add_subparsers())
    options = translate_parser.parse_args(teacher_pass_options(d))
    translate_command.check(options)
    translate_command.run(options)


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.files import RunLock
    from vanilla_transformer.training import distill

    d = distill.prepare(_distillation(args))
    distill.open_folder(d)
    with RunLock(d.out, what="--out"):  # one distillation at a time in --out
        teacher_pass(d)
        distill.finish(d)
