"""Converted Marian and FSMT checkpoints against transformers' own MarianMTModel and FSMTForConditionalGeneration.

Every source is a small random model built and saved here (no download), with weights drawn at a scale that makes
every sub-layer matter, a non-zero Marian `final_logits_bias`, and inputs with right and left padding.
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    FSMTConfig,
    FSMTForConditionalGeneration,
    GenerationConfig,
    MarianConfig,
    MarianMTModel,
)

from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.interop.convert import ConversionError, convert, convert_fsmt, convert_marian

LOGITS_ATOL = 1e-5
SIZES = dict(d_model=32, encoder_layers=2, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
             encoder_ffn_dim=64, decoder_ffn_dim=48, max_position_embeddings=64, dropout=0.0)

# name -> (kind, source config). Marian: OPUS-MT's layout (swish, <pad> last and decoder start, </s> = 0), shared or
# separate vocabularies; FSMT: fairseq's layout (pad 1, </s> 2), separate vocabularies, untied or tied.
VARIANTS = {
    "marian": ("marian", dict(vocab_size=61, activation_function="swish", scale_embedding=True, pad_token_id=60,
                              decoder_start_token_id=60, eos_token_id=0, bos_token_id=None, forced_eos_token_id=0)),
    "marian-separate-vocabs": ("marian", dict(vocab_size=61, decoder_vocab_size=47,
                                              share_encoder_decoder_embeddings=False, activation_function="gelu",
                                              scale_embedding=True, pad_token_id=46, decoder_start_token_id=46,
                                              eos_token_id=0, forced_eos_token_id=0)),
    "fsmt": ("fsmt", dict(langs=["en", "de"], src_vocab_size=50, tgt_vocab_size=57, activation_function="relu")),
    "fsmt-tied": ("fsmt", dict(langs=["en", "de"], src_vocab_size=57, tgt_vocab_size=57, tie_word_embeddings=True,
                               activation_function="relu")),
}


def randomize_(model: torch.nn.Module, seed: int) -> None:
    """Weights at a scale where every sub-layer changes the output (random init leaves LayerNorms at identity)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in sorted(model.state_dict().items()):
            if "embed_positions" in name:
                continue
            if "layer_norm" in name and name.endswith("weight"):
                tensor.copy_(1.0 + 0.2 * torch.randn(tensor.shape, generator=generator))
            elif tensor.dim() == 2 and "embed_tokens" not in name and "shared" not in name and "lm_head" not in name \
                    and "output_projection" not in name:
                tensor.copy_(torch.randn(tensor.shape, generator=generator) * tensor.shape[1] ** -0.5)
            else:  # embeddings, biases, final_logits_bias
                tensor.copy_(0.5 * torch.randn(tensor.shape, generator=generator))


def build_source(variant: str, seed: int, folder, **overrides):
    """A random source model of `variant`, saved to `folder` with a generation config like the published ones."""
    kind, options = VARIANTS[variant]
    options = {**options, **overrides}
    torch.manual_seed(seed)
    if kind == "marian":
        model = MarianMTModel(MarianConfig(**SIZES, **options))
    else:
        model = FSMTForConditionalGeneration(FSMTConfig(**SIZES, **options))
    randomize_(model, seed)
    model.tie_weights()
    model.eval()
    if kind == "marian":  # as in Helsinki-NLP/opus-mt-*: never generate <pad>
        model.generation_config.bad_words_ids = [[model.config.pad_token_id]]
        model.generation_config.num_beams = 4
        model.generation_config.max_length = 64
    model.save_pretrained(folder)
    return kind, model


