"""`vanilla-transformer study table3 --out DIR [--steps N | --minutes M] [--seeds K] [--rows A,B,...] [--passes P]
[--jobs J] -- RECIPE OPTIONS`: the paper's Table 3 re-run on your data (vanilla_transformer.training.table3;
docs/table3.md).

    vanilla-transformer study table3 --out studies/table3 -- --preset multi30k-pre-ln \\
        --train_source train.en --train_target train.de --validation_source val.en --validation_target val.de

The options after `--` are the recipe's (`vanilla-transformer train --help`), shared by every row: with the preset they
make the base row. Needs the train extra, and the plot extra for the figure.
"""

import argparse

from vanilla_transformer.cli.options import UsageError, checked, non_negative_float, positive_float, positive_int

GROUPS = ("A", "B", "C", "D", "E")  # the paper's groups of rows (the base row is always trained)


def _groups(text: str) -> tuple[str, ...]:
    groups = tuple(dict.fromkeys(part.strip().upper() for part in text.split(",") if part.strip()))
    unknown = [group for group in groups if group not in GROUPS]
    if unknown or not groups:
        raise argparse.ArgumentTypeError(f"must be some of {','.join(GROUPS)}, got {text!r}")
    return groups


def add_parser(subparsers) -> argparse.ArgumentParser:
    study = subparsers.add_parser("study", help="re-run a study of the paper on your data (table3)",
                                  description="Re-run a study of the paper on your data.")
    studies = study.add_subparsers(dest="study", required=True)
    parser = studies.add_parser(
        "table3", help="Table 3: variations of the base model, each trained for the same steps",
        description="Table 3 of the paper re-run on your data: the base row (over several seeds) and rows A-E "
                    "scaled to it, every row trained for the same number of steps; writes table3.md, table3.json and "
                    "table3.png into --out. A study that is stopped continues where it was when run again.")
    parser.add_argument("--out", required=True, metavar="DIR", help="the study folder (new or empty, or a study to "
                                                                    "continue)")
    budget = parser.add_mutually_exclusive_group()
    budget.add_argument("--steps", action=checked(positive_int), help="steps of every row")
    budget.add_argument("--minutes", action=checked(positive_float),
                        help="every row trains the steps the base row makes in this many minutes (default 5)")
    parser.add_argument("--passes", action=checked(non_negative_float),
                        help="with --minutes: every row trains on the first pairs of the training data that its steps "
                             "pass over this many times (default 20, about the paper's passes over WMT 2014; 0: all "
                             "the pairs)")
    parser.add_argument("--seeds", action=checked(positive_int), default=3,
                        help="seeds of the base row, for the run-to-run spread (default 3)")
    parser.add_argument("--rows", type=_groups, default=GROUPS, metavar="A,B,...",
                        help="the groups of rows to train (default: all, A,B,C,D,E)")
    parser.add_argument("--jobs", action=checked(positive_int),
                        help="rows trained at once, each in a process of its own on its own CPUs (default: one per "
                             "CPU, as many as the memory holds at 3 GB a row; 1 where CUDA is available)")
    parser.add_argument("--no-figure", action="store_true", help="write no table3.png (needs no matplotlib)")
    parser.add_argument("recipe", nargs=argparse.REMAINDER, metavar="-- RECIPE OPTIONS",
                        help="the recipe's options for every row (data and --preset), after --")
    parser.set_defaults(command_parser=parser)
    return study


def check(args: argparse.Namespace) -> None:
    recipe = args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe
    if recipe and not recipe[0].startswith("-"):
        raise UsageError(f"unexpected {recipe[0]!r}: the recipe's options come after --")
    args.recipe = recipe


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.training.table3 import run_study

    run_study(args.out, args.recipe, steps=args.steps, minutes=args.minutes, seeds=args.seeds, groups=args.rows,
              figure=not args.no_figure, jobs=args.jobs, passes=args.passes)
