"""A checkpoint folder that is not whole is refused by every command that reads one: one line naming the file and
the problem, a non-zero exit, no traceback, nothing written. `from_pretrained` itself keeps transformers' behaviour."""

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import REPO_ROOT, run_main, train_command, train_usage_error
from translation_fixtures import tiny_tokenizer, tiny_translator
from vanilla_transformer.checkpoints.validate import CheckpointError, check_checkpoint


@pytest.fixture(scope="module")
def whole(tmp_path_factory):
    folder = tmp_path_factory.mktemp("whole")
    tiny_translator(seed=5).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def _copy(whole, tmp_path, name="broken"):
    folder = tmp_path / name
    shutil.copytree(whole, folder)
    return folder


def truncated_weights(folder):
    path = folder / "model.safetensors"
    data = path.read_bytes()
    path.write_bytes(data[: len(data) * 2 // 3])
    return "model.safetensors", "cannot be read"


def config_disagrees_with_weights(folder):
    config = json.loads((folder / "config.json").read_text())
    config["d_model"], config["encoder_ffn_dim"] = 48, 96  # still a valid config (48 % 4 == 0): only shapes differ
    (folder / "config.json").write_text(json.dumps(config))
    return "model.safetensors", "has shape"


def weight_missing(folder):
    state = load_file(folder / "model.safetensors")
    name = sorted(key for key in state if key.startswith("model.decoder.layers.1.") and key.endswith("weight"))[0]
    del state[name]
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return "model.safetensors", f"lacks 1 weight(s) of config.json's model, e.g. {name}"


def weight_unexpected(folder):
    state = load_file(folder / "model.safetensors")
    state["model.encoder.layers.2.extra.weight"] = torch.randn(64, 32)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})
    return "model.safetensors", "does not have, e.g. model.encoder.layers.2.extra.weight"


def tokenizer_json_missing(folder):
    (folder / "tokenizer.json").unlink()
    return "tokenizer.json", "is missing"


def weights_missing(folder):
    (folder / "model.safetensors").unlink()
    return "model.safetensors", "holds no weights"


def config_not_json(folder):
    (folder / "config.json").write_text('{"d_model": 32,')
    return "config.json", "cannot be read"


BREAKAGES = [truncated_weights, config_disagrees_with_weights, weight_missing, weight_unexpected,
             tokenizer_json_missing, weights_missing, config_not_json]
WEIGHT_BREAKAGES = [b for b in BREAKAGES if b is not tokenizer_json_missing]


def test_a_whole_checkpoint_passes(whole):
    check_checkpoint(whole)


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.__name__)
def test_check_names_the_file_and_the_problem(whole, tmp_path, breakage):
    folder = _copy(whole, tmp_path)
    file_name, problem = breakage(folder)
    with pytest.raises(CheckpointError) as caught:
        check_checkpoint(folder)
    message = str(caught.value)
    assert "\n" not in message
    assert file_name in message and problem in message, message


def test_from_pretrained_keeps_transformers_behaviour(whole, tmp_path):
    """In Python, a folder lacking a weight still loads (transformers initialises it and reports it)."""
    from transformers import AutoModelForSeq2SeqLM

    folder = _copy(whole, tmp_path)
    name = weight_missing(folder)[1].rsplit(" ", 1)[-1]
    _, info = AutoModelForSeq2SeqLM.from_pretrained(folder, output_loading_info=True)
    assert list(info["missing_keys"]) == [name]


def _assert_refused(code, err, folder, file_name, problem, written):
    assert code != 0
    assert "Traceback" not in err, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert "error:" in last and file_name in last and problem in last and str(folder) in last, err[-2000:]
    assert not os.path.exists(written)


@pytest.mark.parametrize("breakage", BREAKAGES, ids=lambda b: b.__name__)
def test_translate_refuses_a_broken_checkpoint(whole, tmp_path, capsys, breakage):
    from vanilla_transformer.cli.main import main

    folder = _copy(whole, tmp_path)
    file_name, problem = breakage(folder)
    output = tmp_path / "out.txt"
    code, _, err = run_main(main, ["translate", "--model", str(folder), "zwei Hunde", "--output", str(output)],
                            capsys)
    _assert_refused(code, err, folder, file_name, problem, output)


@pytest.mark.slow  # a fresh interpreter
def test_translate_refusal_in_a_fresh_interpreter_is_one_line(whole, tmp_path):
    """As a user runs it: `python -m vanilla_transformer translate` prints one line and no traceback."""
    folder = _copy(whole, tmp_path)
    file_name, problem = weight_missing(folder)
    result = subprocess.run([sys.executable, "-m", "vanilla_transformer", "translate", "--model", str(folder), "zwei"],
                            cwd=REPO_ROOT, capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    _assert_refused(result.returncode, result.stderr, folder, file_name, problem, tmp_path / "nothing")
    assert result.stdout == ""
    assert [line for line in result.stderr.splitlines() if line.strip()] == [result.stderr.strip()]


def test_plot_average_train_and_convert_refuse_a_truncated_checkpoint(whole, tmp_path, capsys):
    pytest.importorskip("matplotlib")
    from transformers import MarianConfig, MarianMTModel

    from vanilla_transformer.cli.main import main
    from vanilla_transformer.training.average_checkpoints import main as average_main

    folder = _copy(whole, tmp_path, "checkpoint-1")
    good = _copy(whole, tmp_path, "checkpoint-2")
    file_name, problem = truncated_weights(folder)
    picture = tmp_path / "attention.png"
    code, _, err = run_main(main, ["plot", "attention", "--model", str(folder), "--text", "zwei", "--out",
                                   str(picture)], capsys)
    _assert_refused(code, err, folder, file_name, problem, picture)
    averaged = tmp_path / "averaged"
    code, _, err = run_main(average_main, ["--checkpoints", str(good), str(folder), "--output_dir", str(averaged)],
                            capsys)
    _assert_refused(code, err, folder, file_name, problem, averaged)
    trained = tmp_path / "trained"
    code, _, err = run_main(train_command, ["--preset", "demo", "--model_name_or_path", str(folder), "--output_dir",
                                            str(trained)], capsys)
    _assert_refused(code, err, folder, file_name, problem, trained)
    train_usage_error(code, err)  # an option the run cannot use: exit status 2, the usage and the one error line

    marian = tmp_path / "marian"
    MarianMTModel(MarianConfig(vocab_size=40, d_model=16, encoder_layers=1, decoder_layers=1,
                               encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=32,
                               decoder_ffn_dim=32, max_position_embeddings=32, pad_token_id=39,
                               decoder_start_token_id=39, eos_token_id=0)).save_pretrained(marian)
    file_name, problem = truncated_weights(marian)
    converted = tmp_path / "converted"
    code, _, err = run_main(main, ["convert", "marian", str(marian), str(converted), "--no-tokenizer"], capsys)
    _assert_refused(code, err, marian, file_name, problem, converted)


def test_resuming_from_a_broken_checkpoint_is_refused(whole, tmp_path, capsys):
    output_dir = tmp_path / "run"
    output_dir.mkdir()
    folder = _copy(whole, output_dir, "checkpoint-3")
    file_name, problem = weight_missing(folder)
    before = sorted(os.listdir(output_dir))
    code, _, err = run_main(train_command, ["--preset", "demo", "--output_dir", str(output_dir),
                                            "--resume_from_checkpoint", "true"], capsys)
    _assert_refused(code, err, folder, file_name, problem, tmp_path / "nothing")
    train_usage_error(code, err)  # exit status 2, the usage and the one error line
    assert sorted(os.listdir(output_dir)) == before