def padded_batch(seed: int, source, side: str = "source", length: int = 11, left_padded_row: bool = True,
                 eos: bool = False):
    """Random ids of `source`'s vocabulary in 4 rows of different lengths: row 0 full, rows 1-2 right-padded and row 3
    left-padded (or right-padded); with `eos`, every row ends with </s>."""
    config = source.config
    if isinstance(config, MarianConfig):
        first_id, vocab_size = 1, config.vocab_size if side == "source" else config.decoder_vocab_size  # after </s>
    else:
        first_id, vocab_size = 4, config.src_vocab_size if side == "source" else config.tgt_vocab_size  # after <unk>
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(first_id, vocab_size, (4, length), generator=generator)
    ids[ids == config.pad_token_id] = first_id
    lengths = torch.randint(3, length, (4,), generator=generator)
    lengths[0] = length
    mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    if eos:
        ids[torch.arange(4), lengths - 1] = config.eos_token_id
    if left_padded_row:
        mask[3], ids[3] = mask[3].roll(length - int(lengths[3])), ids[3].roll(length - int(lengths[3]))
    return ids.masked_fill(mask == 0, config.pad_token_id), mask


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_converted_logits_match_the_original(variant, seed, tmp_path):
    kind, source = build_source(variant, seed, tmp_path / "source")
    ours = convert(kind, tmp_path / "source", tmp_path / "out", tokenizer=False)
    assert isinstance(ours, VanillaTransformerForConditionalGeneration)

    input_ids, attention_mask = padded_batch(seed, source)
    labels, labels_mask = padded_batch(seed + 100, source, side="target", length=8, left_padded_row=False)
    start = torch.full((4, 1), source.config.decoder_start_token_id)  # the decoder reads <start> y_1 ... y_{n-1}
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask,
                  decoder_input_ids=torch.cat([start, labels[:, :-1]], dim=1),
                  decoder_attention_mask=torch.cat([torch.ones_like(start), labels_mask[:, :-1]], dim=1))
    assert (inputs["attention_mask"] == 0).any() and (inputs["decoder_attention_mask"] == 0).any()

    with torch.no_grad():
        # FSMT applies its causal mask only with use_cache=False when given the whole target
        expected = source(**inputs, use_cache=False)
        got = ours(**inputs, use_cache=False)
        reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()(**inputs)
    assert got.logits.shape == expected.logits.shape
    assert expected.logits.std() > 0.5  # the comparison is not between two near-constant outputs
    torch.testing.assert_close(got.logits, expected.logits, rtol=0, atol=LOGITS_ATOL)
    torch.testing.assert_close(reloaded.logits, expected.logits, rtol=0, atol=LOGITS_ATOL)
    torch.testing.assert_close(got.encoder_last_hidden_state, expected.encoder_last_hidden_state, rtol=0,
                               atol=LOGITS_ATOL)


@pytest.mark.parametrize("variant", ["marian", "fsmt"])
def test_converted_generation_matches_the_original(variant, tmp_path):
    kind, source = build_source(variant, 0, tmp_path / "source")
    convert(kind, tmp_path / "source", tmp_path / "out", tokenizer=False)
    ours = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()

    ignore = {"transformers_version", "_from_model_config"}
    assert {k: v for k, v in ours.generation_config.to_dict().items() if k not in ignore} == \
        {k: v for k, v in source.generation_config.to_dict().items() if k not in ignore}

    input_ids, attention_mask = padded_batch(1, source, length=9, eos=True)
    # fairseq never generates <pad> (its SequenceGenerator bans it), but HF's FSMT would, and would give it a position
    # where fairseq gives none: ban it on both sides as fairseq does.
    settings = dict(max_new_tokens=12, bad_words_ids=[[source.config.pad_token_id]])
    for search in (dict(num_beams=1, do_sample=False), dict(num_beams=4, do_sample=False, length_penalty=0.6)):
        expected = source.generate(input_ids=input_ids, attention_mask=attention_mask, **settings, **search)
        got = ours.generate(input_ids=input_ids, attention_mask=attention_mask, **settings, **search)
        assert expected.shape[1] > 4  # something was generated
        assert torch.equal(got, expected), search


@pytest.mark.slow  # a fresh interpreter
def test_converted_folder_survives_save_and_remote_code_load(tmp_path):
    """Convert, load with the package, save again, then load in a fresh interpreter where the package is absent."""
    folders, expected = {}, {}
    for variant in ("marian", "fsmt"):
        kind, source = build_source(variant, 3, tmp_path / f"{variant}-source")
        convert(kind, tmp_path / f"{variant}-source", tmp_path / f"{variant}-out", tokenizer=False)
        reloaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / f"{variant}-out")
        reloaded.save_pretrained(tmp_path / f"{variant}-saved")
        input_ids, attention_mask = padded_batch(3, source)
        labels, labels_mask = padded_batch(4, source, side="target", length=6, left_padded_row=False)
        labels[:, 0] = source.config.decoder_start_token_id
        inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=labels,
                      decoder_attention_mask=labels_mask)
        with torch.no_grad():
            expected[variant] = source(**inputs, use_cache=False).logits
        torch.save(inputs, tmp_path / f"{variant}-inputs.pt")
        folders[variant] = str(tmp_path / f"{variant}-saved")

    script = textwrap.dedent(f"""
        import sys, torch
        sys.modules["vanilla_transformer"] = None  # `import vanilla_transformer` raises ImportError
        from transformers import AutoModelForSeq2SeqLM
        for variant, folder in {folders!r}.items():
            model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
            assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
            inputs = torch.load(folder.replace("-saved", "-inputs.pt"))
            with torch.no_grad():
                torch.save(model(**inputs).logits, folder.replace("-saved", "-logits.pt"))
    """)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["HF_HOME"] = str(tmp_path / "hf_home")
    result = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    for variant in folders:
        got = torch.load(tmp_path / f"{variant}-logits.pt")
        torch.testing.assert_close(got, expected[variant], rtol=0, atol=LOGITS_ATOL)


