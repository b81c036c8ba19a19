"""The argument types the commands share, checked while parsing: a bad value is argparse's usage error (exit 2)
naming the option, e.g. "--batch-size must be at least 1, got 0".

Each type is a function from the text to the value that raises `argparse.ArgumentTypeError` with the problem;
`checked(type)` makes it an argparse action that puts the option's name in front of that message (argparse's own
`type=` would print "argument --batch-size: ..."). Use `add_argument("--batch-size", action=checked(positive_int))`.
"""

import argparse
import math
import os


class UsageError(Exception):
    """Options that do not go together, found after parsing (a command's `check` or `run`, the training recipe):
    `cli.main` reports it as argparse reports its own errors, with the usage, one error line and exit status 2."""


def _number(text: str, kind: type):
    try:
        return kind(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None


def positive_int(text: str) -> int:
    value = _number(text, int)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    value = _number(text, int)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def positive_float(text: str) -> float:
    value = _number(text, float)
    if not value > 0:  # NaN too
        raise argparse.ArgumentTypeError(f"must be positive, got {text}")
    return value


def non_negative_float(text: str) -> float:
    value = _number(text, float)
    if not (value >= 0 and math.isfinite(value)):  # NaN and infinity too
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def _shown(number) -> str:
    return str(number) if isinstance(number, int) else f"{number:g}"


def in_range(kind: type, low, high):
    """An argparse type (for `checked`): a finite `kind` (int or float) from `low` to `high`."""

    def convert(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {'an integer' if kind is int else 'a number'}") from None
        if not math.isfinite(value) or not low <= value <= high:  # NaN and infinities too
            raise argparse.ArgumentTypeError(f"must be from {_shown(low)} to {_shown(high)}, got {text}")
        return value

    convert.__name__ = f"{kind.__name__}_from_{_shown(low)}_to_{_shown(high)}"
    return convert


def existing_file(text: str) -> str:
    """A file that exists, or "-" for stdin."""
    if text != "-" and not os.path.isfile(text):
        raise argparse.ArgumentTypeError(f"file not found: {text}")
    return text


def existing_folder(text: str) -> str:
    if not os.path.isdir(text):
        raise argparse.ArgumentTypeError(f"folder not found: {text}")
    return text


def writable_file(text: str) -> str:
    """A file path that can be written (`files.paths.check_output_file`): not a folder, in an existing folder this
    user may write. Whether it exists, and what it must not replace, the command checks with its --overwrite and its
    inputs; the file itself is written later, atomically (`files.staging.staged_file`)."""
    from vanilla_transformer.files.errors import OutputError
    from vanilla_transformer.files.paths import check_output_file

    try:
        check_output_file(text, what="", overwrite=True)
    except OutputError as error:
        raise argparse.ArgumentTypeError(str(error).strip().rstrip(".")) from None
    return text


def torch_device(text: str) -> str:
    """A device name torch understands (cpu, cuda, cuda:1, mps, ...); whether this machine has it is the loader's
    question (`checkpoints.pytorch.pick_device`), as CTranslate2 folders find their own devices."""
    import torch

    try:
        torch.device(text)
    except RuntimeError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from None
    return text


def checked(type_function):
    """An argparse action that converts each value with `type_function` and reports its ArgumentTypeError as
    "OPTION MESSAGE" through `parser.error` (usage, one line, exit 2). Works with any `nargs`."""

    class Checked(argparse.Action):
        def __call__(self, parser, namespace, values, option_string=None):
            name = option_string or self.metavar or self.dest
            try:
                if isinstance(values, list):
                    value = [type_function(text) for text in values]
                else:
                    value = type_function(values)
            except argparse.ArgumentTypeError as error:
                parser.error(f"{name} {error}")
            setattr(namespace, self.dest, value)

    Checked.__name__ = f"checked_{type_function.__name__}"
    return Checked
