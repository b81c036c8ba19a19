"""CTranslate2 export: the exported folder computes our model's log-probabilities and generates our `generate`'s
tokens, for a model trained here, for every position, LayerNorm and vocabulary variant, and for converted Marian and
FSMT models; int8 keeps the BLEU; bad input gives one clear error and leaves nothing behind.
"""

import json
import random
import shutil
import warnings

import pytest
import torch
from safetensors.torch import load_file, save_file
from test_convert import ENGLISH as CONVERT_ENGLISH
from test_convert import build_source, write_fsmt_tokenizer, write_marian_tokenizer

from helpers import made_once_per_run, tiny_model
from translation_fixtures import tiny_tokenizer

ctranslate2 = pytest.importorskip("ctranslate2")

from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.cli.main import main as cli_main  # noqa: E402
from vanilla_transformer.interop.convert import convert  # noqa: E402
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator  # noqa: E402
from vanilla_transformer.interop.export_ctranslate2 import ExportError, to_ctranslate2  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate, translate_hypotheses  # noqa: E402

LOG_PROB_ATOL = 1e-4  # float32 in two engines, log-probabilities of magnitude ~1-10


# ----------------------------------------------------------------------------------------------------------------
# A tiny model trained for a few seconds on the demo task (English -> German number words).


@pytest.fixture(scope="session")
def demo_data():
    """A BPE tokenizer, tokenized training pairs and 48 held-out (source, reference) pairs of the demo task."""
    pytest.importorskip("num2words")
    from vanilla_transformer.training.numbers import number_translation_splits
    from vanilla_transformer.training.tokenizer import train_tokenizer

    splits = number_translation_splits(train_size=3000, seed=0, source_lang="en", target_lang="de")
    train, test = splits["train"], splits["test"]
    tokenizer = train_tokenizer(train["source"] + train["target"], vocab_size=160, min_frequency=1,
                                model_max_length=64)
    pairs = list(zip(tokenizer(train["source"])["input_ids"], tokenizer(train["target"])["input_ids"]))
    return tokenizer, pairs, test["source"][:48], test["target"][:48]


def train_demo_model(demo_data, steps: int, d_model: int = 64, **overrides):
    """A small model trained with Adam on the demo task for `steps` batches of 64 pairs (seconds on a CPU)."""
    tokenizer, pairs, _, _ = demo_data
    torch.manual_seed(0)
    options = dict(vocab_size=len(tokenizer), d_model=d_model, encoder_layers=2, decoder_layers=2,
                   encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=2 * d_model,
                   decoder_ffn_dim=2 * d_model, dropout=0.0, max_position_embeddings=64)
    config = VanillaTransformerConfig(**{**options, **overrides})
    model = VanillaTransformerForConditionalGeneration(config)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    rng = random.Random(0)
    for _ in range(steps):
        batch = rng.sample(pairs, 64)
        inputs = tokenizer.pad({"input_ids": [source for source, _ in batch]}, return_tensors="pt")
        labels = tokenizer.pad({"input_ids": [target for _, target in batch]}, return_tensors="pt")["input_ids"]
        loss = model(**inputs, labels=labels.masked_fill(labels == tokenizer.pad_token_id, -100)).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.generation_config.max_length = 48
    return model.eval()


@pytest.fixture(scope="session")
def demo_checkpoint(demo_data, tmp_path_factory):
    """(folder of a model trained on the demo task, with its tokenizer; held-out sources; their references). Trained
    once per test run, whichever pytest-xdist worker needs it first."""
    tokenizer, _, sources, references = demo_data

    def make(folder):
        model = train_demo_model(demo_data, steps=150)
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)

    return made_once_per_run(tmp_path_factory, "export-demo-checkpoint", make), sources, references


def strip(ids, model_config) -> list[list[int]]:
    """generate()'s rows without the decoder start token, and cut at </s> (padding follows it)."""
    rows = []
    for row in ids.tolist():
        row = row[1:]
        eos = model_config.eos_token_id
        rows.append(row[: row.index(eos)] if eos in row else row)
    return rows


