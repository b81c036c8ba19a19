"""The attention explorer: its data against the model's own `output_attentions` (and against the weights and scores
seen during cached generation), for the three configurations; the live app and the static page in a real browser
(Debian's chromium driven by Playwright, every request that leaves this machine refused and failing the test); its
API through gradio_client; the Space folder in a fresh interpreter; bad input.
"""

import json
import os
import pathlib
import re
import socket
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from helpers import REPO_ROOT, run_main, tiny_config
from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)
from vanilla_transformer.cli.main import main
from vanilla_transformer.inspect.data import attention_data
from vanilla_transformer.inspect.page import render_page, write_html
from vanilla_transformer.inspect.space import write_space
from vanilla_transformer.training.tokenizer import train_tokenizer

num2words = pytest.importorskip("num2words").num2words

SOURCE = "three hundred and forty-two"
ATOL = 1e-5
SCREENSHOTS = os.environ.get("VT_EXPLORE_SCREENSHOTS")  # a folder to keep the screenshots in (docs/explore.png)


@pytest.fixture(scope="module")
def tokenizer():
    texts = [num2words(i) for i in range(400)] + [num2words(i, lang="de") for i in range(400)]
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1, model_max_length=40)
    tokenizer.add_special_tokens({"mask_token": "<mask>"})  # for the masked language model
    return tokenizer


def build(model_class, tokenizer, seed, **overrides):
    torch.manual_seed(seed)
    model = model_class(tiny_config(vocab_size=len(tokenizer), **overrides)).eval()
    if model.can_generate():
        model.generation_config.max_length = 12
    return model


def source_ids(tokenizer, text=SOURCE, **kwargs):
    return torch.tensor([tokenizer(text, **kwargs)["input_ids"]])


def ids(tokenizer, tokens):
    return torch.tensor([tokenizer.convert_tokens_to_ids(tokens)], dtype=torch.long)


def assert_attentions_equal(ours, theirs):
    """ours: [layer][head][query][key] lists; theirs: the model's tuple of (1, H, Q, K) tensors."""
    assert len(ours) == len(theirs)
    for layer, expected in zip(ours, theirs):
        np.testing.assert_allclose(np.array(layer), expected[0].numpy(), rtol=0, atol=ATOL)


def assert_top_k(steps, logits, queries=None):
    """Each step's top-k: the k largest probabilities of the model's softmax at that step's position."""
    for step in steps:
        probabilities = torch.softmax(logits[0, step["query"]], dim=-1)
        values, indices = probabilities.topk(len(step["top_k"]))
        assert [c["id"] for c in step["top_k"]] == indices.tolist()
        np.testing.assert_allclose([c["probability"] for c in step["top_k"]], values.numpy(), rtol=0, atol=ATOL)


# ----------------------------------------------------------------------------------------------------------------
# The data equal the model's own numbers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_encoder_decoder_data_equal_output_attentions_and_generation(tokenizer, seed):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, seed)
    data = attention_data(model, tokenizer, SOURCE, num_beams=1, do_sample=False)
    src = source_ids(tokenizer)
    with torch.no_grad():
        generated = model.generate(src, num_beams=1, do_sample=False, output_attentions=True,
                                   return_dict_in_generate=True)
    assert data["translation"] == tokenizer.decode(generated.sequences[0], skip_special_tokens=True)
    assert data["target_tokens"] == tokenizer.convert_ids_to_tokens(generated.sequences[0, 1:])
    assert data["source_tokens"] == tokenizer.convert_ids_to_tokens(src[0])
    assert data["decoder_input_tokens"] == tokenizer.convert_ids_to_tokens(generated.sequences[0, :-1])

    decoder_input_ids = generated.sequences[:, :-1]
    with torch.no_grad():
        outputs = model(input_ids=src, decoder_input_ids=decoder_input_ids, output_attentions=True)
    assert_attentions_equal(data["encoder_attentions"], outputs.encoder_attentions)
    assert_attentions_equal(data["decoder_attentions"], outputs.decoder_attentions)
    assert_attentions_equal(data["cross_attentions"], outputs.cross_attentions)
    for layer in data["decoder_attentions"]:  # the causal mask: no query sees a later position
        assert np.all(np.triu(np.array(layer), k=1) == 0)
    # and the weights the cached generation saw, one step at a time (another code path)
    for layer in range(model.config.decoder_layers):
        during = torch.cat([step[layer] for step in generated.cross_attentions], dim=2)[0]  # (H, T, S)
        np.testing.assert_allclose(np.array(data["cross_attentions"][layer]), during.numpy(), rtol=0, atol=ATOL)

    assert len(data["steps"]) == len(data["target_tokens"])
    assert_top_k(data["steps"], outputs.logits)
    for step in data["steps"]:  # greedy: the token produced is the most probable one
        assert step["top_k"][0]["token"] == step["token"]
        assert "beams" not in step
    assert data["decoding"]["strategy"] == "greedy"
    assert data["step_attention"] == "cross"


