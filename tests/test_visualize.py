"""Pictures draw exactly the model's numbers: attention maps against `output_attentions` (and against the weights
recorded during cached generation), positional encodings against the paper's formula and against what the
encoder really adds to its embeddings, training curves against a real Trainer run's log. Files come out at the
requested pixel size and are not blank; bad input is a one-line error.
"""

import json
import math
import os
import sys

import numpy as np
import pytest
import torch

from helpers import run_main, tiny_config
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main
from vanilla_transformer.training.tokenizer import train_tokenizer

pytest.importorskip("matplotlib")
num2words = pytest.importorskip("num2words").num2words

from matplotlib.image import imread  # noqa: E402

from vanilla_transformer.inspect.plots import (  # noqa: E402
    attention_weights,
    find_trainer_state,
    plot_attention,
    plot_positions,
    plot_training,
    positional_encoding_matrix,
)

SOURCE, TARGET = "three hundred and forty-two", "dreihundertzweiundvierzig"


@pytest.fixture(scope="module")
def tokenizer():
    texts = [num2words(i) for i in range(400)] + [num2words(i, lang="de") for i in range(400)]
    return train_tokenizer(texts, vocab_size=300, min_frequency=1)


def tiny_model(tokenizer, seed=0, **overrides):
    """2 encoder + 3 decoder layers of 4 heads, d_model 32 (helpers.tiny_config) over the tokenizer's vocabulary."""
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(tiny_config(vocab_size=len(tokenizer), **overrides)).eval()
    model.generation_config.max_length = 12
    return model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory, tokenizer):
    path = str(tmp_path_factory.mktemp("tiny-model"))
    tiny_model(tokenizer).save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def image_axes(fig):
    """The heatmap panels of a figure, in drawing order (colorbars and empty grid cells left out)."""
    return [ax for ax in fig.axes if ax.images and ax.get_label() != "<colorbar>"]


def run_cli(argv, capsys):
    return run_main(main, argv, capsys)


def assert_png(path, width, height):
    image = imread(path)  # (H, W, 4) floats in [0, 1]
    assert image.shape[:2] == (height, width)
    rgb = image[..., :3].reshape(-1, 3)
    assert rgb.std() > 0.05, "the image is (nearly) one flat colour"
    assert len(np.unique((rgb * 255).round(), axis=0)) > 50, "the image has too few colours to hold a picture"


# ----------------------------------------------------------------------------------------------------------------
# Attention


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("kind", ["cross", "encoder", "decoder"])
def test_drawn_attention_equals_output_attentions(tokenizer, kind, seed):
    model = tiny_model(tokenizer, seed)
    source = tokenizer(SOURCE, return_tensors="pt")
    labels = tokenizer(text_target=TARGET, return_tensors="pt").input_ids
    decoder_input_ids = torch.cat([torch.tensor([[model.config.decoder_start_token_id]]), labels[:, :-1]], dim=1)
    with torch.no_grad():
        outputs = model(**source, decoder_input_ids=decoder_input_ids, output_attentions=True)
    expected = {"cross": outputs.cross_attentions, "encoder": outputs.encoder_attentions,
                "decoder": outputs.decoder_attentions}[kind]
    source_tokens = tokenizer.convert_ids_to_tokens(source.input_ids[0])
    queries, keys = {
        "cross": (tokenizer.convert_ids_to_tokens(labels[0]), source_tokens),
        "encoder": (source_tokens, source_tokens),
        "decoder": (tokenizer.convert_ids_to_tokens(decoder_input_ids[0]),) * 2,
    }[kind]

    for layer in range(len(expected)):
        fig = plot_attention(model, tokenizer, SOURCE, TARGET, kind=kind, layer=layer, head="all")
        panels = image_axes(fig)
        assert len(panels) == expected[layer].shape[1]  # one panel per head
        for head, ax in enumerate(panels):
            drawn = np.asarray(ax.images[0].get_array())
            np.testing.assert_allclose(drawn, expected[layer][0, head].numpy(), rtol=0, atol=1e-6)
            np.testing.assert_allclose(drawn.sum(axis=-1), 1.0, atol=1e-5)  # rows are distributions over keys
            if kind == "decoder":
                assert np.all(np.triu(drawn, k=1) == 0)  # no query sees a later position
        assert [t.get_text() for t in panels[-1].get_xticklabels()] == keys  # labelled below the bottom row
        assert [t.get_text() for t in panels[0].get_yticklabels()] == queries  # and left of the first column


