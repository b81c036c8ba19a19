"""`python -m vanilla_transformer ...` is the `vanilla-transformer` command."""

from vanilla_transformer.cli.main import main

main()