@pytest.mark.parametrize("seed", [0, 1])
def test_beams_per_step_are_the_searchs_hypotheses_with_their_log_probabilities(tokenizer, seed):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, seed)
    data = attention_data(model, tokenizer, SOURCE, num_beams=3)
    src = source_ids(tokenizer)
    with torch.no_grad():
        expected = model.generate(src, num_beams=3)[0]
    assert data["translation"] == tokenizer.decode(expected, skip_special_tokens=True)
    assert data["decoding"] == {**data["decoding"], "strategy": "beam search", "num_beams": 3}
    start = model.config.decoder_start_token_id
    for t, step in enumerate(data["steps"]):
        beams = step["beams"]
        assert 1 <= len(beams) <= 3 and (t == 0) == (len(beams) == 1)  # all beams start as one hypothesis
        assert [b["chosen"] for b in beams].count(True) == 1  # the final translation was among them
        assert [b["score"] for b in beams] == sorted((b["score"] for b in beams), reverse=True)
        for beam in beams:
            assert len(beam["tokens"]) == t
            prefix = torch.cat([torch.tensor([[start]]), ids(tokenizer, beam["tokens"])], dim=1)
            with torch.no_grad():  # the oracle: a forward pass over the hypothesis, without the cache
                log_probs = torch.log_softmax(model(input_ids=src, decoder_input_ids=prefix).logits[0], dim=-1)
            score = sum(float(log_probs[i, prefix[0, i + 1]]) for i in range(t))
            assert beam["score"] == pytest.approx(score, abs=1e-4)
            if beam["chosen"]:
                assert beam["tokens"] == data["target_tokens"][:t]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_decoder_only_data_equal_output_attentions(tokenizer, seed):
    model = build(VanillaTransformerForCausalLM, tokenizer, seed)
    data = attention_data(model, tokenizer, "seventeen", num_beams=1, do_sample=False)
    prompt = source_ids(tokenizer, "seventeen", add_special_tokens=False)
    with torch.no_grad():
        generated = model.generate(prompt, attention_mask=torch.ones_like(prompt), num_beams=1, do_sample=False)
        outputs = model(input_ids=generated, output_attentions=True)
    assert data["configuration"] == "decoder-only"
    assert data["decoder_input_tokens"] == tokenizer.convert_ids_to_tokens(generated[0])
    assert data["source_tokens"] == tokenizer.convert_ids_to_tokens(prompt[0])
    assert data["translation"] == tokenizer.decode(generated[0, prompt.shape[1]:], skip_special_tokens=True)
    assert data["encoder_attentions"] == [] and data["cross_attentions"] == []
    assert_attentions_equal(data["decoder_attentions"], outputs.attentions)
    assert len(data["steps"]) == generated.shape[1]  # the next-token distribution at every position
    assert_top_k(data["steps"], outputs.logits)
    for i, step in enumerate(data["steps"][prompt.shape[1] - 1: -1]):  # greedy continuation: top-1 every time
        assert step["top_k"][0]["token"] == step["token"]
    assert data["step_attention"] == "decoder"


@pytest.mark.parametrize("seed", [0, 1])
def test_encoder_only_data_equal_output_attentions(tokenizer, seed):
    masked = build(VanillaTransformerForMaskedLM, tokenizer, seed)
    text = "three hundred <mask> forty-two"
    data = attention_data(masked, tokenizer, text)
    src = source_ids(tokenizer, text)
    with torch.no_grad():
        outputs = masked(input_ids=src, output_attentions=True)
    assert data["configuration"] == "encoder-only" and data["decoding"] is None
    assert_attentions_equal(data["encoder_attentions"], outputs.attentions)
    mask_positions = (src[0] == tokenizer.mask_token_id).nonzero()[:, 0].tolist()
    assert [step["query"] for step in data["steps"]] == mask_positions and len(mask_positions) == 1  # fill-mask
    assert_top_k(data["steps"], outputs.logits)

    classifier = build(VanillaTransformerForSequenceClassification, tokenizer, seed, num_labels=3,
                       id2label={0: "low", 1: "middle", 2: "high"}, label2id={"low": 0, "middle": 1, "high": 2})
    data = attention_data(classifier, tokenizer, SOURCE)
    with torch.no_grad():
        outputs = classifier(input_ids=source_ids(tokenizer), output_attentions=True)
    assert_attentions_equal(data["encoder_attentions"], outputs.attentions)
    assert [s["label"] for s in data["label_scores"]] == ["low", "middle", "high"]
    np.testing.assert_allclose([s["score"] for s in data["label_scores"]],
                               torch.softmax(outputs.logits[0], dim=-1).numpy(), rtol=0, atol=ATOL)


