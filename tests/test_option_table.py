"""training/option_table.py: the table of the train command's options gives the --help and the usage errors of the
recipe's full parser (transformers' HfArgumentParser over the installed Seq2SeqTrainingArguments), and a table made
from other sources is never read."""

import contextlib
import io
import json
import os
import random
import subprocess
import sys

import pytest

from helpers import REPO_ROOT
from vanilla_transformer.training import option_table
from vanilla_transformer.training.arguments import preset_defaults, recipe_parser
from vanilla_transformer.training.presets import PRESETS


@pytest.fixture(scope="module")
def table():
    """The table of the installed sources, through JSON as it is kept."""
    presets = {name: {"defaults": preset_defaults(name)} for name in PRESETS}
    made = option_table.table_of(recipe_parser(), presets, key="test")
    assert made is not None, "the recipe's parser cannot be written down as a table"
    return json.loads(json.dumps(made))


def outcome(parser, argv: list[str]):
    """(exit status or None, stderr, namespace or None) of `parser.parse_args(argv)`."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        try:
            return None, "", vars(parser.parse_args(argv))
        except SystemExit as exit:
            return exit.code, err.getvalue(), None


@pytest.mark.parametrize("preset", list(PRESETS))
def test_the_tables_help_is_the_full_parsers(table, preset, monkeypatch):
    monkeypatch.setenv("COLUMNS", "120")
    full = recipe_parser()
    full.set_defaults(**preset_defaults(preset))
    assert option_table.parser_from_table(table, preset_defaults(preset)).format_help() == full.format_help()
    for option in ("--max-train-minutes", "--per-device-train-batch-size", "--lr-scheduler-type", "--preset"):
        assert option in full.format_help()  # ours, and transformers' own Trainer options


def random_command_line(table: dict, rng: random.Random) -> list[str]:
    """A command line of random options with values of their types: some well formed, some with an unknown option,
    a word for a number, a value that is not a choice, or a missing value."""
    argv = []
    options = [entry for entry in table["actions"] if entry["action"] != "help"]
    for entry in rng.sample(options, rng.randint(1, 12)):
        option = rng.choice(entry["option_strings"])
        if entry["action"] != "store":
            argv.append(option)
            continue
        kind = entry["type"]
        if entry["choices"]:
            value = str(rng.choice(entry["choices"] + ["not-a-choice"]))
        elif kind == "int":
            value = rng.choice([str(rng.randint(-5, 10**6)), "seven"])
        elif kind == "float":
            value = rng.choice([repr(rng.uniform(-1, 1e4)), "1e-3", "nan", "twelve"])
        elif kind == "text:string_to_bool":  # transformers' boolean words
            value = rng.choice(["true", "no", "1", "F", "yes"])
        else:
            value = rng.choice(["outputs/x", "a b", "{}"])
        count = {"+": rng.randint(1, 3), "?": rng.randint(0, 1)}.get(entry["nargs"], 1)
        argv += [option] + [value] * count
    if rng.random() < 0.2:
        argv.insert(rng.randint(0, len(argv)), "--no-such-option")
    if rng.random() < 0.2:
        store = [entry for entry in options if entry["action"] == "store" and entry["nargs"] is None]
        argv.append(rng.choice(rng.choice(store)["option_strings"]))  # its value missing
    return argv


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_table_parses_command_lines_as_the_full_parser(table, seed):
    """Random command lines, each parsed by both: the same usage error (message and status), or both accept it and
    every option of a builtin type or of choices gets the same value. Options of other types (transformers' boolean
    words, a dict) are text in the table: the full parser, which the run uses, judges their values."""
    rng = random.Random(seed)
    full = recipe_parser()
    light = option_table.parser_from_table(table)
    exact = ({entry["dest"] for entry in table["actions"] if entry["action"] != "help"}
             - {entry["dest"] for entry in table["actions"] if entry["type"] not in (None, "int", "float", "str", "choice")})
    text = [f"argument {'/'.join(entry['option_strings'])}:" for entry in table["actions"]
            if entry["dest"] not in exact and entry["action"] != "help"]  # how argparse names them in its errors
    errors = 0
    for _ in range(150):
        argv = random_command_line(table, rng)
        full_code, full_err, full_values = outcome(full, argv)
        light_code, light_err, light_values = outcome(light, argv)
        if full_code is not None and any(name in full_err for name in text):
            # a value of an option the table takes as text: the full parser refuses it, the table may not
            assert full_code == 2 and light_code in (None, 2), argv
            continue
        assert (light_code, light_err) == (full_code, full_err), argv
        errors += full_code is not None
        if full_values is not None:
            same = {dest: full_values[dest] for dest in exact}
            got = {dest: light_values[dest] for dest in exact}
            assert {k: str(v) for k, v in got.items()} == {k: str(v) for k, v in same.items()}, argv
    assert 10 < errors < 140  # both kinds were tried


def test_a_table_is_read_only_for_the_sources_it_was_made_from(tmp_path, monkeypatch):
    """The key changes with transformers' version and with the content of each file the options come from, so a
    table made before an upgrade (or an edit of the recipe) is never read; a damaged or foreign file is no table."""
    key = option_table.table_key()
    assert key is not None and key == option_table.table_key()
    real_version = option_table.importlib.metadata.version
    monkeypatch.setattr(option_table.importlib.metadata, "version",
                        lambda name: "0.0.1" if name == "transformers" else real_version(name))
    assert option_table.table_key() not in (None, key)
    monkeypatch.undo()

    folder = tmp_path / "transformers"
    folder.mkdir()
    source = option_table.importlib.util.find_spec("transformers").submodule_search_locations[0]
    for name in option_table.TRANSFORMERS_SOURCES:
        (folder / name).write_bytes(open(os.path.join(source, name), "rb").read())
    spec = option_table.importlib.util.find_spec("transformers")
    monkeypatch.setattr(spec, "submodule_search_locations", [str(folder)])
    monkeypatch.setattr(option_table.importlib.util, "find_spec", lambda name: spec)
    assert option_table.table_key() == key  # the same bytes elsewhere: the same table
    with open(folder / "training_args.py", "a", encoding="utf-8") as f:
        f.write("\n# one more line\n")
    assert option_table.table_key() != key
    monkeypatch.undo()

    monkeypatch.setattr(option_table, "table_path", lambda key: str(tmp_path / "table.json"))
    assert option_table.cached_table() is None  # none kept
    option_table.save_table({"key": "another", "actions": []})
    assert option_table.cached_table() is None  # another sources' table
    (tmp_path / "table.json").write_text("{cut sho", encoding="utf-8")
    assert option_table.cached_table() is None
    option_table.save_table({"key": key, "actions": []})
    assert option_table.cached_table() == {"key": key, "actions": []}
    assert sorted(os.listdir(tmp_path)) == ["table.json", "transformers"]  # no temporary file left


# `vanilla-transformer ARGS` as the console script runs it: its entry point imported before the package
COMMAND = ["-c", "import sys, vanilla_transformer_cli; vanilla_transformer_cli.main(sys.argv[1:])"]


@pytest.mark.slow  # fresh interpreters
def test_train_help_and_usage_errors_import_neither_torch_nor_transformers(tmp_path):
    """`python -m training.train` and `vanilla-transformer train`, in fresh interpreters with an empty cache: the
    first --help builds the table with the full parser; later ones, and usage errors, import neither torch nor
    transformers (-X importtime lists every module imported) and print what the full parser printed."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HOME": str(tmp_path / "hf"), "COLUMNS": "100"}

    def run(*argv):
        result = subprocess.run([sys.executable, "-X", "importtime", *argv], cwd=REPO_ROOT, capture_output=True,
                                text=True, timeout=300, env=env)
        imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines()
                    if line.startswith("import time:")}
        messages = "".join(line + "\n" for line in result.stderr.splitlines() if not line.startswith("import time:"))
        return result.returncode, result.stdout, messages, imported

    code, first_help, _, imported = run("-m", "training.train", "--help")
    assert code == 0 and "torch" in imported and "--per-device-train-batch-size" in first_help
    assert os.listdir(tmp_path / "hf" / "vanilla-transformer")  # the table, kept
    for argv in (["-m", "training.train", "--help"], [*COMMAND, "train", "--help"]):
        code, out, _, imported = run(*argv)
        assert code == 0 and out == first_help
        assert not {"torch", "transformers"} & imported, argv
    for options, message in [(["--no-such-option"], "unrecognized arguments: --no-such-option"),
                             (["--preset", "huge"], "unknown --preset 'huge'"),
                             (["--max-steps", "seven"], "argument --max-steps/--max_steps: invalid int value")]:
        code, out, err, imported = run(*COMMAND, "train", *options)
        assert code == 2 and out == "" and err.startswith("usage: vanilla-transformer train"), err
        assert err.strip().splitlines()[-1].startswith(f"vanilla-transformer train: error: {message}"), err
        assert not {"torch", "transformers"} & imported, options
