"""The recipe's one-line problems and its log: `DataError` for the files or dataset the user pointed at (reported as
one line, exit status 1, by `cli.main`; options that do not go together are the train command's
`cli.options.UsageError`, exit status 2), and `log`, which prints on the main process only."""


class DataError(ValueError):
    """The data the user pointed at cannot be used; the message says what and where."""


def log(training_args, message: str) -> None:
    """Print `message` (flushed) on the main process; the other processes of a distributed run stay quiet."""
    if training_args.process_index == 0:
        print(message, flush=True)
