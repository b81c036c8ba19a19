"""One-line problems and the recipe's log: `UsageError` for options that do not go together or data that cannot be
used, `DataError` for the files or dataset the user pointed at, reported without a traceback (the recipe's
`train.main` prints `error: MESSAGE` and exits 1; the other commands' `cli.main` prints the usage and the message and
exits 2, as argparse does), and `log`, which prints on the main process only."""


class UsageError(Exception):
    """Options that do not go together, or data that cannot be used: one line, no traceback."""


class DataError(ValueError):
    """The data the user pointed at cannot be used; the message says what and where."""


def log(training_args, message: str) -> None:
    """Print `message` (flushed) on the main process; the other processes of a distributed run stay quiet."""
    if training_args.process_index == 0:
        print(message, flush=True)