# ----------------------------------------------------------------------------------------------------------------
# Tokenizers: a sentencepiece Marian tokenizer and a BPE FSMT tokenizer, both built here from a few sentences.

ENGLISH = ["A man is riding a bike down the street.", "Two dogs play in the snow.", "A girl reads a book.",
           "People are walking in the park.", "A woman sings on a stage.", "The children eat ice cream."]
GERMAN = ["Ein Mann fährt mit dem Fahrrad die Straße hinunter.", "Zwei Hunde spielen im Schnee.",
          "Ein Mädchen liest ein Buch.", "Leute gehen im Park spazieren.", "Eine Frau singt auf einer Bühne.",
          "Die Kinder essen Eis."]


def write_marian_tokenizer(folder) -> int:
    """OPUS-MT's files: one sentencepiece model per language and a joint vocab.json (</s> 0, <unk> 1, <pad> last)."""
    sentencepiece = pytest.importorskip("sentencepiece")
    from transformers import MarianTokenizer

    pieces = []
    for name, sentences in (("source.spm", ENGLISH), ("target.spm", GERMAN)):
        sentencepiece.SentencePieceTrainer.train(
            sentence_iterator=iter(sentences), model_prefix=str(folder / "spm"), vocab_size=60, model_type="unigram",
            character_coverage=1.0, hard_vocab_limit=False, minloglevel=2,
        )
        os.replace(folder / "spm.model", folder / name)
        os.remove(folder / "spm.vocab")
        processor = sentencepiece.SentencePieceProcessor(model_file=str(folder / name))
        pieces += [processor.id_to_piece(i) for i in range(processor.get_piece_size()) if not processor.is_control(i)
                   and not processor.is_unknown(i)]
    vocab = {"</s>": 0, "<unk>": 1}
    for piece in pieces:
        vocab.setdefault(piece, len(vocab))
    vocab["<pad>"] = len(vocab)
    (folder / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False))
    tokenizer = MarianTokenizer(str(folder / "source.spm"), str(folder / "target.spm"), str(folder / "vocab.json"),
                                source_lang="en", target_lang="de")
    tokenizer.save_pretrained(folder)
    return len(vocab)


def write_fsmt_tokenizer(folder) -> tuple[int, int]:
    """fairseq's files: <s> <pad> </s> <unk>, then BPE pieces (word-final ones end in </w>), and the merges."""
    pytest.importorskip("sacremoses")
    from transformers import FSMTTokenizer

    merges = ["e n</w>", "i n", "e r", "t h", "th e</w>", "a n", "e i", "c h"]
    vocab_files = {}
    for side, sentences in (("src", ENGLISH), ("tgt", GERMAN)):
        symbols = sorted({c for s in sentences for c in s if not c.isspace()})
        vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
        for token in symbols + [c + "</w>" for c in symbols] + [m.replace(" ", "") for m in merges]:
            vocab.setdefault(token, len(vocab))
        (folder / f"vocab-{side}.json").write_text(json.dumps(vocab, ensure_ascii=False))
        vocab_files[side] = len(vocab)
    (folder / "merges.txt").write_text("\n".join(f"{m} 100" for m in merges) + "\n")
    tokenizer = FSMTTokenizer(langs=["en", "de"], src_vocab_file=str(folder / "vocab-src.json"),
                              tgt_vocab_file=str(folder / "vocab-tgt.json"), merges_file=str(folder / "merges.txt"))
    tokenizer.save_pretrained(folder)
    return vocab_files["src"], vocab_files["tgt"]


