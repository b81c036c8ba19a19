"""The `vanilla-transformer` command: thin glue over the package.

Each command is a module of `vanilla_transformer.cli` with `add_parser(subparsers)` (registers its parser and
returns it), optionally `check(args)` (the options that do not go together: `UsageError`), and `run(args)`;
`COMMANDS` lists them, in the order `--help` shows them. Building the parsers and checking the options imports neither
torch nor transformers (the entry point `vanilla_transformer_cli` keeps the package from registering on import), so
`--help` and usage errors answer at once; `main` registers the model with transformers just before `run`, and a
command module imports the library it drives inside `run`, so a missing optional extra (matplotlib, CTranslate2,
datasets) fails that command only.

The one rule from errors to exit codes lives here, in `main`: a usage error (argparse's, or a `cli.options.UsageError`
from `check` or `run`) prints the usage and exits 2; any other error exits 1 with one line,
"vanilla-transformer COMMAND: error: ...", never a traceback.
"""

import argparse
import importlib
import os
import signal
import sys

# modules of vanilla_transformer.cli, one per command
COMMANDS = ["train", "translate", "convert", "export", "plot", "explore", "serve", "study", "distill"]

# errors a command reports as its one line (anything else is a bug of ours, and keeps its traceback); an invalid
# config is huggingface_hub's StrictDataclassError too (`_reported`)
REPORTED_ERRORS = (ValueError, OSError, ImportError, RuntimeError)


class ErrorStatus(int):
    """Exit status 1 whose text is the error line: the interpreter exits with 1 and prints nothing more (the line is
    already on stderr), and in-process callers see the message in `str(SystemExit)` as `sys.exit(message)` gives."""

    def __new__(cls, message: str):
        status = super().__new__(cls, 1)
        status.message = message
        return status

    def __str__(self) -> str:
        return self.message

    __repr__ = __str__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="vanilla-transformer", description=__doc__.split("\n\n")[0])
    subparsers = parser.add_subparsers(dest="command", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"vanilla_transformer.cli.{name}")
        command_parser = module.add_parser(subparsers)
        command_parser.set_defaults(command_check=getattr(module, "check", None), command_run=module.run,
                                    command_parser=command_parser,
                                    command_registers=not getattr(module, "REGISTERS_WHEN_NEEDED", False))
    return parser


def _reported(error: Exception) -> bool:
    from huggingface_hub.errors import StrictDataclassError  # transformers validates configs with @strict

    return isinstance(error, (*REPORTED_ERRORS, StrictDataclassError))


def _one_line(error: BaseException) -> str:
    from huggingface_hub.errors import StrictDataclassError

    from vanilla_transformer.files.errors import one_line

    if isinstance(error, StrictDataclassError) and error.__cause__ is not None:
        error = error.__cause__  # an invalid config: the config's own message
    return one_line(error)


def _prepare_to_run(register_model: bool) -> None:
    """What every command's `run` needs: the model registered with transformers (`registration.register`; a command
    whose module sets `REGISTERS_WHEN_NEEDED` leaves it to its loader, which registers for PyTorch folders only), and
    no "Loading weights" bars from from_pretrained (translate shows its own bar of sentences; training shows the
    Trainer's, which this leaves alone)."""
    from transformers.utils import logging as hf_logging

    if register_model:
        from vanilla_transformer.registration import register

        register()
    hf_logging.disable_progress_bar()


def _silence_stdout() -> None:
    """Point stdout at the null device, so that the interpreter's own flush at exit finds no broken pipe to
    report."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):  # no file descriptor behind sys.stdout (a test's capture)
        pass


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.cli.options import UsageError

    parser = build_parser()
    args = parser.parse_args(argv)
    command_parser = args.command_parser  # the innermost parser: its prog names the command ("... plot attention")
    try:
        if args.command_check is not None:
            args.command_check(args)
        _prepare_to_run(args.command_registers)
        args.command_run(args)
    except UsageError as error:
        command_parser.error(str(error))  # exit 2
    except BrokenPipeError:  # the reader of stdout has gone (`| head`): stop quietly, as tools killed by SIGPIPE do
        _silence_stdout()
        raise SystemExit(128 + signal.SIGPIPE) from None
    except KeyboardInterrupt:  # Ctrl-C: one line and the shell's status for SIGINT (128 + 2), not a traceback
        print(f"{command_parser.prog}: error: interrupted", file=sys.stderr)
        raise SystemExit(130) from None
    except Exception as error:
        if not _reported(error):
            raise
        message = f"{command_parser.prog}: error: {_one_line(error)}"
        print(message, file=sys.stderr)
        raise SystemExit(ErrorStatus(message)) from None


if __name__ == "__main__":
    main()
