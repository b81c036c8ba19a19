"""The errors of file handling, and the one-line form every message of the package takes.

Every problem with a path a command reads or writes is an `OutputError` or a `TextFileError` (both `ValueError`s, so
the command line reports them as `vanilla-transformer CMD: error: ONE LINE`, exit status 1), whose message is one
line naming the user's path. `one_line` turns any exception (a library's multi-line message included) into that
line.
"""


class OutputError(ValueError):
    """An output path that cannot be written (as asked); the message is one line naming the path."""


class TextFileError(ValueError):
    """A text file that cannot be read as UTF-8 lines; the message is one line naming the file."""


def one_line(error: BaseException) -> str:
    """The text of `error` on one line (runs of whitespace, newlines included, become one space); the name of its
    type when it has no text."""
    return " ".join(str(error).split()) or type(error).__name__


__all__ = ["OutputError", "TextFileError", "one_line"]