def assert_same_generations(model, engine, batch, **settings):
    """Greedy and beam-4 search of the exported folder give exactly the tokens of our `generate`."""
    for num_beams in (1, 4):
        with torch.no_grad():
            expected = strip(model.generate(**batch, num_beams=num_beams, **settings), model.config)
        got = engine.generate(**batch, num_beams=num_beams, **settings)
        assert got == expected, f"num_beams={num_beams}"
    return expected


def assert_same_log_probs(model, engine, tokenizer, sources: list[str], references: list[str]):
    """CTranslate2's log p(y_t | y_<t, x) equals our model's (teacher forcing) for the references, whose tokens are
    likely, and for the references reversed, whose tokens are not."""
    source_ids = tokenizer(sources)["input_ids"]
    target_ids = [row[:-1] for row in tokenizer(references)["input_ids"]]  # without </s>
    target_ids = [[i % model.config.target_vocab_size for i in row] for row in target_ids]
    pairs = [*zip(source_ids, target_ids), *zip(source_ids, [row[::-1] for row in target_ids])]
    results = engine.translator.score_batch([[engine.source_tokens[i] for i in source] for source, _ in pairs],
                                            [[engine.target_tokens[i] for i in target] for _, target in pairs])
    start, scores = model.config.decoder_start_token_id, []
    for (source, target), result in zip(pairs, results, strict=True):
        labels = torch.tensor([*target, model.config.eos_token_id])
        with torch.no_grad():
            logits = model(input_ids=torch.tensor([source]), decoder_input_ids=torch.tensor([[start, *target]])).logits
        expected = logits[0].log_softmax(-1)[torch.arange(len(labels)), labels]
        torch.testing.assert_close(torch.tensor(result.log_probs), expected, rtol=0, atol=LOG_PROB_ATOL)
        scores.append(expected)
    assert torch.cat(scores).std() > 1.0  # likely and unlikely tokens: the comparison is between varied numbers


def test_trained_checkpoint_exports_to_the_same_translations(demo_checkpoint, tmp_path):
    folder, sources, references = demo_checkpoint
    out = to_ctranslate2(folder, tmp_path / "ct2")
    assert {"model.bin", "config.json", "shared_vocabulary.json", "tokenizer.json",
            "generation_config.json"} <= {p.name for p in out.iterdir()}
    model, tokenizer = load_model_and_tokenizer(str(folder), "cpu")
    engine, ct2_tokenizer = load_model_and_tokenizer(str(out), "cpu")
    assert isinstance(engine, CTranslate2Translator)
    assert ct2_tokenizer.get_vocab() == tokenizer.get_vocab()

    batch = tokenizer(sources, return_tensors="pt", padding=True)
    assert (batch["attention_mask"] == 0).any()
    expected = assert_same_generations(model, engine, batch)
    assert len({tuple(row) for row in expected}) > len(expected) // 2  # a trained model: varied translations
    assert_same_log_probs(model, engine, tokenizer, sources[:6], references[:6])

    # translate() drives either engine alike, with the checkpoint's own defaults (beam 4, length penalty 0.6)
    texts = [sources[0], "", *sources[1:20]]
    assert translate(engine, tokenizer, texts, batch_size=8) == translate(model, tokenizer, texts, batch_size=8)
    assert translate(engine, tokenizer, texts, max_new_tokens=3) == translate(model, tokenizer, texts,
                                                                              max_new_tokens=3)

    # the n best of each row's beam, row after row, as generate returns them (each bounded by its source's length)
    with torch.no_grad():
        expected = strip(model.generate(**batch, num_beams=4, num_return_sequences=3), model.config)
    assert engine.generate(**batch, num_beams=4, num_return_sequences=3) == expected
    assert len({tuple(row) for row in expected[:3]}) == 3  # three different hypotheses of one sentence
    assert translate_hypotheses(engine, tokenizer, texts, 3) == translate_hypotheses(model, tokenizer, texts, 3)