@pytest.mark.parametrize("overrides", [{}, {"position_embedding_type": "learned"}], ids=["sinusoidal", "learned"])
def test_positional_encoding_is_what_the_encoder_adds_to_its_embeddings(tokenizer, overrides):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 5, **overrides)
    data = attention_data(model, tokenizer, SOURCE, num_beams=1)
    values = np.array(data["positional_encoding"]["values"])
    input_ids = torch.randint(4, len(tokenizer), (1, values.shape[0]), generator=torch.Generator().manual_seed(5))
    encoder = model.get_encoder()
    with torch.no_grad():
        added = encoder(input_ids, output_hidden_states=True).hidden_states[0][0] - \
            encoder.embed_tokens(input_ids)[0] * encoder.embed_scale
    np.testing.assert_allclose(values, added.numpy(), rtol=0, atol=ATOL)
    assert data["positional_encoding"]["type"] == overrides.get("position_embedding_type", "sinusoidal")


def test_a_text_longer_than_the_model_reads_is_cut_with_a_note(tokenizer):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 0)
    text = " ".join(num2words(i) for i in range(100, 140))
    data = attention_data(model, tokenizer, text, num_beams=1)
    limit = 40  # the tokenizer's model_max_length (the model has 64 positions)
    assert len(data["source_tokens"]) == limit and data["source_tokens"][-1] == tokenizer.eos_token
    assert len(data["notes"]) == 1 and f"the model reads at most {limit}" in data["notes"][0]
    assert np.array(data["encoder_attentions"]).shape[-2:] == (limit, limit)
    with pytest.raises(ValueError, match="source text is empty"):
        attention_data(model, tokenizer, " \n ")


def test_the_page_embeds_the_data_as_json(tokenizer, tmp_path):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 1)
    data = [attention_data(model, tokenizer, SOURCE, num_beams=2), attention_data(model, tokenizer, "seventeen")]
    path = write_html(tmp_path / "page.html", data)
    page = pathlib.Path(path).read_text(encoding="utf-8")
    embedded = re.search(r'<script type="application/json" id="attention-data">(.*?)</script>', page, re.S).group(1)
    loaded = json.loads(embedded)
    assert len(loaded) == 2
    for ours, theirs in zip(loaded, data):
        for key in ("source_tokens", "target_tokens", "translation"):
            assert ours[key] == theirs[key]
        for key in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
            np.testing.assert_allclose(np.array(ours[key]), np.array(theirs[key]), rtol=0, atol=1e-6)
    # nothing to fetch: no CDN, no fonts (the SVG namespace is a name, never fetched)
    assert set(re.findall(r"https?://[^\s\"']+", page)) == {"http://www.w3.org/2000/svg"}
    assert os.path.getsize(path) < 1_000_000
    # a text cannot end the script element
    tricky = dict(data[1], text="</script><script>alert(1)</script>")
    assert render_page([tricky]).count("</script>") == page.count("</script>")


# ----------------------------------------------------------------------------------------------------------------
# Command line and bad input


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    path = tmp_path_factory.mktemp("tiny-translation-model")
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 0)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return str(path)


def run_cli(argv, capsys):
    return run_main(main, argv, capsys)


def test_html_command_writes_the_page(model_dir, tmp_path, capsys):
    out = tmp_path / "explore.html"
    code, stdout, err = run_cli(["explore", model_dir, "--html", str(out), "--text", SOURCE, "--text", "five"], capsys)
    assert code == 0, err
    assert f"Wrote {out}" in stdout and "2 sentence(s)" in stdout
    loaded = json.loads(re.search(r'id="attention-data">(.*?)</script>', out.read_text(), re.S).group(1))
    assert [d["text"] for d in loaded] == [SOURCE, "five"]


