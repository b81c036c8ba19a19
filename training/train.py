"""Train a translation Transformer: `python -m training.train --help` lists the options. The same command as
`vanilla-transformer train`, with its exit-code rule (usage error 2, any other failure 1, one line)."""

import sys

# the command line's entry point, loaded before the package: --help and usage errors import neither torch nor
# transformers (vanilla_transformer_cli's docstring)
from vanilla_transformer_cli import main as command_line


def main(argv: list[str] | None = None) -> None:
    command_line(["train", *(sys.argv[1:] if argv is None else argv)])


if __name__ == "__main__":
    main()