def test_attention_of_the_models_own_translation_equals_the_weights_seen_during_cached_generation(tokenizer):
    model = tiny_model(tokenizer, seed=3)
    source = tokenizer(SOURCE, return_tensors="pt")
    # greedy, and ending in </s> (forced at the last step): the drawn rows must keep it
    decoding = {"num_beams": 1, "do_sample": False, "max_length": 8, "forced_eos_token_id": model.config.eos_token_id}
    with torch.no_grad():
        generated = model.generate(**source, **decoding, output_attentions=True, return_dict_in_generate=True)
    tokens = tokenizer.convert_ids_to_tokens(generated.sequences[0, 1:])  # without the decoder start token
    assert tokens[-1] == tokenizer.eos_token
    layer = 1
    # one (1, H, 1, S) tensor per decoding step: step t is the step that produced token t
    during_generation = torch.cat([step[layer] for step in generated.cross_attentions], dim=2)[0]  # (H, T, S)

    attention = attention_weights(model, tokenizer, SOURCE, kind="cross", layer=layer, generate_kwargs=decoding)
    assert attention.target_generated
    assert attention.query_tokens == tokens
    assert attention.target == tokenizer.decode(generated.sequences[0], skip_special_tokens=True)
    np.testing.assert_allclose(attention.weights, during_generation.numpy(), rtol=0, atol=1e-5)

    fig = plot_attention(model, tokenizer, SOURCE, kind="cross", layer=layer, head=0, generate_kwargs=decoding)
    (ax,) = image_axes(fig)
    np.testing.assert_allclose(ax.images[0].get_array(), during_generation[0].numpy(), rtol=0, atol=1e-5)


def test_one_head_and_the_mean_of_heads(tokenizer):
    model = tiny_model(tokenizer, seed=4)
    attention = attention_weights(model, tokenizer, SOURCE, TARGET, kind="encoder", layer=-1)
    assert attention.layer == model.config.encoder_layers - 1
    for head, expected in ((2, attention.weights[2]), (-1, attention.weights[-1]),
                           ("mean", attention.weights.mean(axis=0))):
        (ax,) = image_axes(plot_attention(model, tokenizer, SOURCE, TARGET, kind="encoder", head=head))
        np.testing.assert_allclose(ax.images[0].get_array(), expected, rtol=0, atol=1e-7)


def test_unknown_layer_head_or_kind_is_a_clear_error(tokenizer):
    model = tiny_model(tokenizer)
    with pytest.raises(ValueError, match=r"layer 3 does not exist: the decoder has 3 layers \(0\.\.2"):
        attention_weights(model, tokenizer, SOURCE, TARGET, kind="cross", layer=3)
    with pytest.raises(ValueError, match=r"layer -3 does not exist: the encoder has 2 layers"):
        attention_weights(model, tokenizer, SOURCE, TARGET, kind="encoder", layer=-3)
    with pytest.raises(ValueError, match=r"head 4 does not exist: each decoder layer has 4 heads"):
        plot_attention(model, tokenizer, SOURCE, TARGET, head=4)
    with pytest.raises(ValueError, match="'all' or 'mean'"):
        plot_attention(model, tokenizer, SOURCE, TARGET, head="first")
    with pytest.raises(ValueError, match=r"kind='self' is not one of \['cross', 'encoder', 'decoder'\]"):
        attention_weights(model, tokenizer, SOURCE, TARGET, kind="self")
    with pytest.raises(ValueError, match="source text is empty"):
        attention_weights(model, tokenizer, "  ", TARGET)


def test_plotting_does_not_leave_the_model_in_eval_mode(tokenizer):
    model = tiny_model(tokenizer, dropout=0.3).train()
    first = attention_weights(model, tokenizer, SOURCE, TARGET).weights
    assert model.training
    np.testing.assert_array_equal(first, attention_weights(model, tokenizer, SOURCE, TARGET).weights)  # no dropout


def test_attention_command_writes_png_of_requested_size(model_dir, tmp_path, capsys):
    out = tmp_path / "attention.png"
    code, stdout, err = run_cli(["plot", "attention", "--model", model_dir, "--text", SOURCE, "--target", TARGET,
                                 "--kind", "decoder", "--layer", "1", "--head", "all", "--figsize", "8", "5",
                                 "--dpi", "60", "--out", str(out)], capsys)
    assert code == 0, err
    assert "480x300 pixels" in stdout
    assert_png(out, 480, 300)


