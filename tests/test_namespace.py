"""`vanilla-transformer train` runs the package's own recipe whatever the user's path holds: a user's `training.py`
or `training/` package, on PYTHONPATH or in the working directory, is never imported by our command.

Each user module exits the interpreter with a marker as soon as it is imported, so a shadowed recipe fails the test
loudly instead of printing someone else's help."""

import os
import pathlib
import subprocess
import sys

import pytest

from helpers import REPO_ROOT

MARKER = "USER TRAINING MODULE IMPORTED"
USER_CODE = f"import sys\nprint({MARKER!r})\nsys.exit(3)\n"


def user_training_module(folder: pathlib.Path) -> pathlib.Path:
    folder.mkdir()
    (folder / "training.py").write_text(USER_CODE)
    return folder


def user_training_package(folder: pathlib.Path) -> pathlib.Path:
    (folder / "training").mkdir(parents=True)
    (folder / "training" / "__init__.py").write_text(USER_CODE)
    (folder / "training" / "train.py").write_text(USER_CODE)
    return folder


def console_script() -> pathlib.Path:
    script = pathlib.Path(sys.executable).parent / "vanilla-transformer"
    if not script.exists():
        pytest.skip("the vanilla-transformer console script is not installed beside this Python (pip install -e .)")
    return script


def run_train_help(command: list[str], cwd: pathlib.Path, on_path: pathlib.Path) -> subprocess.CompletedProcess:
    # the user's folder first, then this checkout (so that this tree's vanilla_transformer is the one imported)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(on_path), str(REPO_ROOT)])}
    return subprocess.run(command + ["train", "--help"], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


def assert_our_recipe(result: subprocess.CompletedProcess) -> None:
    assert MARKER not in result.stdout + result.stderr, result.stdout + result.stderr
    assert result.returncode == 0, result.stderr
    # the recipe's own options, as vanilla_transformer.training.arguments defines them
    assert "--preset" in result.stdout and "multi30k-pre-ln" in result.stdout, result.stdout


@pytest.mark.slow  # fresh interpreters
def test_python_m_runs_our_recipe_beside_a_user_training_py_and_package(tmp_path):
    # `python -m` puts the working directory first on sys.path: a training.py there is the first to be found
    cwd = user_training_module(tmp_path / "work")
    on_path = user_training_package(tmp_path / "lib")
    assert_our_recipe(run_train_help([sys.executable, "-m", "vanilla_transformer"], cwd, on_path))


@pytest.mark.slow  # fresh interpreters
def test_console_script_runs_our_recipe_beside_a_user_training_package_and_py(tmp_path):
    cwd = user_training_package(tmp_path / "work")
    on_path = user_training_module(tmp_path / "lib")
    assert_our_recipe(run_train_help([str(console_script())], cwd, on_path))
