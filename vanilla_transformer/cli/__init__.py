"""The `vanilla-transformer` command: `main` holds the list of commands and the one rule from errors to exit codes;
every other module here is one command, with `add_parser(subparsers)` (registers its parser) and `run(args)` (does
the work by calling the library); `options` has the argument types they share."""
