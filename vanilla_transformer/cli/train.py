"""`vanilla-transformer train [OPTIONS]`: the training recipe, `python -m training.train [OPTIONS]` by another name.

Every option is the recipe's own (`vanilla-transformer train --help` lists them), so the command parses nothing
itself and hands the whole command line to `vanilla_transformer.training.train.main`. Its `--help` and argparse's
usage errors are answered before torch and transformers are imported, from the table of the options kept by an
earlier use of the command (`training.option_table`). Needs the train extra: pip install "vanilla-transformer[train]".
"""

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    # no options of its own (prefix_chars no option can start with): every word, --help included, is the recipe's
    parser = subparsers.add_parser("train", help="train a model: the recipe of `python -m training.train`",
                                   add_help=False, prefix_chars="\0")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the options of python -m training.train")
    return parser


def check(args: argparse.Namespace) -> None:
    """--help (exit 0) and argparse's usage errors (exit 2), from the kept table of the options; without one, the
    recipe's own parser answers them, and keeps the table for the next command."""
    from vanilla_transformer.training.option_table import cached_table, check_command_line

    table = cached_table()
    if table is not None:
        check_command_line(args.options, table)


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.training.train import main

    main(args.options)