@pytest.mark.parametrize(
    "make, extra, message",
    [
        ("missing", [], "model folder not found"),
        ("empty", [], "it has no config.json"),
        ("ctranslate2", [], "is a CTranslate2 folder: it exposes no per-head attention"),
        ("model", ["--html", "{tmp}/no-such-folder/x.html", "--text", SOURCE], "does not exist"),
        ("model", ["--html", "{tmp}/x.html", "--text", " "], "source text is empty"),
        ("model", ["--html", "{tmp}/x.html"], "--html needs at least one --text"),
        ("model", ["--text", SOURCE], "--text is for the page"),
        ("model", ["--space", "{tmp}/space", "--html", "{tmp}/x.html", "--text", "x"], "give one of them"),
        ("model", ["--port", "70000"], "--port must be between"),
        ("empty", ["--space", "{tmp}/space"], "it has no config.json"),
    ],
)
def test_bad_input_is_one_line(model_dir, tmp_path, capsys, make, extra, message):
    folder = {"missing": str(tmp_path / "nope"), "empty": str(tmp_path / "empty"), "model": model_dir,
              "ctranslate2": str(tmp_path / "ct2")}[make]
    if make == "empty":
        os.makedirs(folder)
    if make == "ctranslate2":
        os.makedirs(folder)
        for name in ("config.json", "model.bin"):
            pathlib.Path(folder, name).write_text("{}")
    code, _, err = run_cli(["explore", folder] + [a.format(tmp=tmp_path) for a in extra], capsys)
    assert code != 0
    last = err.strip().splitlines()[-1]  # argparse's usage may come before it
    assert message in last and last.count("error:") == 1
    assert "Traceback" not in err
    assert not (tmp_path / "space").exists()


@pytest.mark.slow  # a fresh interpreter
def test_space_folder_runs_the_explorer_in_a_fresh_interpreter(model_dir, tmp_path, capsys):
    space = tmp_path / "space"
    code, stdout, err = run_cli(["explore", model_dir, "--space", str(space)], capsys)
    assert code == 0, err
    readme = (space / "README.md").read_text()
    front = readme.split("---")[1]
    assert "sdk: gradio" in front and "app_file: app.py" in front
    requirements = (space / "requirements.txt").read_text()
    assert "gradio" in requirements and "transformers" in requirements
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= set(os.listdir(space / "model"))
    assert (space / "vanilla_transformer" / "inspect" / "explore_assets" / "explore.js").is_file()
    # the Space's own copy of the package runs its app (not this checkout, not an installed one)
    script = ("import sys; sys.path.insert(0, sys.argv[1]); import app, vanilla_transformer; "
              "print(vanilla_transformer.__file__); print(type(app.demo).__mro__[1].__name__, app.model.config.d_model)")
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""}
    result = subprocess.run([sys.executable, "-I", "-c", script, str(space)], capture_output=True, text=True,
                            env=env, timeout=240)
    assert result.returncode == 0, result.stderr
    package_file, blocks = result.stdout.strip().splitlines()[-2:]
    assert package_file.startswith(str(space))
    assert blocks == "Blocks 32"
    # a second Space into the same folder is refused: nothing a user saved is overwritten
    code, _, err = run_cli(["explore", model_dir, "--space", str(space)], capsys)
    assert code != 0 and "already exists and is not empty" in err

    hub = tmp_path / "hub-space"
    write_space(model_dir, hub, model_id="someone/tiny-model")
    assert "MODEL = 'someone/tiny-model'" in (hub / "app.py").read_text()
    assert not (hub / "model").exists()


# ----------------------------------------------------------------------------------------------------------------
# A real browser: the live app (started by the command line) and the static page


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def live_app(model_dir):
    """`vanilla-transformer explore MODEL --port P` in a subprocess; yields its printed URL."""
    port = free_port()
    env = {**os.environ, "GRADIO_ANALYTICS_ENABLED": "False", "HF_HUB_OFFLINE": "1",
           "PYTHONPATH": os.pathsep.join([str(REPO_ROOT), os.environ.get("PYTHONPATH", "")])}
    process = subprocess.Popen([sys.executable, "-m", "vanilla_transformer", "explore", model_dir, "--port", str(port),
                                "--device", "cpu"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                               env=env)
    try:
        deadline, url = time.time() + 180, None
        while url is None and time.time() < deadline:
            line = process.stdout.readline()
            if not line and process.poll() is not None:
                pytest.fail(f"the explorer exited with status {process.returncode}")
            match = re.search(r"running on (http://\S+)", line)
            url = match.group(1) if match else None
        assert url == f"http://127.0.0.1:{port}/", url
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)



def open_page(browser, url):
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.goto(url)
    return page, errors


def screenshot(page, name, tmp_path):
    folder = pathlib.Path(SCREENSHOTS) if SCREENSHOTS else tmp_path
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / name), full_page=True)
    assert (folder / name).stat().st_size > 10_000