@pytest.mark.parametrize("kind", ["marian", "fsmt"])
def test_tokenizer_is_carried_over_and_translations_match(kind, tmp_path):
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    if kind == "marian":
        vocab_size = write_marian_tokenizer(source_dir)
        _, source = build_source("marian", 0, source_dir, vocab_size=vocab_size, pad_token_id=vocab_size - 1,
                                 decoder_start_token_id=vocab_size - 1)
    else:
        src_vocab_size, tgt_vocab_size = write_fsmt_tokenizer(source_dir)
        _, source = build_source("fsmt", 0, source_dir, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)

    convert(kind, source_dir, tmp_path / "out")
    tokenizer = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert type(tokenizer) is type(source_tokenizer)
    ours = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "out").eval()

    batch = tokenizer(ENGLISH[:4], return_tensors="pt", padding=True)
    expected_batch = source_tokenizer(ENGLISH[:4], return_tensors="pt", padding=True)
    assert torch.equal(batch["input_ids"], expected_batch["input_ids"])
    assert (batch["attention_mask"] == 0).any()
    assert tokenizer.unk_token_id not in batch["input_ids"][batch["attention_mask"] == 1].tolist()
    settings = dict(max_new_tokens=10, num_beams=3, bad_words_ids=[[source.config.pad_token_id]])
    got = tokenizer.batch_decode(ours.generate(**batch, **settings), skip_special_tokens=True)
    expected = source_tokenizer.batch_decode(source.generate(**expected_batch, **settings), skip_special_tokens=True)
    assert got == expected
    assert any(text.strip() for text in got)

    card = (tmp_path / "out" / "README.md").read_text()
    assert f"converted-from-{kind}" in card and "- en\n- de" in card


@pytest.mark.parametrize("kind", ["marian", "fsmt"])
def test_translation_pipeline_runs_a_converted_checkpoint(kind, tmp_path):
    from transformers import pipeline

    source_dir = tmp_path / "source"
    source_dir.mkdir()
    if kind == "marian":
        vocab_size = write_marian_tokenizer(source_dir)
        _, source = build_source("marian", 1, source_dir, vocab_size=vocab_size, pad_token_id=vocab_size - 1,
                                 decoder_start_token_id=vocab_size - 1)
    else:
        src_vocab_size, tgt_vocab_size = write_fsmt_tokenizer(source_dir)
        _, source = build_source("fsmt", 1, source_dir, src_vocab_size=src_vocab_size, tgt_vocab_size=tgt_vocab_size)
    convert(kind, source_dir, tmp_path / "out")

    settings = dict(max_new_tokens=8, num_beams=2, bad_words_ids=[[source.config.pad_token_id]])
    translator = pipeline("translation", model=str(tmp_path / "out"))
    got = [item["translation_text"] for item in translator(ENGLISH[:3], **settings)]
    source_tokenizer = AutoTokenizer.from_pretrained(source_dir)
    batch = source_tokenizer(ENGLISH[:3], return_tensors="pt", padding=True)
    assert got == source_tokenizer.batch_decode(source.generate(**batch, **settings), skip_special_tokens=True)


def test_model_card_names_the_origin_and_keeps_its_license(tmp_path):
    from huggingface_hub import ModelCard

    source_dir = tmp_path / "hub" / "models--Helsinki-NLP--opus-mt-en-de" / "snapshots" / "0123abcd"
    build_source("marian", 0, source_dir)
    (source_dir / "README.md").write_text("---\nlicense: cc-by-4.0\n---\n# opus-mt-en-de\n")
    convert_marian(source_dir, tmp_path / "out", tokenizer=False)
    card = ModelCard.load(tmp_path / "out" / "README.md")
    assert card.data.base_model == "Helsinki-NLP/opus-mt-en-de"  # read off the Hub cache path
    assert card.data.license == "cc-by-4.0"
    assert "converted-from-marian" in card.data.tags and "vanilla-transformer" in card.data.tags
    assert "converted from the Marian (OPUS-MT) checkpoint [`Helsinki-NLP/opus-mt-en-de`]" in card.text

    build_source("fsmt", 0, tmp_path / "fsmt")
    convert_fsmt(tmp_path / "fsmt", tmp_path / "fsmt-out", tokenizer=False, base_model="facebook/wmt19-en-de")
    card = ModelCard.load(tmp_path / "fsmt-out" / "README.md")
    assert card.data.base_model == "facebook/wmt19-en-de"
    assert card.data.language == ["en", "de"]  # FSMT's config names its languages
    assert card.data.license == "unknown"  # no source card to take it from