def test_attention_command_translates_when_no_target_is_given(model_dir, tmp_path, capsys):
    out = tmp_path / "attention.png"
    code, _, err = run_cli(["plot", "attention", "--model", model_dir, "--text", SOURCE, "--head", "0",
                            "--num-beams", "2", "--max-new-tokens", "5", "--dpi", "40", "--out", str(out)], capsys)
    assert code == 0, err
    assert os.path.getsize(out) > 0


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--layer", "7"], "layer 7 does not exist: the decoder has 3 layers"),
        (["--kind", "encoder", "--layer", "2"], "layer 2 does not exist: the encoder has 2 layers"),
        (["--head", "4"], "head 4 does not exist"),
        (["--head", "some"], "is not a head index, 'all' or 'mean'"),
        (["--kind", "self"], "invalid choice: 'self'"),
        (["--out", "{missing}/attention.png"], "does not exist"),
        (["--out", "{tmp}/attention.notaformat"], "not supported"),
    ],
)
def test_attention_command_errors_are_one_line_without_traceback(model_dir, tmp_path, capsys, extra, message):
    argv = ["plot", "attention", "--model", model_dir, "--text", SOURCE, "--target", TARGET,
            "--out", str(tmp_path / "a.png")] + extra
    paths = {"missing": str(tmp_path / "no-such-folder"), "tmp": str(tmp_path)}
    code, _, err = run_cli([a.format(**paths) for a in argv], capsys)
    assert code != 0
    assert message in err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].count("error:") == 1


def test_attention_command_with_missing_model_folder(tmp_path, capsys):
    code, _, err = run_cli(["plot", "attention", "--model", str(tmp_path / "nope"), "--text", SOURCE,
                            "--out", str(tmp_path / "a.png")], capsys)
    assert code == 1
    assert err.strip() == f"vanilla-transformer plot attention: error: model folder not found: {tmp_path / 'nope'}"


# ----------------------------------------------------------------------------------------------------------------
# Positional encodings


def paper_encoding(length, d_model, layout="interleaved", frequencies="paper", offset=0):
    """Section 3.5 written out again in numpy (and the tensor2tensor variant), independently of the model code."""
    positions = np.arange(offset, offset + length, dtype=np.float64)[:, None]
    half = d_model // 2
    if frequencies == "paper":
        wavelengths = 10000.0 ** (2 * np.arange(half) / d_model)  # PE(pos, 2i) = sin(pos / 10000^(2i/d_model))
    else:
        wavelengths = 10000.0 ** (np.arange(half) / (half - 1))
    sines, cosines = np.sin(positions / wavelengths), np.cos(positions / wavelengths)
    encoding = np.empty((length, d_model))
    if layout == "interleaved":
        encoding[:, 0::2], encoding[:, 1::2] = sines, cosines
    else:
        encoding[:, :half], encoding[:, half:] = sines, cosines
    return encoding


@pytest.mark.parametrize("layout", ["interleaved", "concatenated"])
@pytest.mark.parametrize("frequencies", ["paper", "tensor2tensor"])
def test_drawn_positions_equal_the_papers_formula(layout, frequencies):
    fig = plot_positions(64, 50, layout=layout, frequencies=frequencies, offset=2)
    drawn = np.asarray(fig.axes[0].images[0].get_array())
    assert drawn.shape == (50, 64)
    np.testing.assert_allclose(drawn, paper_encoding(50, 64, layout, frequencies, offset=2), rtol=0, atol=1e-6)
    for line in fig.axes[-1].get_lines():  # the curves are columns of the same matrix
        dim = int(line.get_label().split()[-1])
        np.testing.assert_allclose(line.get_ydata(), drawn[:, dim])