def drawn_cells(frame):
    """Every drawn attention cell: {(head, query, key): value} read from the SVG's attributes."""
    cells = frame.locator("rect.cell").evaluate_all(
        "cells => cells.map(c => [+c.dataset.head, +c.dataset.query, +c.dataset.key, +c.dataset.value])")
    return {(h, q, k): v for h, q, k, v in cells}


def check_drawn_head(frame, expected, head):
    cells = drawn_cells(frame)
    matrix = expected[head]
    assert {key[0] for key in cells} == {head}
    assert len(cells) == matrix.shape[0] * matrix.shape[1]
    for (h, q, k), value in cells.items():
        assert value == pytest.approx(float(matrix[q, k]), abs=1e-5)


@pytest.mark.slow  # a server in a subprocess, a real browser
def test_live_app_translates_and_draws_the_models_attention(live_app, browser, model_dir, tokenizer, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    src = source_ids(tokenizer)
    with torch.no_grad():
        generated = model.generate(src)  # the app's default: the model's generation config (beam search, 4 beams)
        outputs = model(input_ids=src, decoder_input_ids=generated[:, :-1], output_attentions=True)
    translation = tokenizer.decode(generated[0], skip_special_tokens=True)

    page, errors = open_page(browser, live_app)
    page.locator("#source textarea").fill(SOURCE)
    page.locator("#translate").click()
    page.wait_for_function("t => document.querySelector('#translation textarea').value === t", arg=translation,
                           timeout=30_000)
    frame = page.frame_locator("#explorer-frame")
    frame.locator("#explorer[data-ready=true]").wait_for()
    assert frame.locator("#translation-text").inner_text() == translation

    # cross-attention, last layer, head 0 by default; then another layer and head: the drawn values follow
    last = model.config.decoder_layers - 1
    check_drawn_head(frame, outputs.cross_attentions[last][0].numpy(), 0)
    frame.locator("#layer").select_option("1")
    frame.locator("#head").select_option("2")
    check_drawn_head(frame, outputs.cross_attentions[1][0].numpy(), 2)
    frame.locator("#kind").select_option("decoder")
    check_drawn_head(frame, outputs.decoder_attentions[1][0].numpy(), 2)
    assert frame.locator("rect.cell.masked").count() == sum(range(generated.shape[1] - 1))  # the causal mask
    frame.locator("#head").select_option("all")
    assert len({key[0] for key in drawn_cells(frame)}) == model.config.decoder_attention_heads

    # the step slider: top-k probabilities and the step's cross-attention row
    frame.locator("#kind").select_option("cross")
    frame.locator("#head").select_option("0")
    step = generated.shape[1] - 2  # the last step (the one that produced </s>)
    assert step >= 1
    frame.locator("#step").fill(str(step))
    assert f"step {step} of" in frame.locator("#step-label").inner_text()
    probabilities = torch.softmax(outputs.logits[0, step], dim=-1).topk(10).values.numpy()
    drawn = frame.locator("#top-k .bar").evaluate_all("bars => bars.map(b => +b.dataset.value)")
    np.testing.assert_allclose(drawn, probabilities, rtol=0, atol=1e-5)
    row = frame.locator("#step-attention span").evaluate_all("spans => spans.map(s => +s.dataset.value)")
    np.testing.assert_allclose(row, outputs.cross_attentions[1][0, 0, step].numpy(), rtol=0, atol=1e-5)
    assert frame.locator("#beams tr.chosen").count() == 1  # beam search: the hypothesis that became the output
    page.wait_for_function("document.querySelector('#explorer-frame').getBoundingClientRect().height !== 1200")
    screenshot(page, "explore-app.png", tmp_path)  # the whole page: the frame grew to fit what it shows
    assert errors == []
    page.close()


@pytest.mark.slow  # a server in a subprocess, a real browser
def test_live_app_bad_input_keeps_serving(live_app, browser):
    page, _ = open_page(browser, live_app)
    page.locator("#translate").click()  # an empty text
    page.get_by_text("The source text is empty").first.wait_for(timeout=30_000)
    page.locator("#source textarea").fill(" ".join(num2words(i) for i in range(200, 240)))  # too long
    page.locator("#translate").click()
    frame = page.frame_locator("#explorer-frame")
    note = frame.locator(".note")
    note.wait_for(timeout=30_000)
    assert "cut to its first 40 tokens" in note.inner_text()
    page.close()


@pytest.mark.slow  # a server in a subprocess
def test_gradio_client_calls_translate(live_app, model_dir, tokenizer):
    from gradio_client import Client
    from transformers import AutoModelForSeq2SeqLM

    client = Client(live_app, verbose=False)
    translation, data, views = client.predict(SOURCE, "greedy", 1, 1.0, api_name="/translate")
    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    expected = attention_data(model, tokenizer, SOURCE, num_beams=1, do_sample=False)
    assert translation == expected["translation"] == data["translation"]
    for key in ("encoder_attentions", "decoder_attentions", "cross_attentions"):
        np.testing.assert_allclose(np.array(data[key]), np.array(expected[key]), rtol=0, atol=1e-6)
    assert 'id="explorer-frame"' in views
    with pytest.raises(Exception, match="source text is empty"):
        client.predict("", "greedy", 1, 1.0, api_name="/translate")


@pytest.mark.slow  # a real browser
def test_static_page_opens_offline_from_disk(browser, tokenizer, tmp_path):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 0)
    causal = build(VanillaTransformerForCausalLM, tokenizer, 1)
    data = [attention_data(model, tokenizer, SOURCE, num_beams=3), attention_data(causal, tokenizer, "seventeen")]
    path = write_html(tmp_path / "explore.html", data)
    requests = []
    page = browser.new_page()
    errors = []
    page.on("pageerror", lambda error: errors.append(str(error)))
    page.on("console", lambda message: errors.append(message.text) if message.type == "error" else None)
    page.on("request", lambda request: requests.append(request.url))
    page.goto(pathlib.Path(path).as_uri())
    page.locator("#explorer[data-ready=true]").wait_for()
    check_drawn_head(page, np.array(data[0]["cross_attentions"][-1]), 0)
    page.locator("#step").fill("3")
    assert page.locator("#beams tr.chosen").count() == 1
    page.locator("rect.cell").nth(3).hover()
    assert page.locator("rect.cell.hl").count() > 1  # its row and column light up
    lines = page.locator("#flow line.link")
    page.locator("#flow text.q-tok").nth(1).hover()  # the lines view: only what query 1 attends to stays
    shown = lines.evaluate_all("ls => ls.filter(l => l.style.display !== 'none').map(l => +l.dataset.query)")
    assert shown and set(shown) == {1}
    page.locator("#flow text.k-tok").nth(0).hover()  # and only what attends to key 0
    shown = lines.evaluate_all("ls => ls.filter(l => l.style.display !== 'none').map(l => +l.dataset.key)")
    assert shown and set(shown) == {0}
    page.locator("#sentence").select_option("1")  # the decoder-only model's sentence
    check_drawn_head(page, np.array(data[1]["decoder_attentions"][-1]), 0)
    assert page.locator("#kind option").all_inner_texts() == ["Decoder self-attention"]
    screenshot(page, "explore-page.png", tmp_path)
    assert requests == [pathlib.Path(path).as_uri()]
    assert errors == []
    page.close()


