"""Training, watched (training/watch.py and the explorer's training view): what a run records at step k against the
checkpoint it saved at step k, computed again by the model's own `output_attentions` and `generate`; the gradient
norms against the Trainer's logged total; the loss against trainer_state.json; the view in a real browser (Debian's
chromium driven by Playwright, every request that leaves this machine refused and failing the test), as a static page
and in the live app.
"""

import json
import math
import os
import pathlib
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers import REPO_ROOT, run_main
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.training.arguments import parse_arguments
from vanilla_transformer.training.train import main as train_main
from vanilla_transformer.training.watch import QUANTUM, read_watch, translation_limit, unpack_weights

pytest.importorskip("num2words")

SCREENSHOTS = os.environ.get("VT_EXPLORE_SCREENSHOTS")  # a folder to keep the screenshot in (docs/training-view.png)
PRECISION = 0.5 / QUANTUM + 1e-6  # a recorded weight is within half a quantum of the model's
STEPS, EVERY = 6, 2

# A model and corpus small enough to train a few steps in seconds (as tests/test_training.py's).
TINY = ["--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "2", "--attention_heads", "2", "--ffn_dim", "64",
        "--vocab_size", "90", "--demo_train_size", "300", "--max_tokens", "200", "--max_test_samples", "8",
        "--config_overrides", "max_position_embeddings=64", "--report_to", "none", "--disable_tqdm", "true",
        "--num_sample_translations", "0", "--warmup_steps", "2", "--dropout", "0.1"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    out = tmp_path_factory.mktemp("watched") / "run"
    train_main(["--output_dir", str(out), "--max_steps", str(STEPS), "--save_steps", str(EVERY),
                "--save_total_limit", "5", "--logging_steps", "1", "--watch_steps", str(EVERY),
                "--watch_sentences", "2", "--average_last_n_checkpoints", "0", *TINY])
    return out


def test_the_demo_preset_records_about_twenty_steps_by_default():
    data_args = parse_arguments(["--output_dir", "unused"])[0]
    assert data_args.watch_steps * 1500 == pytest.approx(75) and data_args.watch_sentences == 3


def test_recorded_attention_and_translation_at_step_k_are_those_of_checkpoint_k(run_dir):
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    watch = read_watch(run_dir)
    assert watch["steps"] == list(range(0, STEPS + 1, EVERY))
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    references = [sentence["reference"] for sentence in watch["sentences"]]
    for recording in watch["recordings"][1:]:  # step 0 has no checkpoint
        step = recording["step"]
        model = AutoModelForSeq2SeqLM.from_pretrained(run_dir / f"checkpoint-{step}").eval()
        for i, sentence in enumerate(watch["sentences"]):
            source = tokenizer(sentence["source"], return_tensors="pt")["input_ids"]
            labels = tokenizer(text_target=sentence["reference"], return_tensors="pt")["input_ids"]
            start = torch.full((1, 1), model.config.decoder_start_token_id)
            with torch.no_grad():
                outputs = model(input_ids=source, decoder_input_ids=torch.cat([start, labels[:, :-1]], dim=1),
                                output_attentions=True)
                generated = model.generate(source, num_beams=1, do_sample=False,
                                           max_new_tokens=translation_limit(model, tokenizer, references))
            expected = torch.cat(outputs.cross_attentions).numpy()  # (layers, heads, targets, sources)
            recorded = unpack_weights(recording["cross"][i])
            assert recorded.shape == expected.shape
            np.testing.assert_allclose(recorded, expected, rtol=0, atol=PRECISION)
            assert sentence["target_tokens"] == tokenizer.convert_ids_to_tokens(labels[0])
            assert sentence["source_tokens"] == tokenizer.convert_ids_to_tokens(source[0])
            assert recording["translations"][i] == tokenizer.decode(generated[0], skip_special_tokens=True)
    # the weights changed between recordings (else equal recordings would prove little)
    first, last = (unpack_weights(watch["recordings"][k]["cross"][0]) for k in (0, -1))
    assert np.abs(first - last).max() > 10 * PRECISION


def test_gradient_norms_add_up_to_the_trainers_and_the_loss_is_its_log(run_dir):
    watch = read_watch(run_dir)
    state = json.loads((run_dir / "trainer_state.json").read_text())
    logged = {entry["step"]: entry for entry in state["log_history"] if "loss" in entry}
    assert watch["loss"] == [[step, logged[step]["loss"]] for step in sorted(logged)]
    assert watch["recordings"][0]["grad_norms"] is None  # step 0: no update yet
    for recording in watch["recordings"][1:]:
        norms = recording["grad_norms"]
        assert list(norms) == ["embeddings", "encoder layer 0", "decoder layer 0", "decoder layer 1"]
        total = math.sqrt(sum(value ** 2 for value in norms.values()))
        assert total == pytest.approx(logged[recording["step"]]["grad_norm"], rel=1e-4)


def test_the_watch_folder_counts_as_ours_for_the_next_run(run_dir):
    from vanilla_transformer.files.manifest import foreign_entries

    assert foreign_entries(run_dir) == []
    assert {name for name in os.listdir(run_dir / "watch") if name.startswith(".watch-")} == set()


@pytest.mark.slow  # two training runs
def test_a_resumed_run_keeps_the_steps_before_its_checkpoint_and_records_on(tmp_path):
    out = tmp_path / "run"
    common = ["--output_dir", str(out), "--save_steps", "2", "--watch_steps", "2", "--watch_sentences", "1",
              "--average_last_n_checkpoints", "0", *TINY]
    train_main([*common, "--max_steps", "4"])
    before = read_watch(out)
    train_main([*common, "--max_steps", "6", "--resume_from_checkpoint", "true"])
    after = read_watch(out)
    assert after["steps"] == [0, 2, 4, 6]
    assert after["recordings"][:3] == before["recordings"]
    assert after["sentences"] == before["sentences"]
    from vanilla_transformer.files.manifest import foreign_entries

    assert foreign_entries(out) == []


def test_no_recordings_is_one_line(tmp_path, capsys):
    code, _, err = run_main(cli_main, ["explore", str(tmp_path), "--training", "--html", str(tmp_path.parent / "x.html")],
                            capsys)
    assert code == 1 and "has no training recordings" in err and "--watch_steps" in err
    assert "Traceback" not in err
    code, _, err = run_main(cli_main, ["explore", str(tmp_path), "--training", "--space", str(tmp_path / "s")], capsys)
    assert code == 2 and "drop --space" in err


# ----------------------------------------------------------------------------------------------------------------
# The view in a real browser



def open_page(browser, url):
    page = browser.new_page()
    errors, requests = [], []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("request", lambda request: requests.append(request.url))
    page.goto(url)
    return page, errors, requests


def drawn(frame) -> np.ndarray:
    cells = frame.locator("#training-heatmap rect.cell").evaluate_all(
        "cells => cells.map(c => [+c.dataset.query, +c.dataset.key, +c.dataset.value])")
    out = np.zeros((max(q for q, _, _ in cells) + 1, max(k for _, k, _ in cells) + 1))
    for q, k, value in cells:
        out[q, k] = value
    return out


def check_steps(frame, watch):
    """Every recorded step through the slider: head 0 of the last layer, then the mean of the heads of layer 0."""
    frame.locator("#head").select_option("0")
    shown = []
    for index, recording in enumerate(watch["recordings"]):
        frame.locator("#training-step").fill(str(index))
        assert frame.locator("#explorer").get_attribute("data-step") == str(recording["step"])
        weights = unpack_weights(recording["cross"][0])
        np.testing.assert_allclose(drawn(frame), weights[-1, 0], rtol=0, atol=1e-6)
        assert frame.locator("#training-translation").inner_text() == recording["translations"][0].strip()
        assert float(frame.locator("#loss-marker").get_attribute("data-step")) == recording["step"]
        assert float(frame.locator("#explorer").get_attribute("data-draw-ms")) < 100
        norms = frame.locator("#grad-norms .bar").evaluate_all("bars => bars.map(b => +b.dataset.value)")
        assert norms == pytest.approx(list((recording["grad_norms"] or {}).values()), rel=1e-9)
        shown.append(drawn(frame))
    assert not np.array_equal(shown[0], shown[-1])  # the slider changed the heatmap
    frame.locator("#layer").select_option("0")
    frame.locator("#head").select_option("mean")
    np.testing.assert_allclose(drawn(frame), unpack_weights(watch["recordings"][-1]["cross"][0])[0].mean(axis=0),
                               rtol=0, atol=1e-6)


def test_the_page_of_20_steps_of_a_multi30k_sized_model_is_under_2_mb_and_draws_a_step_in_under_100_ms(browser,
                                                                                                      tmp_path):
    from vanilla_transformer.inspect.training_view import render_training_page
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.watch import pack_weights

    model = PRESETS["multi30k"].model
    layers, heads, tokens = model["decoder_layers"], model["decoder_attention_heads"], 25  # longer than most
    generator = np.random.default_rng(0)

    def attention():
        scores = generator.normal(size=(layers, heads, tokens, tokens))
        return np.exp(scores) / np.exp(scores).sum(axis=-1, keepdims=True)

    names = [f"{stack} layer {i}" for stack in ("encoder", "decoder") for i in range(layers)]
    recordings = [{"step": 1000 * k, "translations": ["Ein Mann schläft auf einem Sofa ."] * 3,
                   "grad_norms": None if k == 0 else dict.fromkeys(["embeddings", *names], 0.5),
                   "cross": [pack_weights(attention()) for _ in range(3)]} for k in range(20)]
    sentence = {"source": "A man sleeping in a green room on a couch .", "reference": "Ein Mann schläft .",
                "source_tokens": [f"s{i}" for i in range(tokens)], "target_tokens": [f"t{i}" for i in range(tokens)]}
    data = {"run": "multi30k", "sentences": [sentence] * 3, "layers": layers, "heads": heads,
            "steps": [r["step"] for r in recordings], "max_steps": 19000,
            "loss": [[100 * i, 9 - i / 40] for i in range(1, 191)], "recordings": recordings}
    out = tmp_path / "training.html"
    out.write_text(render_training_page(data), encoding="utf-8")
    assert out.stat().st_size < 2_000_000
    page, errors, _ = open_page(browser, out.as_uri())
    page.locator("#explorer[data-ready=true]").wait_for()
    page.locator("#head").select_option("0")
    for index in range(len(recordings)):
        page.locator("#training-step").fill(str(index))
        assert float(page.locator("#explorer").get_attribute("data-draw-ms")) < 100
        np.testing.assert_allclose(drawn(page), unpack_weights(recordings[index]["cross"][0])[-1, 0], rtol=0,
                                   atol=1e-6)
    assert errors == []
    page.close()


def test_static_training_page_replays_the_recordings_offline(run_dir, browser, tmp_path, capsys):
    out = tmp_path / "training.html"
    code, stdout, err = run_main(cli_main, ["explore", str(run_dir), "--training", "--html", str(out)], capsys)
    assert code == 0, err
    assert f"{len(range(0, STEPS + 1, EVERY))} recorded steps" in stdout
    watch = read_watch(run_dir)
    page, errors, requests = open_page(browser, out.as_uri())
    page.locator("#explorer[data-ready=true]").wait_for()
    check_steps(page, watch)
    page.locator("#sentence").select_option("1")
    page.locator("#head").select_option("1")
    np.testing.assert_allclose(drawn(page), unpack_weights(watch["recordings"][-1]["cross"][1])[0, 1], rtol=0,
                               atol=1e-6)
    folder = pathlib.Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / "training-view.png"), full_page=True)
    assert errors == [] and requests == [out.as_uri()]
    page.close()


@pytest.mark.slow  # a real browser
def test_live_training_view_draws_the_same(run_dir, browser):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "vanilla_transformer", "explore", str(run_dir), "--training",
                                "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    try:
        deadline, url = time.time() + 180, None
        while url is None and time.time() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail(f"the training view exited with status {process.returncode}")
            match = re.search(r"running on (http://\S+)", line)
            url = match.group(1) if match else None
        assert url == f"http://127.0.0.1:{port}/", url
        page, errors, _ = open_page(browser, url)
        frame = page.frame_locator("#explorer-frame")
        frame.locator("#explorer[data-ready=true]").wait_for(timeout=60_000)
        check_steps(frame, read_watch(run_dir))
        assert errors == []
        page.close()
    finally:
        process.terminate()
        process.wait(timeout=30)