@pytest.mark.parametrize(
    "overrides",
    [{}, {"sinusoidal_layout": "concatenated", "position_offset": 2}, {"position_embedding_type": "learned"}],
    ids=["paper", "fairseq-style", "learned"],
)
def test_drawn_positions_equal_what_the_encoder_adds_to_its_embeddings(tokenizer, overrides):
    model = tiny_model(tokenizer, seed=5, **overrides)
    input_ids = torch.randint(4, len(tokenizer), (1, 20), generator=torch.Generator().manual_seed(5))
    encoder = model.get_encoder()
    with torch.no_grad():
        first_hidden = encoder(input_ids, output_hidden_states=True).hidden_states[0][0]  # embeddings + positions
        added = first_hidden - encoder.embed_tokens(input_ids)[0] * encoder.embed_scale
    fig = plot_positions(length=20, model=model)
    np.testing.assert_allclose(fig.axes[0].images[0].get_array(), added.numpy(), rtol=0, atol=1e-5)
    assert overrides.get("position_embedding_type", "sinusoidal") in fig.axes[0].get_title()


def test_positions_command_writes_png_of_requested_size(tmp_path, capsys):
    out = tmp_path / "positions.png"
    code, stdout, err = run_cli(["plot", "positions", "--d-model", "128", "--length", "100", "--figsize", "6", "4",
                                 "--dpi", "50", "--out", str(out)], capsys)
    assert code == 0, err
    assert_png(out, 300, 200)


def test_positions_command_default_size_and_layout_options(tmp_path, capsys):
    out = tmp_path / "positions.png"
    code, stdout, err = run_cli(["plot", "positions", "--d-model", "32", "--length", "40", "--layout", "concatenated",
                                 "--dpi", "20", "--out", str(out)], capsys)
    assert code == 0, err
    assert_png(out, 180, 140)  # the default 9 x 7 inches


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--d-model", "31"], "sinusoidal positions need an even d_model"),
        (["--length", "0"], "--length must be at least 1"),
        (["--layout", "spiral"], "--layout must be one of interleaved, concatenated, got 'spiral'"),
        (["--dims", "200"], "dimension 200 does not exist"),
        (["--model", "{missing}"], "model folder not found"),
    ],
)
def test_positions_command_errors(tmp_path, capsys, argv, message):
    argv = [a.format(missing=tmp_path / "nope") for a in argv]
    code, _, err = run_cli(["plot", "positions", *argv, "--out", str(tmp_path / "p.png")], capsys)
    assert code != 0
    assert message in err
    assert "Traceback" not in err


def test_positions_of_a_saved_model_take_the_layout_from_its_config(tokenizer, tmp_path, capsys):
    model = tiny_model(tokenizer, sinusoidal_layout="concatenated")
    model.save_pretrained(tmp_path / "model")
    out = tmp_path / "p.png"
    code, _, err = run_cli(["plot", "positions", "--model", str(tmp_path / "model"), "--length", "30", "--dpi", "20",
                            "--out", str(out)], capsys)
    assert code == 0, err
    assert out.exists()
    code, _, err = run_cli(["plot", "positions", "--model", str(tmp_path / "model"), "--layout", "interleaved",
                            "--out", str(out), "--overwrite"], capsys)
    assert code == 1 and "come from the model's config" in err
    np.testing.assert_allclose(positional_encoding_matrix(30, model=model), paper_encoding(30, 32, "concatenated"),
                               atol=1e-6)


# ----------------------------------------------------------------------------------------------------------------
# Training curves: from a real (tiny) Seq2SeqTrainer run


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, tokenizer):
    pytest.importorskip("datasets")
    pytest.importorskip("accelerate")
    sacrebleu = pytest.importorskip("sacrebleu")
    from datasets import Dataset
    from transformers import DataCollatorForSeq2Seq, Seq2SeqTrainer, Seq2SeqTrainingArguments

    numbers = range(1, 65)
    data = Dataset.from_dict({"en": [num2words(i) for i in numbers], "de": [num2words(i, lang="de") for i in numbers]})
    data = data.map(lambda batch: tokenizer(batch["en"], text_target=batch["de"]), batched=True,
                    remove_columns=["en", "de"])

    def compute_metrics(prediction):
        predictions, labels = prediction
        labels = np.where(labels == -100, tokenizer.pad_token_id, labels)
        hypotheses = tokenizer.batch_decode(predictions, skip_special_tokens=True)
        references = tokenizer.batch_decode(labels, skip_special_tokens=True)
        return {"bleu": sacrebleu.corpus_bleu(hypotheses, [references]).score}

    model = tiny_model(tokenizer)
    path = str(tmp_path_factory.mktemp("run"))
    args = Seq2SeqTrainingArguments(
        output_dir=path, max_steps=6, per_device_train_batch_size=8, per_device_eval_batch_size=8,
        learning_rate=3e-3, lr_scheduler_type="inverse_sqrt", warmup_steps=3, logging_steps=1, eval_strategy="steps",
        eval_steps=3, save_steps=3, predict_with_generate=True, generation_max_length=10, generation_num_beams=1,
        report_to=[], disable_tqdm=True, use_cpu=True, seed=0,
    )
    trainer = Seq2SeqTrainer(model=model, args=args, train_dataset=data, eval_dataset=data.select(range(8)),
                             data_collator=DataCollatorForSeq2Seq(tokenizer, model=model), processing_class=tokenizer,
                             compute_metrics=compute_metrics)
    trainer.train()
    return path


