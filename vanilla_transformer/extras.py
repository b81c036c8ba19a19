"""The optional extras of pyproject.toml (`train`, `plot`, `convert`, `fast`, `demo`, `serve`), and the one line that
says which to install when a feature's library is missing: the package imports without them, and only the feature
that needs one fails."""

import importlib
import importlib.util


def install_hint(extra: str) -> str:
    """The command that installs `extra`, e.g. `pip install "vanilla-transformer[fast]"`."""
    return f'pip install "vanilla-transformer[{extra}]"'


def missing_extra(feature: str, packages: list[str], extra: str) -> ImportError:
    """The one-line error for `feature` (e.g. "Plotting") lacking `packages` of `extra`."""
    return ImportError(f"{feature} needs {', '.join(packages)}, which {'is' if len(packages) == 1 else 'are'} not "
                       f"installed: {install_hint(extra)}")


def import_extra(module: str, extra: str, feature: str):
    """`importlib.import_module(module)`, or `missing_extra` naming the package that is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        raise missing_extra(feature, [(error.name or module).split(".")[0]], extra) from None


def check_extra(modules: list[str], extra: str, feature: str) -> None:
    """Raise `missing_extra` for every module of `modules` that is not installed, without importing any."""
    missing = [name for name in modules if importlib.util.find_spec(name) is None]
    if missing:
        raise missing_extra(feature, missing, extra)