def test_beam_search_gives_each_row_what_a_call_at_its_own_bound_gives(demo_checkpoint, tmp_path):
    """CTranslate2 takes one maximum length per call; the engine decodes a batch of many source-length bounds in one
    call at the longest and decodes again only the rows that reached their own last step. The oracle: CTranslate2
    itself, each row alone at its own bound. Tight bounds, so that some rows end by themselves and others at their
    bound; with a length penalty (CTranslate2 stops a row when it has a beam of finished hypotheses) and without (it
    stops when the best beam ends)."""
    folder, sources, _ = demo_checkpoint
    engine, tokenizer = load_model_and_tokenizer(str(to_ctranslate2(folder, tmp_path / "ct2")), "cpu")
    rows = tokenizer(sources[:40])["input_ids"]
    generator = random.Random(0)  # and token salads, which the model may not end by itself
    rows += [[*(generator.randrange(4, len(tokenizer)) for _ in range(generator.randrange(1, 12))),
              tokenizer.eos_token_id] for _ in range(8)]
    translate_batch, calls = engine.translator.translate_batch, []

    class Spy:
        def translate_batch(self, batch, **options):
            calls.append(options["max_decoding_length"])
            return translate_batch(batch, **options)

    engine.translator = Spy()
    ended = {"by itself": 0, "at its bound": 0}
    for settings in (dict(length_penalty=0.6), dict(length_penalty=1.0, num_return_sequences=3),
                     dict(length_penalty=0.0, num_return_sequences=2)):
        for a, b in ((0.5, 2), (1.0, 1), (1.5, 0), (2, 10)):  # the last: the default, no row reaches it
            calls.clear()
            got = engine.translate_ids([list(row) for row in rows], num_beams=4, max_length_a=a, max_length_b=b,
                                       **settings)
            count = settings.get("num_return_sequences", 1)
            limits = [int(a * len(row) + b) - 1 for row in rows]  # the bound less the </s> it counts
            options = {**engine.translate_options(num_beams=4, length_penalty=settings["length_penalty"]),
                       "num_hypotheses": count}
            expected = []
            for row, limit in zip(rows, limits):
                result = translate_batch([[engine.source_tokens[i] for i in row]],
                                         max_input_length=0, **{**options, "max_decoding_length": limit})[0]
                expected += [[engine.target_ids[token] for token in hypothesis] for hypothesis in result.hypotheses]
            assert got == expected, (settings, a, b)
            for ids, limit in zip(got[::count], limits):
                ended["at its bound" if len(ids) == limit else "by itself"] += 1
            if settings["length_penalty"]:  # one call, then at most one per shorter bound, for rows that reached it
                assert calls[0] == max(limits) and len(set(calls)) == len(calls) <= len(set(limits)), calls
                assert calls == [max(limits)] or (a, b) != (2, 10), calls
    assert min(ended.values()) > 50, ended  # both kinds of row, many of each


def test_only_settings_the_engine_does_not_apply_are_warned_about(demo_checkpoint, tmp_path):
    folder, _, _ = demo_checkpoint
    out = to_ctranslate2(folder, tmp_path / "ct2")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the checkpoint's own generation_config.json (every default written out)
        CTranslate2Translator(out)
    settings = json.loads((out / "generation_config.json").read_text())
    settings.update(do_sample=True, top_k=50, num_beam_groups=2)  # top_k=50 is the neutral value: not named
    (out / "generation_config.json").write_text(json.dumps(settings))
    with pytest.warns(UserWarning, match=r"sets do_sample, num_beam_groups, which the CTranslate2 engine does not"):
        CTranslate2Translator(out)


def test_int8_keeps_the_bleu_of_float32(demo_checkpoint, tmp_path):
    sacrebleu = pytest.importorskip("sacrebleu")
    folder, sources, references = demo_checkpoint
    model, tokenizer = load_model_and_tokenizer(str(folder), "cpu")
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    scores = {}
    for quantization in ("float32", "int8"):
        out = to_ctranslate2(model, tmp_path / quantization, quantization, tokenizer=tokenizer)
        engine = CTranslate2Translator(out)
        hypotheses = translate(engine, tokenizer, sources, num_beams=4)
        scores[quantization] = sacrebleu.corpus_bleu(hypotheses, [references], tokenize="char").score
    assert scores["float32"] > 20, scores  # the model translates, so the comparison means something
    assert abs(scores["int8"] - scores["float32"]) <= 0.5, scores
    assert (tmp_path / "int8" / "model.bin").stat().st_size < 0.5 * (tmp_path / "float32" / "model.bin").stat().st_size
    # the export quantized copies, not the model's own weights
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


