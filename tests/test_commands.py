"""The `vanilla-transformer` commands as one program: one loader for saved folders (a folder of the wrong
kind is one line naming what it holds and what the command needs), one rule from errors to exit codes (usage 2,
anything else 1, one line, no traceback), and `vanilla-transformer train` = `python -m training.train`."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_training import TINY

from helpers import REPO_ROOT, run_main, tiny_config
from translation_fixtures import tiny_tokenizer, tiny_translator
from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.checkpoints.kinds import KINDS, folder_kind
from vanilla_transformer.checkpoints.load import load_checkpoint
from vanilla_transformer.checkpoints.validate import CheckpointError
from vanilla_transformer.cli.main import COMMANDS, main
from vanilla_transformer.training.train import main as train_main

SINGLE_STACK = {
    "causal-lm": VanillaTransformerForCausalLM,
    "masked-lm": VanillaTransformerForMaskedLM,
    "sequence-classification": VanillaTransformerForSequenceClassification,
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """A saved folder of each PyTorch kind (random tiny models with the tiny tokenizer)."""
    root = tmp_path_factory.mktemp("folders")
    tokenizer = tiny_tokenizer()
    made = {"seq2seq": root / "seq2seq"}
    tiny_translator(seed=1).save_pretrained(made["seq2seq"])
    tokenizer.save_pretrained(made["seq2seq"])
    for seed, (kind, cls) in enumerate(SINGLE_STACK.items(), start=2):
        torch.manual_seed(seed)
        made[kind] = root / kind
        cls(tiny_config(vocab_size=len(tokenizer))).save_pretrained(made[kind])
        tokenizer.save_pretrained(made[kind])
    return {kind: str(path) for kind, path in made.items()}


def _one_error_line(code: int, out: str, err: str) -> str:
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if "error:" in line] == [lines[-1]], err[-2000:]
    return lines[-1]


# ----------------------------------------------------------------------------------------------------------------
# The loader


def test_folder_kind_reads_the_class_each_model_saves(folders):
    assert {kind: folder_kind(path) for kind, path in folders.items()} == {kind: kind for kind in folders}
    assert set(folders) | {"ctranslate2"} == set(KINDS)


@pytest.mark.parametrize("kind", ["seq2seq", *SINGLE_STACK])
def test_load_checkpoint_gives_the_saved_class_in_eval_mode_with_the_saved_weights(folders, kind):
    loaded = load_checkpoint(folders[kind], device="cpu")
    cls = SINGLE_STACK.get(kind)
    assert loaded.kind == kind and loaded.device == "cpu" and not loaded.model.training
    if cls is not None:
        assert type(loaded.model) is cls
    # the oracle: the weights in the file, read by safetensors
    saved = load_file(os.path.join(folders[kind], "model.safetensors"))
    state = loaded.model.state_dict()
    assert saved and all(torch.equal(state[name], tensor) for name, tensor in saved.items())
    assert loaded.tokenizer("seven")["input_ids"]


@pytest.mark.parametrize("kind", list(SINGLE_STACK))
def test_a_single_stack_folder_is_refused_by_the_translation_loader_in_one_line(folders, kind):
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint(folders[kind], kinds=("seq2seq", "ctranslate2"), purpose="translate")
    message = str(caught.value)
    assert "\n" not in message and message.startswith(f"{folders[kind]} holds ")
    assert f"({SINGLE_STACK[kind].__name__}); translate needs a translation model (seq2seq) or a CTranslate2 folder" \
        in message


# ----------------------------------------------------------------------------------------------------------------
# Wrong-kind folders on the command line: one line, exit 1 (they were "Cannot copy out of meta tensor" tracebacks)


@pytest.mark.parametrize("kind", list(SINGLE_STACK))
def test_translate_and_export_refuse_a_single_stack_folder_in_one_line(folders, kind, tmp_path, capsys):
    code, out, err = run_main(main, ["translate", "--model", folders[kind], "seven"], capsys)
    line = _one_error_line(code, out, err)
    assert code == 1 and out == ""
    assert line.startswith(f"vanilla-transformer translate: error: {folders[kind]} holds ")
    assert line.endswith(f"({SINGLE_STACK[kind].__name__}); translate needs a translation model (seq2seq) or a "
                         "CTranslate2 folder")
    pytest.importorskip("ctranslate2")
    code, out, err = run_main(main, ["export", "ctranslate2", folders[kind], str(tmp_path / "out")], capsys)
    line = _one_error_line(code, out, err)
    assert code == 1 and line.endswith("export needs a translation model (seq2seq)")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a fresh interpreter
def test_the_decoder_only_refusal_in_a_fresh_interpreter_is_one_line(folders):
    """As a user runs it (no pytest capture): exit 1, one line on stderr, nothing on stdout."""
    result = subprocess.run([sys.executable, "-m", "vanilla_transformer", "translate", "--model", folders["causal-lm"],
                             "seven"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                            stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 1 and result.stdout == ""
    assert result.stderr.strip().splitlines() == [
        f"vanilla-transformer translate: error: {folders['causal-lm']} holds a decoder-only language model "
        "(VanillaTransformerForCausalLM); translate needs a translation model (seq2seq) or a CTranslate2 folder"]


@pytest.mark.parametrize("kind, attention", [("causal-lm", "decoder"), ("masked-lm", "encoder"),
                                             ("sequence-classification", "encoder")])
def test_plot_attention_and_positions_take_single_stack_folders(folders, kind, attention, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    out = tmp_path / "a.png"
    code, _, err = run_main(main, ["plot", "attention", "--model", folders[kind], "--text", "seven", "--kind", attention,
                                   "--max-new-tokens", "3", "--dpi", "20", "--out", str(out)], capsys)
    assert code == 0, err
    assert out.stat().st_size > 0
    code, _, err = run_main(main, ["plot", "positions", "--model", folders[kind], "--length", "10", "--dpi", "20",
                                   "--out", str(tmp_path / "p.png")], capsys)
    assert code == 0, err


def _broken_copies(folder: str, tmp_path) -> dict:
    import shutil

    truncated, lacking = tmp_path / "truncated", tmp_path / "lacking"
    shutil.copytree(folder, truncated)
    shutil.copytree(folder, lacking)
    weights = truncated / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    state = load_file(lacking / "model.safetensors")
    name = sorted(n for n in state if ".layers.0." in n and n.endswith("fc1.weight"))[0]
    del state[name]
    save_file(state, lacking / "model.safetensors", metadata={"format": "pt"})
    return {"truncated": (truncated, "cannot be read (truncated"), "lacking": (lacking, f"e.g. {name}")}


@pytest.mark.parametrize("kind", ["causal-lm", "masked-lm"])
def test_plot_attention_checks_a_single_stack_checkpoint_first(folders, kind, tmp_path, capsys):
    """A truncated weight file is one line, and a missing tensor is refused, not re-initialised at random."""
    pytest.importorskip("matplotlib")
    attention = "decoder" if kind == "causal-lm" else "encoder"
    for broken, (folder, problem) in _broken_copies(folders[kind], tmp_path).items():
        out = tmp_path / f"{broken}.png"
        code, stdout, err = run_main(main, ["plot", "attention", "--model", str(folder), "--text", "seven", "--kind",
                                            attention, "--out", str(out)], capsys)
        line = _one_error_line(code, stdout, err)
        assert code == 1 and problem in line and str(folder) in line, line
        assert not out.exists()


# ----------------------------------------------------------------------------------------------------------------
# One rule from errors to exit codes, across the commands


def test_every_command_module_is_listed_and_has_the_two_functions():
    import importlib

    # vanilla_transformer/cli/: one module per command, beside main.py (the dispatcher) and options.py (shared types)
    names = sorted(name.removesuffix(".py") for name in os.listdir(os.path.join(REPO_ROOT, "vanilla_transformer", "cli"))
                   if name.endswith(".py") and not name.startswith("_") and name not in ("main.py", "options.py"))
    assert sorted(COMMANDS) == names
    for name in COMMANDS:
        module = importlib.import_module(f"vanilla_transformer.cli.{name}")
        assert callable(module.add_parser) and callable(module.run)


USAGE_ERRORS = [
    (["translate", "--model", "{seq2seq}", "seven", "--batch-size", "0"], "--batch-size must be from 1 to 100000, got 0"),
    (["translate", "--model", "{seq2seq}", "seven", "--num-beams", "two"], "--num-beams 'two' is not an integer"),
    (["translate", "--model", "{seq2seq}"], "nothing to translate"),
    (["translate", "--model", "{seq2seq}", "seven", "--device", "toaster"], "is not a torch device"),
    (["plot", "positions", "--length", "0", "--out", "{tmp}/p.png"], "--length must be at least 1, got 0"),
    (["plot", "training", "--run", "{tmp}", "--dpi", "-3", "--out", "{tmp}/t.png"], "--dpi must be positive, got -3"),
    (["convert", "bart", "{tmp}", "{tmp}/out"], "invalid choice: 'bart'"),
    (["export", "ctranslate2", "{seq2seq}", "{tmp}/out", "--quantization", "int4"], "invalid choice: 'int4'"),
    (["nonsense"], "invalid choice: 'nonsense'"),
]
RUNTIME_ERRORS = [
    (["translate", "--model", "{tmp}/missing", "seven"], "translate: error: model folder not found: {tmp}/missing"),
    (["plot", "attention", "--model", "{tmp}/missing", "--text", "x", "--out", "{tmp}/a.png"],
     "plot attention: error: model folder not found: {tmp}/missing"),
    (["plot", "training", "--run", "{tmp}/missing", "--out", "{tmp}/t.png"],
     "plot training: error: run folder not found: {tmp}/missing"),
    (["convert", "marian", "{tmp}/missing", "{tmp}/out"], "convert: error: {tmp}/missing is not a folder"),
    (["export", "ctranslate2", "{tmp}/missing", "{tmp}/out"], "export ctranslate2: error: model folder not found"),
]


@pytest.mark.parametrize("argv, message", USAGE_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_usage_errors_exit_2_with_one_line(folders, tmp_path, capsys, argv, message):
    code, out, err = run_main(main, [a.format(tmp=tmp_path, **folders) for a in argv], capsys)
    line = _one_error_line(code, out, err)
    assert code == 2 and out == ""
    assert message in line and err.lstrip().startswith("usage: vanilla-transformer"), err


@pytest.mark.parametrize("argv, message", RUNTIME_ERRORS, ids=lambda v: " ".join(v) if isinstance(v, list) else None)
def test_runtime_errors_exit_1_with_one_line_and_no_usage(folders, tmp_path, capsys, argv, message):
    if argv[0] == "export":
        pytest.importorskip("ctranslate2")
    code, out, err = run_main(main, [a.format(tmp=tmp_path, **folders) for a in argv], capsys)
    line = _one_error_line(code, out, err)
    assert code == 1 and out == ""
    assert line.startswith(f"vanilla-transformer {message.format(tmp=tmp_path)}"), line
    assert "usage:" not in err


# ----------------------------------------------------------------------------------------------------------------
# A fast start: help and usage errors load neither torch nor transformers

LIGHT_CALLS = [
    ["--help"], *([name, "--help"] for name in COMMANDS), ["plot", "attention", "--help"],
    ["train", "--no-such-option"], ["train", "--preset", "huge"], ["train", "--max-steps", "seven"],
    ["export", "ctranslate2", "--help"], ["nonsense"], ["translate", "--model", "m", "seven", "--batch-size", "0"],
    ["translate", "--model", "m"], ["convert", "bart", "a", "b"], ["export", "ctranslate2", "a", "b", "--quantization",
    "int4"], ["explore", "m", "--text", "x"], ["serve", "m", "--port", "0", "--workers", "2"],
    ["serve", "m", "--char-limit", "0"],
]


@pytest.mark.slow  # fresh interpreters
def test_help_and_usage_errors_import_neither_torch_nor_transformers(tmp_path):
    """Through the console script's entry point, in a fresh interpreter: every command's --help and a usage error of
    each kind (argparse's, and a command's `check`) exit with their status before anything heavy is imported. The
    train command answers from the table of its options (`training.option_table`), which its first use keeps."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HOME": str(tmp_path)}
    first = subprocess.run([sys.executable, "-c", "import vanilla_transformer_cli; vanilla_transformer_cli.main()",
                            "train", "--help"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, env=env)
    assert first.returncode == 0 and "--per-device-train-batch-size" in first.stdout, first.stderr[-2000:]
    script = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        import vanilla_transformer_cli

        results = []
        for argv in {LIGHT_CALLS!r}:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    vanilla_transformer_cli.main(argv)
                    code = 0
                except SystemExit as exit:
                    code = exit.code
            heavy = sorted(m for m in ("torch", "transformers", "numpy", "tokenizers") if m in sys.modules)
            results.append([argv, code, heavy, err.getvalue()[-300:]])
        print(json.dumps(results))
        """
    )
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                            env=env)
    assert result.returncode == 0, result.stderr[-2000:]
    for argv, code, heavy, err in json.loads(result.stdout):
        assert code == (0 if "--help" in argv else 2), (argv, code, err)
        assert heavy == [], (argv, heavy)


@pytest.mark.slow  # a fresh interpreter
def test_the_entry_point_registers_the_model_before_a_command_runs(tmp_path):
    """The command line's package import leaves registration to `main`; a command that loads a saved folder through
    the Auto classes still finds the model registered."""
    folder = tmp_path / "model"
    tiny_translator(seed=3).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    script = ("import sys, vanilla_transformer_cli; vanilla_transformer_cli.main(sys.argv[1:]); "
              "from transformers import CONFIG_MAPPING; print('registered', 'vanilla_transformer' in CONFIG_MAPPING)")
    result = subprocess.run([sys.executable, "-c", script, "translate", "--model", str(folder), "--num-beams", "1",
                             "--device", "cpu", "seven"], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines()[-1] == "registered True", result.stdout


# ----------------------------------------------------------------------------------------------------------------
# `vanilla-transformer train` is `python -m vanilla_transformer.training.train`


def test_train_help_is_the_recipes_help(capsys):
    pytest.importorskip("datasets")
    code, ours, err = run_main(main, ["train", "--help"], capsys)
    assert code == 0, err
    code, recipe, err = run_main(train_main, ["--help"], capsys)
    assert code == 0, err
    assert ours == recipe and "--preset" in ours and "--max_tokens" in ours


@pytest.mark.slow  # a training run
def test_train_runs_the_recipe_with_its_own_options(tmp_path, capsys):
    """The same tiny run through both doors gives the same weights (CPU, the recipe's fixed seed)."""
    pytest.importorskip("datasets")
    options = ["--max_steps", "2", "--save_steps", "2", "--max_target_length", "16", *TINY]
    code, _, err = run_main(main, ["train", "--output_dir", str(tmp_path / "cli"), *options], capsys)
    assert code == 0, err
    train_main(["--output_dir", str(tmp_path / "recipe"), *options])
    ours, recipe = (load_file(tmp_path / name / "model.safetensors") for name in ("cli", "recipe"))
    assert ours.keys() == recipe.keys() and all(torch.equal(ours[name], recipe[name]) for name in ours)
    initial = json.loads((tmp_path / "cli" / "config.json").read_text())
    assert initial["d_model"] == 32  # the recipe's options reached it
    # and its errors stay the recipe's: an unknown preset is argparse's usage error (exit 2)
    code, _, err = run_main(main, ["train", "--preset", "nope"], capsys)
    assert code == 2 and "unknown --preset 'nope'" in err


@pytest.mark.slow  # fresh interpreters
def test_a_missing_optional_extra_fails_only_the_command_that_needs_it(folders, tmp_path):
    """Without matplotlib and CTranslate2, translate works; export and plot say what to install, in one line."""
    script = textwrap.dedent(
        """
        import contextlib
        import io
        import json
        import sys


        class _Refuse:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("ctranslate2", "matplotlib"):
                    raise ModuleNotFoundError(f"No module named {name!r}")
                return None


        sys.meta_path.insert(0, _Refuse())
        from vanilla_transformer.cli.main import main

        results = []
        for argv in json.loads(sys.argv[1]):  # the commands one after the other, as the shell would run them
            out, err, code = io.StringIO(), io.StringIO(), 0
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    main(argv)
                except SystemExit as exit:
                    code = exit.code if isinstance(exit.code, int) else 1
            results.append({"code": code, "stdout": out.getvalue(), "stderr": err.getvalue()})
        print(json.dumps(results))
        """
    )
    commands = [(["export", "ctranslate2", folders["seq2seq"], str(tmp_path / "ct2")], "[fast]"),
                (["plot", "positions", "--out", str(tmp_path / "p.png")], "[plot]"),
                (["translate", "--model", folders["seq2seq"], "--device", "cpu", "--num-beams", "1", "seven"], None)]
    # one interpreter for the three (each would spend seconds importing torch)
    ran = subprocess.run([sys.executable, "-c", script, json.dumps([argv for argv, _ in commands])], cwd=REPO_ROOT,
                         capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                         env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert ran.returncode == 0, ran.stderr[-2000:]
    *refused, translated = json.loads(ran.stdout)
    assert translated["code"] == 0 and translated["stdout"].strip(), translated["stderr"][-2000:]
    for (_, extra), result in zip(commands, refused):
        assert result["code"] == 1 and "Traceback" not in result["stderr"], result["stderr"][-2000:]
        assert result["stderr"].strip().count("\n") == 0 and f'pip install "vanilla-transformer{extra}"' in result[
            "stderr"]
    assert not (tmp_path / "ct2").exists() and not (tmp_path / "p.png").exists()
