"""The `vanilla-transformer` commands, one module each: `add_parser(subparsers)` registers the command's parser and
`run(args)` does the work by calling the library (translate, convert, export, visualize, training.train). The list
of modules and the one rule from errors to exit codes are in `vanilla_transformer/cli.py`; the argument types they
share are in `_types.py`."""
