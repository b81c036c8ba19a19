"""`python -m training.train` under torchrun / accelerate launch: two CPU processes (gloo) train like one.

Two processes with token-budget batches of B tokens take batches 2k and 2k + 1 at step k; one process with
`--gradient_accumulation_steps 2` takes the same two batches at the same step. The Trainer normalises the loss by
the target tokens of the whole step in both cases, so (without dropout) losses and weights must agree up to
floating-point summation order.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys

import pytest
import torch

from vanilla_transformer.training.train import main as train_main

pytestmark = pytest.mark.slow  # two training processes (torchrun, accelerate launch) per test

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

COMMON = [
    "--max_steps", "3", "--save_steps", "3", "--logging_steps", "1", "--dropout", "0", "--d_model", "32",
    "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2", "--ffn_dim", "64", "--vocab_size", "90",
    "--demo_train_size", "300", "--max_tokens", "200", "--max_test_samples", "24", "--per_device_eval_batch_size", "5",
    "--config_overrides", "max_position_embeddings=20", "--warmup_steps", "4", "--report_to", "none",
    "--disable_tqdm", "true", "--num_sample_translations", "0",
]

LAUNCHERS = {
    "torchrun": [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
    "accelerate": [os.path.join(os.path.dirname(sys.executable), "accelerate"), "launch", "--multi_gpu",
                   "--num_processes", "2", "--main_process_port", "0"],
}


def _history(folder):
    state = json.loads((folder / "trainer_state.json").read_text())
    return state["global_step"], {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}


@pytest.mark.parametrize("launcher", ["torchrun", "accelerate"])
def test_two_cpu_processes_train_like_one_process_with_the_same_global_batch(tmp_path, launcher):
    if launcher == "accelerate" and not shutil.which(LAUNCHERS["accelerate"][0]):
        pytest.skip("the accelerate command is not installed next to this Python")
    train_main(["--output_dir", str(tmp_path / "one"), "--gradient_accumulation_steps", "2", *COMMON])

    two = tmp_path / "two"
    result = subprocess.run(
        [*LAUNCHERS[launcher], "-m", "vanilla_transformer.training.train", "--output_dir", str(two), *COMMON],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=400,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO_ROOT},
    )
    assert result.returncode == 0, result.stderr[-3000:]  # the launcher fails if any rank fails
    # each rank logs its own finish line; only the main one writes files
    assert result.stdout.count("Finished training on rank") == 2, result.stdout[-2000:]
    assert sorted(p.name for p in two.iterdir() if p.name.startswith("checkpoint-")) == ["checkpoint-3"]
    state = json.loads((two / "trainer_state.json").read_text())
    assert state["global_step"] == 3

    one_steps, one_losses = _history(tmp_path / "one")
    two_steps, two_losses = _history(two)
    assert one_steps == two_steps == 3 and sorted(two_losses) == [1, 2, 3]
    for step in (1, 2, 3):
        assert two_losses[step] == pytest.approx(one_losses[step], rel=1e-4), step

    from safetensors.torch import load_file

    one_weights, two_weights = load_file(tmp_path / "one" / "model.safetensors"), load_file(two / "model.safetensors")
    for name in one_weights:
        torch.testing.assert_close(two_weights[name], one_weights[name], rtol=1e-4, atol=1e-5, msg=name)


def test_a_time_budget_on_two_processes_whose_clocks_disagree_stops_both_at_the_same_step(tmp_path):
    """Fault injection: process 1's clock runs 1.6x fast (a sitecustomize patches its time.monotonic). Each process
    reading its own clock would plan a different run and stop at a different step, leaving the other waiting in the
    next all-reduce; with process 0's clock they plan alike and finish the same step."""
    skew = tmp_path / "skew"
    skew.mkdir()
    (skew / "sitecustomize.py").write_text(
        "import os, time\n"
        "if os.environ.get('LOCAL_RANK') == '1':\n"
        "    _real = time.monotonic\n"
        "    _start = _real()\n"
        "    time.monotonic = lambda: _start + 1.6 * (_real() - _start)\n"
    )
    assert COMMON[:4] == ["--max_steps", "3", "--save_steps", "3"]
    options = COMMON[4:]  # no --max_steps: the budget sizes the run
    out = tmp_path / "budget"
    launched = subprocess.Popen(
        [*LAUNCHERS["torchrun"], "-m", "vanilla_transformer.training.train", "--output_dir", str(out), *options,
         "--max_train_minutes", "0.25", "--budget_calibration_steps", "5", "--average_last_n_checkpoints", "2"],
        cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join([str(skew), REPO_ROOT])},
    )
    try:
        stdout, stderr = launched.communicate(timeout=240)
    except subprocess.TimeoutExpired:  # one process waits for the other forever: end both, and fail
        os.killpg(launched.pid, signal.SIGKILL)
        stdout, stderr = launched.communicate()
        pytest.fail("the two processes did not finish (one waited for the other): " + stdout[-2000:])
    assert launched.returncode == 0, stderr[-3000:]
    # The two processes share one pipe: a line of one may run into the other's, so match the message, not lines.
    finished = dict(re.findall(r"Finished training on rank (\d) of 2 \(step (\d+)\)", stdout))
    assert sorted(finished) == ["0", "1"], stdout[-2000:]
    steps = set(finished.values())
    assert len(steps) == 1, finished  # both processes stopped at the same step
    state = json.loads((out / "trainer_state.json").read_text())
    assert str(state["global_step"]) in steps and state["global_step"] > 5