@pytest.mark.parametrize("model_class", [VanillaTransformerForCausalLM, VanillaTransformerForSequenceClassification])
def test_app_builds_for_the_other_configurations_and_decoding_choices_reach_generate(tokenizer, model_class):
    from vanilla_transformer.inspect.app import build_app, explore_text

    model = build(model_class, tokenizer, 2)
    app = build_app(model, tokenizer)
    assert "/translate" in [f"/{d['api_name']}" for d in app.config["dependencies"] if d.get("api_name")]
    translation, data, views = explore_text(model, tokenizer, "seventeen", "sampling", 1, 0.7)
    assert 'id="explorer-frame"' in views and data["translation"] == translation
    if model.can_generate():
        assert data["decoding"]["strategy"] == "sampling" and data["decoding"]["temperature"] == 0.7
        with pytest.raises(ValueError, match="temperature must be positive"):
            explore_text(model, tokenizer, "seventeen", "sampling", 1, 0.0)
        with pytest.raises(ValueError, match="is not one of"):
            explore_text(model, tokenizer, "seventeen", "top-p", 1, 1.0)
    else:
        assert data["decoding"] is None and len(data["label_scores"]) == model.config.num_labels


# ----------------------------------------------------------------------------------------------------------------
# The walk-through in a real browser: every step drawn from the model's numbers


