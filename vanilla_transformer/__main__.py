"""`python -m vanilla_transformer ...` is the `vanilla-transformer` command."""

from .cli import main

main()