# ----------------------------------------------------------------------------------------------------------------
# Bad sources: each fails before writing anything, with a message that names the problem.


def _drop_weight(folder, name):
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    state.pop(name)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def _scramble_position_table(folder):
    from safetensors.torch import load_file, save_file

    state = load_file(folder / "model.safetensors")
    key = "model.encoder.embed_positions.weight"
    state[key] = torch.randn(state[key].shape)
    save_file(state, folder / "model.safetensors", metadata={"format": "pt"})


def _set_config(folder, **values):
    config = json.loads((folder / "config.json").read_text())
    config.update(values)
    (folder / "config.json").write_text(json.dumps(config))


BAD_SOURCES = {
    "not-a-folder": ("marian", lambda d: None, "is not a folder"),
    "no-config": ("marian", lambda d: (d.mkdir(), None)[1], "has no config.json"),
    "another-model-type": ("marian", lambda d: (build_source("marian", 0, d), _set_config(d, model_type="bart")),
                           "holds a 'bart' checkpoint"),
    "fsmt-as-marian": ("marian", lambda d: build_source("fsmt", 0, d), "Use `convert fsmt`"),
    "decoder-only-marian": ("marian", lambda d: (build_source("marian", 0, d),
                                                 _set_config(d, architectures=["MarianForCausalLM"])),
                            "only MarianMTModel"),
    "no-weights": ("fsmt", lambda d: (build_source("fsmt", 0, d), os.remove(d / "model.safetensors")),
                   "holds no weights: model.safetensors is missing"),
    "missing-weight": ("marian", lambda d: (build_source("marian", 0, d),
                                            _drop_weight(d, "model.decoder.layers.1.encoder_attn.v_proj.weight")),
                       "lacks 1 weight(s)"),
    "config-disagrees-with-weights": ("fsmt", lambda d: (build_source("fsmt", 0, d), _set_config(d, d_model=48)),
                                      "the weights and config.json disagree"),
    "foreign-position-table": ("fsmt", lambda d: (build_source("fsmt", 0, d), _scramble_position_table(d)),
                               "does not use the positional encoding"),
    "no-tokenizer-files": ("marian", lambda d: build_source("marian", 0, d), "has no Marian (OPUS-MT) tokenizer"),
    "config-our-model-refuses": ("marian", lambda d: (build_source("marian", 0, d), _set_config(d, dropout=1.0)),
                                 "cannot be expressed: Invalid VanillaTransformerConfig: dropout=1.0 must be in"),
}


@pytest.mark.parametrize("case", sorted(BAD_SOURCES))
def test_bad_source_raises_a_clear_error(case, tmp_path):
    kind, make, message = BAD_SOURCES[case]
    make(tmp_path / "source")
    with pytest.raises(ConversionError, match=message.replace("(", r"\(").replace(")", r"\)")):
        convert(kind, tmp_path / "source", tmp_path / "out", tokenizer=case == "no-tokenizer-files")
    assert not (tmp_path / "out").exists()


def test_tokenizer_of_another_model_is_refused(tmp_path):
    source_dir = tmp_path / "source"
    source_dir.mkdir()
    vocab_size = write_marian_tokenizer(source_dir)
    # the model's <pad> is its last id, ten ids after the tokenizer's <pad>
    build_source("marian", 0, source_dir, vocab_size=vocab_size + 10)
    with pytest.raises(ConversionError, match="do not belong together"):
        convert("marian", source_dir, tmp_path / "out")