def unpacked(walkthrough):
    """The page's packed walk-through (page.Packer) decoded here with numpy: {id(descriptor): array}."""
    import base64
    import gzip

    buffer = gzip.decompress(base64.b64decode(walkthrough["packed"]))

    def matrix(desc):
        shape = desc["shape"]
        count, cols = int(np.prod(shape)), shape[-1]
        ints = np.frombuffer(buffer, dtype="<i1" if desc["bits"] == 8 else "<i2", count=count, offset=desc["data"])
        scale = np.frombuffer(buffer, dtype="<f4", count=count // cols, offset=desc["scale"])
        return (ints.reshape(-1, cols) * scale[:, None].astype(np.float64)).reshape(shape)
    return matrix


def assert_packed_within_its_precision(packed, matrix, full):
    """A packed matrix against the full-precision one: each value within half a step of its row's scale."""
    values, full = matrix(packed), np.asarray(full, dtype=np.float64)
    step = np.abs(full).max(axis=-1, keepdims=True) / ((1 << (packed["bits"] - 1)) - 1)
    assert np.all(np.abs(values - full) <= step / 2 + 1e-6)


def expected_vector(name, body, page_data, matrix):
    """What the vector `name` of the step drawn in `body` (its data-* attributes) must hold, from the page's data."""
    stack, kind = body["stack"], body["kind"]
    layer, head, token = int(body["layer"]), int(body["head"]), int(body["token"])
    walk = page_data["walkthrough"]
    if name in ("token", "position", "sum"):
        return matrix(walk["embeddings"]["source" if stack == "encoder" else "target"][name])[token]
    layer_data = walk[stack][layer]
    attention = layer_data.get(kind, {})
    kinds = {"encoder": "encoder", "decoder": "decoder"}
    weights = page_data[("cross" if kind == "cross_attention" else kinds[stack]) + "_attentions"][layer][head]
    if name == "q":
        return matrix(attention["q"])[head][token]
    if name == "scores":
        return matrix(attention["scores"])[head][token]
    if name == "masked":
        row = matrix(attention["scores"])[head][token]
        return [None if allowed == 0 else value for value, allowed in zip(row, attention["mask"][token])]
    if name == "weights":
        return weights[token]
    if name == "head":
        dk = attention["q"]["shape"][2]
        return matrix(attention["context"])[token][head * dk:(head + 1) * dk]
    if name in ("output", "sublayer"):
        return matrix(attention["output"])[token]
    desc = layer_data[name]
    return matrix(layer_data[desc["same_as"]] if "same_as" in desc else desc)[token]


def check_step(frame, page_data, matrix):
    """Every vector and the output layer's bars of the step shown, against the page's data; one heatmap's hover
    readout too. Returns the step's attributes."""
    body = frame.locator("#wt-body").evaluate("b => Object.assign({}, b.dataset)")
    vectors = frame.locator(".wt-vector").evaluate_all(
        "vs => vs.map(v => [v.dataset.name, JSON.parse(v.dataset.values)])")
    for name, drawn in vectors:
        expected = expected_vector(name, body, page_data, matrix)
        assert len(drawn) == len(expected), name
        for d, e in zip(drawn, expected):
            assert (d is None and e is None) or d == pytest.approx(float(e), abs=1e-5), (name, body)
    logits = frame.locator("#wt-logits .bar")
    if logits.count():
        top = page_data["walkthrough"]["logits"][int(body["token"])]
        drawn = logits.evaluate_all("bars => bars.map(b => [+b.dataset.id, +b.dataset.value, +b.dataset.logit])")
        assert [d[0] for d in drawn] == [c["id"] for c in top]
        np.testing.assert_allclose([d[1] for d in drawn], [c["probability"] for c in top], rtol=0, atol=1e-6)
        np.testing.assert_allclose([d[2] for d in drawn], [c["logit"] for c in top], rtol=0, atol=1e-6)
        return body
    assert vectors, body  # every other step follows the token through at least one vector, and draws a heatmap
    heat = frame.locator("canvas.wt-heat").first
    rows, cols = int(heat.get_attribute("data-rows")), int(heat.get_attribute("data-cols"))
    box = heat.bounding_box()
    i, j = rows - 1, cols // 2
    heat.hover(position={"x": (j + 0.5) * box["width"] / cols, "y": (i + 0.5) * box["height"] / rows})
    readout = frame.locator(f".wt-readout[data-name='{heat.get_attribute('data-name')}']").first
    assert (int(readout.get_attribute("data-row")), int(readout.get_attribute("data-col"))) == (i, j)
    assert np.isfinite(float(readout.get_attribute("data-value")))
    return body


def walk_through_every_step(page, frame, page_data, expected):
    """Step through the whole walk-through (next button, arrow keys, once back), changing the layer, head and token
    mid-way; every step's drawn values checked. `expected` is attention_data's full-precision walk-through."""
    matrix = unpacked(page_data["walkthrough"])
    walk = page_data["walkthrough"]
    for stack in ("encoder", "decoder"):
        for ours, full in zip(walk[stack], expected[stack]):
            for key, value in ours.items():
                if key.endswith("attention"):
                    for name, packed in value.items():
                        if name != "mask":
                            assert_packed_within_its_precision(packed, matrix, full[key][name])
                elif "same_as" not in value:
                    assert_packed_within_its_precision(value, matrix, full[key])
    frame.locator("#walkthrough[data-ready=true]").wait_for()
    count = frame.locator("#wt-step option").count()
    seen = []
    for step in range(count):
        body = check_step(frame, page_data, matrix)
        assert int(body["step"]) == step
        seen.append((body["stack"], body["kind"]))
        if step == 3:  # the layer, head and token changed mid-way: the next steps follow them
            frame.locator("#wt-layer").select_option("1")
            frame.locator("#wt-head").select_option("2")
            frame.locator("#wt-token").select_option("2")
            body = check_step(frame, page_data, matrix)
            assert (body["layer"], body["head"], body["token"]) == ("1", "2", "2")
        if step == count - 1:
            assert frame.locator("#wt-next").is_disabled()
            break
        if step % 2:
            frame.locator("#wt-next").click()
        else:
            frame.locator("#wt-body").click(position={"x": 5, "y": 5})  # the page has the focus, not a menu
            page.keyboard.press("ArrowRight")
        frame.locator(f"#wt-body[data-step='{step + 1}']").wait_for()
    page.keyboard.press("ArrowLeft")
    frame.locator(f"#wt-body[data-step='{count - 2}']").wait_for()
    return seen, count


@pytest.mark.slow  # a real browser
def test_static_page_walks_through_every_equation_with_the_models_numbers(browser, tokenizer, tmp_path):
    model = build(VanillaTransformerForConditionalGeneration, tokenizer, 3, normalize_before=True)
    causal = build(VanillaTransformerForCausalLM, tokenizer, 4)
    masked = build(VanillaTransformerForMaskedLM, tokenizer, 5)
    data = [attention_data(model, tokenizer, SOURCE, num_beams=1), attention_data(causal, tokenizer, "seventeen"),
            attention_data(masked, tokenizer, "three hundred <mask> forty-two")]
    path = write_html(tmp_path / "explore.html", data)
    page_data = json.loads(re.search(r'id="attention-data">(.*?)</script>', pathlib.Path(path).read_text(),
                                     re.S).group(1))
    page, errors = open_page(browser, pathlib.Path(path).as_uri())
    page.locator("#explorer[data-ready=true]").wait_for()
    seen, count = walk_through_every_step(page, page, page_data[0], data[0]["walkthrough"])
    layers = model.config.encoder_layers + model.config.decoder_layers
    assert count == 9 + 16 and layers >= 2  # encoder: 9 steps; decoder: 16, the output layer last
    assert {kind for _, kind in seen} == {"", "self_attention", "cross_attention"}
    assert "pre-LN" in page.locator("#walkthrough .legend").first.inner_text()
    for index, expected_count in ((1, 10), (2, 10)):  # decoder-only: no encoder-decoder attention; masked LM: no decoder
        page.locator("#sentence").select_option(str(index))
        seen, count = walk_through_every_step(page, page, page_data[index], data[index]["walkthrough"])
        assert count == expected_count and "cross_attention" not in {kind for _, kind in seen}
    assert errors == []
    page.close()


@pytest.mark.slow  # a server in a subprocess, a real browser
def test_live_app_walks_through_its_translation(live_app, browser, model_dir, tokenizer, tmp_path):
    from transformers import AutoModelForSeq2SeqLM

    model = AutoModelForSeq2SeqLM.from_pretrained(model_dir).eval()
    expected = attention_data(model, tokenizer, SOURCE)  # the app's default decoding: the generation config's
    page, errors = open_page(browser, live_app)
    page.locator("#source textarea").fill(SOURCE)
    page.locator("#translate").click()
    page.wait_for_function("t => document.querySelector('#translation textarea').value === t",
                           arg=expected["translation"], timeout=30_000)
    frame = page.frame_locator("#explorer-frame")
    frame.locator("#explorer[data-ready=true]").wait_for()
    page_data = json.loads(frame.locator("#attention-data").text_content())[0]
    assert page_data["target_tokens"] == expected["target_tokens"]
    seen, count = walk_through_every_step(page, frame, page_data, expected["walkthrough"])
    assert count == 25 and seen[-1] == ("decoder", "")
    frame.locator("#wt-step").select_option("0")
    frame.locator("#walkthrough").scroll_into_view_if_needed()
    screenshot(page, "explore-walkthrough-app.png", tmp_path)
    assert errors == []
    page.close()