# ----------------------------------------------------------------------------------------------------------------
# Every variant of the architecture, each trained for a moment on the demo task (d_model 32) so that it translates
# with varied, input-dependent outputs.

VARIANTS = {
    "pre-layernorm-learned-positions-gelu": dict(normalize_before=True, position_embedding_type="learned",
                                                 position_offset=2, activation_function="gelu"),
    "concatenated-tensor2tensor-skip-padding-swish": dict(sinusoidal_layout="concatenated", position_offset=1,
                                                          sinusoidal_frequencies="tensor2tensor",
                                                          skip_padding_positions=True, activation_function="swish"),
    "separate-vocabularies-untied-bias-gelu-new": dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=160,
                                                       tie_word_embeddings=False, add_final_logits_bias=True,
                                                       activation_function="gelu_new", scale_embedding=False,
                                                       layer_norm_eps=1e-6, decoder_attention_heads=8),
}


@pytest.mark.slow  # a training each
@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_variant_exports_to_the_same_log_probs_and_generations(variant, demo_data, tmp_path):
    tokenizer, _, sources, references = demo_data
    model = train_demo_model(demo_data, steps=60, d_model=32, **VARIANTS[variant])
    if model.final_logits_bias is not None:  # trained models have none: give it values that matter
        model.final_logits_bias.normal_(0.0, 0.5, generator=torch.Generator().manual_seed(0))
    engine = CTranslate2Translator(to_ctranslate2(model, tmp_path / "ct2", tokenizer=tokenizer))

    assert_same_log_probs(model, engine, tokenizer, sources[:4], references[:4])
    batch = tokenizer(sources, return_tensors="pt", padding=True)
    expected = assert_same_generations(model, engine, batch)
    assert len({tuple(row) for row in expected}) > len(expected) // 4  # varied translations


# ----------------------------------------------------------------------------------------------------------------
# Converted OPUS-MT (Marian) and FSMT models export the same way.


