"""The `vanilla-transformer` command: thin glue over the package.

Each subcommand lives beside the code it drives and contributes `add_subcommand(subparsers)`, which registers its
parser and sets `func` to a callable taking the parsed arguments.
"""

import argparse
import importlib
import sys

from huggingface_hub.errors import StrictDataclassError

# module (relative to this package) -> what it adds; imported lazily so a missing optional extra fails only there
SUBCOMMAND_MODULES = ["translate", "convert", "export", "visualize"]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=__doc__.split("\n\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for module in SUBCOMMAND_MODULES:
        importlib.import_module(f".{module}", __package__).add_subcommand(subparsers)
    from .commands import explore

    explore.add_parser(subparsers)
    return parser


def main(argv: list[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        args.func(args)
    except StrictDataclassError as error:  # an invalid config: transformers validates configs with @strict
        sys.exit(f"{parser.prog} {args.command}: error: {error.__cause__ or error}")


if __name__ == "__main__":
    main()