def test_existing_output_folder_is_not_overwritten_by_default(tmp_path):
    build_source("marian", 0, tmp_path / "source")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "notes.txt").write_text("mine")
    with pytest.raises(ConversionError, match="not empty"):
        convert("marian", tmp_path / "source", tmp_path / "out", tokenizer=False)
    # --overwrite replaces only what this project wrote, never a folder of something else or the source itself
    with pytest.raises(ConversionError, match="it holds notes.txt"):
        convert("marian", tmp_path / "source", tmp_path / "out", tokenizer=False, overwrite=True)
    assert (tmp_path / "out" / "notes.txt").read_text() == "mine"
    for inside_or_is_source in (tmp_path / "source", tmp_path / "source" / "out", tmp_path):
        with pytest.raises(ConversionError):
            convert("marian", tmp_path / "source", inside_or_is_source, tokenizer=False, overwrite=True)
    assert (tmp_path / "source" / "config.json").is_file() and not (tmp_path / "source" / "out").exists()
    convert("marian", tmp_path / "source", tmp_path / "converted", tokenizer=False)
    first = (tmp_path / "converted" / "model.safetensors").read_bytes()
    (tmp_path / "converted" / "stale.txt").write_text("the user's, added after the conversion")
    with pytest.raises(ConversionError, match="did not write .*: stale.txt"):
        convert("marian", tmp_path / "source", tmp_path / "converted", tokenizer=False, overwrite=True)
    (tmp_path / "converted" / "stale.txt").unlink()
    (tmp_path / "converted" / "README.md").write_text("an earlier conversion's card")  # ours, but changed since
    with pytest.raises(ConversionError, match="did not write .*: README.md"):
        convert("marian", tmp_path / "source", tmp_path / "converted", tokenizer=False, overwrite=True)
    (tmp_path / "converted" / "README.md").unlink()
    convert("marian", tmp_path / "source", tmp_path / "converted", tokenizer=False, overwrite=True)
    assert (tmp_path / "converted" / "model.safetensors").read_bytes() == first
    assert (tmp_path / "converted" / "README.md").is_file()  # replaced as a whole, not written into
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging folder left behind
    with pytest.raises(ConversionError, match="Unknown checkpoint kind"):
        convert("bart", tmp_path / "source", tmp_path / "other")


# ----------------------------------------------------------------------------------------------------------------
# The command line.


def test_cli_converts_a_checkpoint(tmp_path, capsys):
    build_source("fsmt", 0, tmp_path / "source")
    cli_main(["convert", "fsmt", str(tmp_path / "source"), str(tmp_path / "out"), "--no-tokenizer"])
    assert "Converted the FSMT" in capsys.readouterr().out
    assert json.loads((tmp_path / "out" / "config.json").read_text())["model_type"] == "vanilla_transformer"
    assert GenerationConfig.from_pretrained(tmp_path / "out").num_beams == 5


def test_cli_reports_a_bad_source_without_a_traceback(tmp_path, capsys):
    build_source("marian", 0, tmp_path / "source")
    with pytest.raises(SystemExit) as exit_info:
        cli_main(["convert", "fsmt", str(tmp_path / "source"), str(tmp_path / "out")])
    assert exit_info.value.code == 1  # a runtime error (usage errors exit 2, every other error 1), one line
    error = capsys.readouterr().err
    assert "Traceback" not in error
    assert "holds a 'marian' checkpoint, but `convert fsmt` takes FSMT (fairseq)" in error
    assert "Use `convert marian`" in error
    assert not (tmp_path / "out").exists()


# ----------------------------------------------------------------------------------------------------------------
# The config option FSMT needs, on its own.


@pytest.mark.parametrize("position_embedding_type", ["sinusoidal", "learned"])
def test_skip_padding_positions_makes_left_padding_invisible(position_embedding_type, seed):
    from helpers import tiny_model

    tokens = torch.randint(3, 53, (1, 6), generator=torch.Generator().manual_seed(seed))
    left_padded = torch.cat([torch.zeros(1, 3, dtype=torch.long), tokens], dim=1)  # pad id 0
    mask = (left_padded != 0).long()
    outputs = {}
    for skip in (True, False):
        model = tiny_model(seed, skip_padding_positions=skip, position_offset=1,
                           position_embedding_type=position_embedding_type)
        with torch.no_grad():
            alone = model.get_encoder()(input_ids=tokens).last_hidden_state
            padded = model.get_encoder()(input_ids=left_padded, attention_mask=mask).last_hidden_state[:, 3:]
        outputs[skip] = (alone - padded).abs().max().item()
    assert outputs[True] < 1e-5  # positions count only the real tokens
    assert outputs[False] > 1e-2  # the paper's numbering moves every token by the padding


def test_skip_padding_positions_needs_a_pad_token():
    from huggingface_hub.errors import StrictDataclassClassValidationError

    from vanilla_transformer import VanillaTransformerConfig

    with pytest.raises(StrictDataclassClassValidationError, match="skip_padding_positions=True needs a pad_token_id"):
        VanillaTransformerConfig(skip_padding_positions=True, pad_token_id=None)
