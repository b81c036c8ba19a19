"""`vanilla-transformer train [OPTIONS]`: the training recipe, `python -m training.train [OPTIONS]` by another name.

Every option is the recipe's own (`vanilla-transformer train --help` lists them), so the command parses nothing
itself and hands the whole command line to `vanilla_transformer.training.train.main`. Needs the train extra:
pip install "vanilla-transformer[train]".
"""

import argparse


def add_parser(subparsers) -> argparse.ArgumentParser:
    # no options of its own (prefix_chars no option can start with): every word, --help included, is the recipe's
    parser = subparsers.add_parser("train", help="train a model: the recipe of `python -m training.train`",
                                   add_help=False, prefix_chars="\0")
    parser.add_argument("options", nargs=argparse.REMAINDER, help="the options of python -m training.train")
    return parser


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.training.train import main

    main(args.options)
