"""The recipe's one-line problems and its log: `UsageError` for a bad option or bad data (`train.main` prints it
as `error: MESSAGE` without a traceback) and `log`, which prints on the main process only."""


class UsageError(Exception):
    """A problem with the command line or the data, reported without a traceback."""


def log(training_args, message: str) -> None:
    """Print `message` (flushed) on the main process; the other processes of a distributed run stay quiet."""
    if training_args.process_index == 0:
        print(message, flush=True)