@pytest.mark.parametrize("kind", ["marian", "fsmt"])
def test_converted_checkpoints_export_to_the_same_translations(kind, tmp_path):
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    if kind == "marian":
        vocab_size = write_marian_tokenizer(source_dir)
        build_source("marian", 0, source_dir, vocab_size=vocab_size, pad_token_id=vocab_size - 1,
                     decoder_start_token_id=vocab_size - 1)
    else:
        src_vocab_size, tgt_vocab_size = write_fsmt_tokenizer(source_dir)
        build_source("fsmt", 0, source_dir, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    convert(kind, source_dir, tmp_path / "converted")
    out = to_ctranslate2(tmp_path / "converted", tmp_path / "ct2")
    model, tokenizer = load_model_and_tokenizer(str(tmp_path / "converted"), "cpu")
    engine, _ = load_model_and_tokenizer(str(out), "cpu")
    if kind == "fsmt":
        assert (out / "source_vocabulary.json").is_file() and (out / "target_vocabulary.json").is_file()

    batch = tokenizer(CONVERT_ENGLISH, return_tensors="pt", padding=True)
    # the generation config's bad_words_ids (Marian: never <pad>) reach CTranslate2 as suppress_sequences
    settings = dict(max_new_tokens=10, bad_words_ids=[[model.config.pad_token_id]])
    expected = assert_same_generations(model, engine, batch, **settings)
    assert any(expected)
    texts = [*CONVERT_ENGLISH, ""]
    assert translate(engine, tokenizer, texts, **settings) == translate(model, tokenizer, texts, **settings)


# ----------------------------------------------------------------------------------------------------------------
# The command line, and clear errors.


def test_cli_exports_and_translates_a_file_like_the_pytorch_model(demo_checkpoint, tmp_path, capsys):
    folder, sources, _ = demo_checkpoint
    cli_main(["export", "ctranslate2", str(folder), str(tmp_path / "ct2"), "--quantization", "float32"])
    assert "Exported" in capsys.readouterr().out
    lines = [sources[0], "", *sources[1:6]]
    (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    outputs = {}
    for name, model in (("pytorch", str(folder)), ("ct2", str(tmp_path / "ct2"))):
        cli_main(["translate", "--model", model, "--input", str(tmp_path / "in.txt"), "--output",
                  str(tmp_path / f"{name}.txt"), "--batch-size", "3", "--device", "cpu"])
        outputs[name] = (tmp_path / f"{name}.txt").read_text(encoding="utf-8")
        assert "7/7" in capsys.readouterr().err  # the progress bar
    assert outputs["ct2"] == outputs["pytorch"]
    assert outputs["ct2"].split("\n")[1] == "" and outputs["ct2"].count("\n") == len(lines)
    cli_main(["translate", "--model", str(tmp_path / "ct2"), "--engine", "ctranslate2", "--compute-type", "int8",
              "--num-beams", "1", sources[0]])
    assert capsys.readouterr().out.strip()


def run_cli_error(argv, capsys) -> str:
    """The one error line of a command that fails (argparse's, or the message it exits with)."""
    with pytest.raises(SystemExit) as exit:
        cli_main(argv)
    assert exit.value.code not in (0, None)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return exit.value.code if isinstance(exit.value.code, str) else err.strip().splitlines()[-1]


def test_an_option_ctranslate2_cannot_express_stops_the_export_and_leaves_nothing(tmp_path):
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=0, vocab_size=len(tokenizer))
    model.config.activation_function = "relu6"  # an activation CTranslate2 does not have (set past the config check)
    with pytest.raises(ExportError, match="activation_function='relu6' cannot be expressed in CTranslate2"):
        to_ctranslate2(model, tmp_path / "out", tokenizer=tokenizer)
    assert list(tmp_path.iterdir()) == []
    model = tiny_model(seed=0, vocab_size=len(tokenizer), attention_key_dim=4)  # queries and keys narrower than values
    with pytest.raises(ExportError, match="attention_key_dim=4 cannot be expressed in CTranslate2"):
        to_ctranslate2(model, tmp_path / "out", tokenizer=tokenizer)
    assert list(tmp_path.iterdir()) == []


def test_a_failure_while_writing_leaves_no_half_written_folder(tmp_path, monkeypatch):
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=0, vocab_size=len(tokenizer))
    earlier = to_ctranslate2(model, tmp_path / "out", tokenizer=tokenizer)
    before = {p.name: p.read_bytes() for p in earlier.iterdir()}

    def fail(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(type(tokenizer), "save_pretrained", fail)
    with pytest.raises(OSError, match="disk full"):
        to_ctranslate2(model, tmp_path / "out", "int8", tokenizer=tokenizer, overwrite=True)
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staging folder left
    assert {p.name: p.read_bytes() for p in earlier.iterdir()} == before  # the old export untouched


def test_export_errors_are_clear(demo_checkpoint, tmp_path, capsys):
    folder, _, _ = demo_checkpoint
    no_tokenizer = tmp_path / "no-tokenizer"
    no_tokenizer.mkdir()
    for name in ("config.json", "model.safetensors", "generation_config.json"):
        (no_tokenizer / name).write_bytes((folder / name).read_bytes())
    assert "has no tokenizer" in run_cli_error(["export", "ctranslate2", str(no_tokenizer), str(tmp_path / "a")],
                                               capsys)
    (tmp_path / "not-a-model").mkdir()
    assert "has no config.json" in run_cli_error(["export", "ctranslate2", str(tmp_path / "not-a-model"),
                                                  str(tmp_path / "b")], capsys)
    assert "already exists and is not empty; give --overwrite" in run_cli_error(
        ["export", "ctranslate2", str(folder), str(no_tokenizer)], capsys)
    assert "invalid choice: 'int4'" in run_cli_error(
        ["export", "ctranslate2", str(folder), str(tmp_path / "c"), "--quantization", "int4"], capsys)
    renamed = tmp_path / "renamed"  # a checkpoint whose weights another version of the model wrote
    shutil.copytree(folder, renamed)
    state = load_file(renamed / "model.safetensors")
    state["model.encoder.layers.0.fc_in.weight"] = state.pop("model.encoder.layers.0.fc1.weight")
    save_file(state, renamed / "model.safetensors", metadata={"format": "pt"})
    assert "does not have, e.g. model.encoder.layers.0.fc_in.weight" in run_cli_error(
        ["export", "ctranslate2", str(renamed), str(tmp_path / "e")], capsys)
    marian = tmp_path / "marian"
    build_source("marian", 0, marian)
    assert "convert marian" in run_cli_error(["export", "ctranslate2", str(marian), str(tmp_path / "d")], capsys)
    assert not any((tmp_path / name).exists() for name in "abcde")


def test_translate_errors_are_clear(demo_checkpoint, tmp_path, capsys):
    folder, _, _ = demo_checkpoint
    out = to_ctranslate2(folder, tmp_path / "ct2")
    neither = tmp_path / "neither"
    neither.mkdir()
    (neither / "notes.txt").write_text("not a model")
    assert "has no config.json (save_pretrained) and no model.bin (CTranslate2)" in run_cli_error(
        ["translate", "--model", str(neither), "one"], capsys)
    assert "is not a CTranslate2 folder" in run_cli_error(
        ["translate", "--model", str(folder), "--engine", "ctranslate2", "one"], capsys)
    assert "is a CTranslate2 folder" in run_cli_error(
        ["translate", "--model", str(out), "--engine", "pytorch", "one"], capsys)
    assert "--compute-type applies to CTranslate2 folders" in run_cli_error(
        ["translate", "--model", str(folder), "--compute-type", "int8", "one"], capsys)
    assert "compute_type 'float16' is not supported on cpu" in run_cli_error(
        ["translate", "--model", str(out), "--device", "cpu", "--compute-type", "float16", "one"], capsys)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        (out / name).unlink()
    assert "has no tokenizer" in run_cli_error(["translate", "--model", str(out), "one"], capsys)

    engine = CTranslate2Translator(tmp_path / "ct2")
    with pytest.raises(ValueError, match="does not take top_p"):
        engine.generate(torch.tensor([[5, 6, 2]]), do_sample=True, top_p=0.9)
    with pytest.raises(ValueError, match="No position encodings are defined for positions >= 1024"):
        engine.generate(torch.full((1, 1100), 5))  # sinusoids are exported for 1024 positions


@pytest.mark.parametrize("positions, rows", [(dict(), 1024), (dict(max_position_embeddings=1100), 1100),
                                             (dict(position_embedding_type="learned", position_offset=2), 64)],
                         ids=["sinusoids", "sinusoids-1100", "learned-offset-2"])
def test_the_export_records_the_longest_input_ctranslate2_reads(positions, rows, tmp_path):
    """config.json's `max_positions` (what the server limits sentences to) is where CTranslate2 itself starts refusing
    inputs: sinusoids for max(max_position_embeddings, 1024) positions, learned ones for max_position_embeddings."""
    from translation_fixtures import tiny_tokenizer, tiny_translator

    out = to_ctranslate2(tiny_translator(**positions), tmp_path / "ct2", tokenizer=tiny_tokenizer())
    engine = CTranslate2Translator(out)
    assert engine.max_positions == rows == json.loads((out / "config.json").read_text())["max_positions"]
    assert len(engine.generate(torch.full((1, rows), 5), max_new_tokens=2)) == 1  # the longest input is read
    with pytest.raises(ValueError, match=f"No position encodings are defined for positions >= {rows}"):
        engine.generate(torch.full((1, rows + 1), 5), max_new_tokens=2)


def test_every_activation_of_the_configuration_is_a_ctranslate2_activation():
    from ctranslate2.specs import common_spec

    from vanilla_transformer.configuration_vanilla_transformer import ACTIVATIONS
    from vanilla_transformer.interop.export_ctranslate2 import ctranslate2_activation

    members = {name: getattr(common_spec.Activation, ctranslate2_activation(name)) for name in ACTIVATIONS}
    assert members["relu"] == common_spec.Activation.RELU and members["gelu_new"] == common_spec.Activation.GELUTanh
    assert members["swish"] == members["silu"] == common_spec.Activation.SWISH  # one function, two names