def logged(state_path, key):
    with open(state_path) as f:
        history = json.load(f)["log_history"]
    return [(entry["step"], entry[key]) for entry in history if key in entry]


def test_drawn_training_curves_equal_the_trainer_log(run_dir):
    state = find_trainer_state(run_dir)
    assert state == os.path.join(run_dir, "checkpoint-6", "trainer_state.json")  # the latest checkpoint
    fig = plot_training(run_dir)
    loss_ax, lr_ax, bleu_ax = fig.axes
    curves = {line.get_label(): line.get_xydata().tolist() for ax in fig.axes for line in ax.get_lines()}
    for label, key in (("training loss", "loss"), ("evaluation loss", "eval_loss"), ("learning rate", "learning_rate"),
                       ("bleu", "eval_bleu")):
        expected = logged(state, key)
        assert len(expected) >= 2
        np.testing.assert_allclose(curves[label], expected)
    assert [step for step, _ in curves["learning rate"]] == list(range(1, 7))
    assert bleu_ax.get_ylabel() == "BLEU" and bleu_ax.get_xlabel() == "step"
    # the inverse-square-root schedule: warm-up, then decay
    learning_rates = [lr for _, lr in curves["learning rate"]]
    assert learning_rates.index(max(learning_rates)) in (1, 2, 3)


def test_training_curves_of_one_checkpoint_folder_or_state_file(run_dir):
    checkpoint = os.path.join(run_dir, "checkpoint-3")
    for run in (checkpoint, os.path.join(checkpoint, "trainer_state.json")):
        fig = plot_training(run)
        (train_loss, _) = fig.axes[0].get_lines()
        assert [step for step, _ in train_loss.get_xydata()] == [1, 2, 3]


def test_training_command_writes_png_of_requested_size(run_dir, tmp_path, capsys):
    out = tmp_path / "training.png"
    code, _, err = run_cli(["plot", "training", "--run", run_dir, "--figsize", "7", "6", "--dpi", "50",
                            "--out", str(out)], capsys)
    assert code == 0, err
    assert_png(out, 350, 300)


def test_training_command_errors(run_dir, tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    (tmp_path / "broken.json").write_text("{not json")
    for run, message in ((tmp_path / "nope", "run folder not found"),
                         (tmp_path / "empty", "no trainer_state.json in"),
                         (tmp_path / "broken.json", "is not a Trainer state file")):
        code, _, err = run_cli(["plot", "training", "--run", str(run), "--out", str(tmp_path / "t.png")], capsys)
        assert code == 1
        assert message in err and "Traceback" not in err
        assert len(err.strip().splitlines()) == 1
    code, _, err = run_cli(["plot", "training", "--run", run_dir, "--metric", "eval_rouge", "--out",
                            str(tmp_path / "t.png")], capsys)
    assert code == 1 and "metric(s) ['eval_rouge'] not in" in err and "eval_bleu" in err


# ----------------------------------------------------------------------------------------------------------------
# matplotlib is optional


def test_missing_matplotlib_names_the_extra_to_install(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # makes `import matplotlib...` raise ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    with pytest.raises(ImportError, match=r'pip install "vanilla-transformer\[plot\]"'):
        plot_positions(16, 10)
    code, _, err = run_cli(["plot", "positions", "--out", str(tmp_path / "p.png")], capsys)
    assert code == 1
    assert 'pip install "vanilla-transformer[plot]"' in err
    assert not (tmp_path / "p.png").exists()
    assert math.isfinite(positional_encoding_matrix(10, 16).sum())  # the numbers need no matplotlib
