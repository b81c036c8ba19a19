"""Helpers shared by the tests: tiny configs and models, random padded batches, where things are, and a training run
stopped mid-way and resumed.

(pytest fixtures live in conftest.py; this is a plain module the tests import: `from helpers import tiny_model`.)
"""

import json
import math
import os
import pathlib
import shutil
import sys
import textwrap

import numpy as np
import torch
from torch import nn

import vanilla_transformer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
# Multi30k beside the checkout (../shared), or beside the folder of worktrees (../../shared), as benchmarks/ finds it
SHARED_DATA = next((folder / "shared" / "data" / "multi30k" for folder in (REPO_ROOT.parent, REPO_ROOT.parent.parent)
                    if (folder / "shared" / "data" / "multi30k").is_dir()), REPO_ROOT.parent / "shared" / "data" / "multi30k")


def made_once_per_run(tmp_path_factory, name: str, make) -> pathlib.Path:
    """The folder `name`, made by `make(folder)` once per test run, however many pytest-xdist workers need it: in the
    run's temporary directory (each worker's own is a folder inside it), behind a file lock, so that a second worker
    waits for the folder the first one makes instead of making it again. Tests read it; they copy it to change it.
    A folder that `make` did not finish (it raised) is made afresh by the next caller."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    folder, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            shutil.rmtree(folder, ignore_errors=True)
            make(folder)
            done.touch()
    return folder


def run_main(main, argv: list[str], capsys) -> tuple[int, str, str]:
    """Run a command's `main(argv)` in this process (cheap); returns (exit code, stdout, stderr). A `sys.exit("message")`
    counts as exit code 1 with the message on stderr, as the shell would show it."""
    code = 0
    try:
        main(argv)
    except SystemExit as exit:
        code = exit.code if isinstance(exit.code, int) else 1
        if isinstance(exit.code, str):
            print(exit.code, file=sys.stderr)
    out, err = capsys.readouterr()
    return code, out, err


def train_command(argv: list[str]) -> None:
    """`vanilla-transformer train ARGV` in this process: the recipe under the command's exit-code rule (options that
    do not go together exit 2 with the usage, any other reported problem exits 1 with one line)."""
    from vanilla_transformer.cli.main import main

    main(["train", *map(str, argv)])


TRAIN_ERROR = "vanilla-transformer train: error: "


def train_usage_error(code: int, stderr: str) -> str:
    """The error line ("vanilla-transformer train: error: MESSAGE") of a usage error of `vanilla-transformer train`,
    checked: exit status 2, the usage first, then exactly one error line, the last, and no traceback."""
    lines = stderr.strip().splitlines()
    assert code == 2 and stderr.startswith("usage: vanilla-transformer train") and "Traceback" not in stderr, stderr
    assert [line for line in lines if TRAIN_ERROR in line] == lines[-1:] and lines[-1].startswith(TRAIN_ERROR), stderr
    return lines[-1]


def train_error(code: int, stderr: str) -> str:
    """The error line ("vanilla-transformer train: error: MESSAGE") of any other problem `vanilla-transformer train`
    reports, checked: exit status 1, and stderr is that one line: no usage, no traceback."""
    assert code == 1 and stderr.count("\n") == 1 and stderr.startswith(TRAIN_ERROR), stderr
    assert "Traceback" not in stderr and "usage:" not in stderr, stderr
    return stderr.rstrip("\n")

# The first lines of a script run in a fresh interpreter (`python -I`): our packages cannot be imported there even where
# they are installed (`pip install -e .`), as on a machine that has only a downloaded checkpoint folder.
HIDE_PACKAGE = textwrap.dedent(
    """
    import sys


    class _Refuse:
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("vanilla_transformer", "training"):
                raise ImportError(f"{name} is hidden from this interpreter")
            return None


    sys.meta_path.insert(0, _Refuse())
    """
)


def tiny_config(**overrides) -> "vanilla_transformer.VanillaTransformerConfig":
    """A model small enough for CPU tests but with every part of the architecture (2+3 layers, 4 heads)."""
    values = dict(
        vocab_size=53,
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return vanilla_transformer.VanillaTransformerConfig(**values)


def tiny_model(seed: int = 0, attn_implementation: str = "sdpa", **overrides):
    torch.manual_seed(seed)
    config = tiny_config(**overrides)
    model = vanilla_transformer.VanillaTransformerForConditionalGeneration._from_config(
        config, attn_implementation=attn_implementation
    )
    return model.eval()


def random_batch(seed: int, vocab_size: int = 53, batch: int = 3, length: int = 9, first_id: int = 3):
    """Random token ids (no special tokens) and a right-padded attention mask with different lengths per row."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(first_id, vocab_size, (batch, length), generator=generator)
    lengths = torch.randint(2, length + 1, (batch,), generator=generator)
    lengths[0] = length  # at least one full row
    attention_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)  # pad id 0
    return input_ids, attention_mask


# Oracles written out independently of the model: the paper's positional encoding (section 3.5), and copies of our
# weights into torch.nn's own Transformer layers.


def paper_positional_encoding(length: int, d_model: int) -> np.ndarray:
    pe = np.zeros((length, d_model))
    for pos in range(length):
        for i in range(d_model // 2):
            pe[pos, 2 * i] = math.sin(pos / 10000 ** (2 * i / d_model))
            pe[pos, 2 * i + 1] = math.cos(pos / 10000 ** (2 * i / d_model))
    return pe


@torch.no_grad()
def copy_attention(theirs: nn.MultiheadAttention, ours) -> None:
    """torch fuses [W_Q; W_K; W_V] into one `in_proj`; ours keeps them apart, as BART and Marian do."""
    theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
    theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
    theirs.out_proj.load_state_dict(ours.out_proj.state_dict())


@torch.no_grad()
def copy_encoder_layer(theirs: nn.TransformerEncoderLayer, ours) -> None:
    copy_attention(theirs.self_attn, ours.self_attn)
    theirs.linear1.load_state_dict(ours.fc1.state_dict())
    theirs.linear2.load_state_dict(ours.fc2.state_dict())
    theirs.norm1.load_state_dict(ours.self_attn_layer_norm.state_dict())
    theirs.norm2.load_state_dict(ours.final_layer_norm.state_dict())


# Debian's chromium for the browser tests (never a downloaded one), with the flags that keep it from calling home
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync"]


class Interrupt(Exception):
    """Raised by `crash_at`'s callback: a training run stopped mid-way, as a kill would stop it."""


def crash_at(step: int):
    """A TrainerCallback that raises `Interrupt` at the end of training step `step`."""
    from transformers import TrainerCallback

    class CrashAt(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == step:
                raise Interrupt

    return CrashAt()


def step_losses(folder) -> tuple[int, dict]:
    """(the last step, {step: loss}) of a run folder's trainer_state.json."""
    state = json.loads((pathlib.Path(folder) / "trainer_state.json").read_text())
    return state["global_step"], {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}


def assert_resumed_like_uninterrupted(resumed, full, steps: int) -> None:
    """The run folder `resumed` (stopped and resumed) logged every step's loss, as the uninterrupted `full` did."""
    import pytest

    (full_steps, full_losses), (resumed_steps, resumed_losses) = step_losses(full), step_losses(resumed)
    assert full_steps == resumed_steps == steps and sorted(resumed_losses) == list(range(1, steps + 1))
    for step in range(1, steps + 1):
        assert resumed_losses[step] == pytest.approx(full_losses[step], rel=1e-4), step
