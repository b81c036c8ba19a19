"""The `vanilla-transformer` subcommands: one module per command, each with `add_parser(subparsers)` (registers its
parser, sets `func`, returns the parser) and `run(args)`."""
