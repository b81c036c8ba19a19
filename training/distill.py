"""Distill a teacher into a small, fast student: `python -m training.distill --help`, which is
`vanilla-transformer distill --help` (sequence-level knowledge distillation; docs/small-and-fast.md)."""

import sys

from vanilla_transformer.cli.main import main

if __name__ == "__main__":
    main(["distill", *sys.argv[1:]])
