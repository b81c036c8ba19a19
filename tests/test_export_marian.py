"""Export to a plain MarianMTModel folder: transformers' own `MarianMTModel`, loaded by a fresh interpreter in which
this package cannot be imported (transformers 5.x here, 4.57 where `VT_TF4_PYTHON` names such a Python), computes our
logits and generates our tokens, for every exportable variant and a model trained on the demo task; the weights come
back exactly through `convert marian`; CTranslate2's own converter and ONNX (optimum + onnxruntime) translate alike;
what Marian cannot express is refused with one line and nothing written.

    VT_TF4_PYTHON   a Python whose environment has transformers 4.57 (and optimum-onnx + onnxruntime for the ONNX
                    check); CI's marian-4.x job sets it
"""

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

from helpers import HIDE_PACKAGE, run_main, tiny_model
from translation_fixtures import GERMAN, tiny_tokenizer
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.files import MANIFEST_NAME
from vanilla_transformer.interop.convert import convert
from vanilla_transformer.interop.export_ctranslate2 import ExportError
from vanilla_transformer.interop.export_marian import marian_dimension_order, marian_model, permute_d_model, to_marian

LOGITS_ATOL = 1e-5
MAX_LENGTH = 24  # generation of random models runs to the limit: keep it short

# name -> options of a random tiny model: every option Marian can express, in combinations
VARIANTS = {
    "shared-tied-relu": dict(),
    "separate-vocabs-untied-bias-gelu": dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=150,
                                             tie_word_embeddings=False, add_final_logits_bias=True,
                                             activation_function="gelu"),
    "separate-tied-swish-unscaled": dict(share_encoder_decoder_embeddings=False, activation_function="swish",
                                         scale_embedding=False),
    "shared-untied-bias-start-pad": dict(tie_word_embeddings=False, add_final_logits_bias=True,
                                         activation_function="gelu_new", decoder_start_token_id=0),
    "concatenated-silu-start-eos": dict(sinusoidal_layout="concatenated", activation_function="silu",
                                        decoder_start_token_id=2, forced_eos_token_id=2),
}

# The options Marian cannot express, each with the word its one-line refusal must name.
REFUSED = {
    "normalize_before": dict(normalize_before=True),
    "position_embedding_type": dict(position_embedding_type="learned"),
    "attention_key_dim": dict(attention_key_dim=4),
    "sinusoidal_frequencies": dict(sinusoidal_frequencies="tensor2tensor"),
    "position_offset": dict(position_offset=2),
    "skip_padding_positions": dict(skip_padding_positions=True),
    "layer_norm_eps": dict(layer_norm_eps=1e-6),
    "decoder_start_token_id": dict(decoder_start_token_id=None),
}

# Runs in `python -I` from an empty folder (our packages hidden): loads each exported folder with the Auto classes,
# no trust_remote_code, and writes what it computed for the test to compare. With "onnx" in the manifest it also
# exports one folder with optimum-cli and runs it with onnxruntime.
FRESH_SCRIPT = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import contextlib, io, json, os, re, subprocess, sys

    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    try:
        import vanilla_transformer  # noqa: F401
        package_importable = True
    except ImportError:
        package_importable = False

    manifest = json.load(open(sys.argv[1]))
    summary = {"transformers": transformers.__version__, "package_importable": package_importable, "folders": {}}
    for name, item in manifest["folders"].items():
        inputs, texts = torch.load(item["inputs"]), item["texts"]
        model = AutoModelForSeq2SeqLM.from_pretrained(item["folder"]).eval()
        tokenizer = AutoTokenizer.from_pretrained(item["folder"])
        batch = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        with torch.no_grad():
            logits = model(**batch, decoder_input_ids=inputs["decoder_input_ids"]).logits
            greedy = model.generate(**batch, num_beams=1)
            beam = model.generate(**batch)  # the folder's generation config: beam 4, length penalty 0.6
        encoded = tokenizer(texts, padding=True, return_tensors="pt")
        try:
            translations = [row["translation_text"] for row in pipeline("translation", model=item["folder"])(texts)]
        except KeyError:  # transformers 5 removed the task (this package registers its own)
            translations = None
        torch.save({"logits": logits, "greedy": greedy, "beam": beam, "encoded": encoded["input_ids"]}, item["result"])
        # the model card's own code, pointed at this folder (the pipeline snippet needs transformers 4)
        readme = open(os.path.join(item["folder"], "README.md"), encoding="utf-8").read()
        printed = []
        for snippet in re.findall(r"```python\n(.*?)```", readme, flags=re.S):
            if "pipeline(" in snippet and translations is None:
                continue
            out = io.StringIO()
            with contextlib.redirect_stdout(out):
                exec(snippet.replace(f'"{os.path.basename(item["folder"])}"', repr(item["folder"])), {})
            printed.append(out.getvalue().strip())
        summary["folders"][name] = {
            "encoded_keys": sorted(encoded.keys()),
            "card_snippets": printed,
            "model_class": type(model).__module__ + "." + type(model).__name__,
            "tokenizer_class": type(tokenizer).__name__,
            "num_beams": model.generation_config.num_beams,
            "pipeline": translations,
        }

    if manifest.get("onnx"):
        name, onnx_folder = manifest["onnx"]["name"], manifest["onnx"]["out"]
        folder = manifest["folders"][name]["folder"]
        cli = os.path.join(os.path.dirname(sys.executable), "optimum-cli")
        exported = subprocess.run([cli, "export", "onnx", "--model", folder, "--task", "text2text-generation-with-past",
                                   onnx_folder], capture_output=True, text=True)
        if exported.returncode != 0:
            raise SystemExit("optimum-cli failed: " + exported.stderr[-3000:])
        from optimum.onnxruntime import ORTModelForSeq2SeqLM

        texts = manifest["folders"][name]["texts"]
        onnx_model = ORTModelForSeq2SeqLM.from_pretrained(onnx_folder)
        tokenizer = AutoTokenizer.from_pretrained(onnx_folder)
        inputs = tokenizer(texts, padding=True, return_tensors="pt")
        greedy = onnx_model.generate(**inputs, num_beams=1)
        summary["onnx"] = {"greedy": tokenizer.batch_decode(greedy, skip_special_tokens=True),
                           "files": sorted(os.listdir(onnx_folder))}
    print(json.dumps(summary))
    '''
)


def randomize_(model, seed: int) -> None:
    """Weights at a scale where every sub-layer matters (LayerNorms off identity, biases and logits bias non-zero)."""
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, tensor in model.state_dict().items():
            if "layer_norm" in name and name.endswith("weight"):
                tensor.copy_(1.0 + 0.2 * torch.randn(tensor.shape, generator=generator))
            elif name.endswith("bias"):
                tensor.copy_(0.3 * torch.randn(tensor.shape, generator=generator))


def random_variant(name: str, seed: int):
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=seed, vocab_size=len(tokenizer), **VARIANTS[name])
    randomize_(model, seed)
    model.generation_config.max_length = MAX_LENGTH
    return model, tokenizer


def reference_inputs(model, tokenizer, texts: list[str], seed: int) -> dict:
    """The tokenised test sentences (padded) and random decoder inputs starting with the decoder start token."""
    batch = tokenizer(texts, padding=True, return_tensors="pt")
    generator = torch.Generator().manual_seed(seed)
    decoder = torch.randint(3, model.config.target_vocab_size, (len(texts), 9), generator=generator)
    decoder[:, 0] = model.config.decoder_start_token_id
    return {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"], "decoder_input_ids": decoder}


def demo_sentences() -> list[str]:
    """Six held-out sources of the demo task (English number words), longest first."""
    from vanilla_transformer.training.numbers import number_translation_splits

    sources = number_translation_splits(train_size=600, seed=42)["test"]["source"][:6]
    return sorted(sources, key=len, reverse=True)


def train_demo_checkpoint(folder: Path) -> None:
    """A tiny model trained for 200 steps (the paper's schedule, 150 warmup) on the demo task (English -> German number words) by training/train.py."""
    from vanilla_transformer.training.train import main as train_main

    options = dict(d_model=32, encoder_layers=2, decoder_layers=2, attention_heads=4, ffn_dim=64, vocab_size=90,
                   demo_train_size=600, max_tokens=300, max_test_samples=8, per_device_eval_batch_size=8,
                   config_overrides="max_position_embeddings=32", report_to="none", disable_tqdm="true",
                   num_sample_translations=0, warmup_steps=150, max_steps=200, dropout=0.0, max_target_length=20,
                   save_strategy="no", output_dir=str(folder))
    train_main([item for name, value in options.items() for item in (f"--{name}", str(value))])


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """name -> (our model, tokenizer, exported folder, reference inputs, in-process reference outputs) for every
    variant (random weights, one seed each) and the trained demo checkpoint (exported by the command line)."""
    root = tmp_path_factory.mktemp("marian-exports")
    cases = {}
    for seed, name in enumerate(VARIANTS):
        model, tokenizer = random_variant(name, seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            to_marian(model, root / name, tokenizer=tokenizer)
        differs = model.config.target_vocab_size != model.config.vocab_size
        assert any("transformers 4 cannot" in str(w.message) for w in caught) == differs, name
        cases[name] = (model, tokenizer, GERMAN)
    demo = root / "demo-checkpoint"
    train_demo_checkpoint(demo)
    code = subprocess.run([sys.executable, "-m", "vanilla_transformer", "export", "marian", str(demo),
                           str(root / "demo")], capture_output=True, text=True, cwd=root).returncode
    assert code == 0
    cases["demo"] = (AutoModelForSeq2SeqLM.from_pretrained(demo).eval(), AutoTokenizer.from_pretrained(demo),
                     demo_sentences())

    result = {}
    for seed, (name, (model, tokenizer, texts)) in enumerate(cases.items()):
        inputs = reference_inputs(model, tokenizer, texts, seed)
        torch.save(inputs, root / f"{name}-inputs.pt")
        batch = dict(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"])
        with torch.no_grad():
            expected = {"logits": model(**batch, decoder_input_ids=inputs["decoder_input_ids"]).logits,
                        "greedy": model.generate(**batch, num_beams=1), "beam": model.generate(**batch),
                        "encoded": inputs["input_ids"]}
        translations = [row["translation_text"] for row in pipeline("translation", model=model, tokenizer=tokenizer)(texts)]
        result[name] = dict(model=model, tokenizer=tokenizer, folder=root / name, inputs=root / f"{name}-inputs.pt",
                            expected=expected, pipeline=translations, texts=texts)
    return result


def run_fresh(python: str, exports: dict, tmp_path: Path, onnx: bool = False) -> tuple[dict, dict]:
    """Run FRESH_SCRIPT with `python` over the exported folders; (summary, name -> tensors it computed)."""
    manifest = {"folders": {
        name: {"folder": str(case["folder"]), "inputs": str(case["inputs"]), "result": str(tmp_path / f"{name}.pt"),
               "texts": case["texts"]}
        for name, case in exports.items()}}
    if onnx:
        manifest["onnx"] = {"name": "demo", "out": str(tmp_path / "demo-onnx")}
    (tmp_path / "manifest.json").write_text(json.dumps(manifest))
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_SCRIPT)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([python, "-I", str(script), str(tmp_path / "manifest.json")], cwd=workdir, env=env,
                            stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr[-4000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    return summary, {name: torch.load(tmp_path / f"{name}.pt") for name in exports}


def assert_computes_ours(exports: dict, summary: dict, computed: dict) -> dict:
    """Every folder is a MarianMTModel whose logits (1e-5), greedy and beam-4 tokens, tokenizer ids and pipeline
    translations are ours. Returns name -> max |logit difference|."""
    assert summary["package_importable"] is False
    differences = {}
    for name, case in exports.items():
        got, expected = computed[name], case["expected"]
        folder = summary["folders"][name]
        assert folder["model_class"] == "transformers.models.marian.modeling_marian.MarianMTModel", name
        assert folder["num_beams"] == 4
        torch.testing.assert_close(got["logits"], expected["logits"], rtol=0, atol=LOGITS_ATOL, msg=name)
        differences[name] = (got["logits"] - expected["logits"]).abs().max().item()
        assert expected["logits"].std() > 0.5, name  # the comparison is between varied numbers
        for key in ("greedy", "beam", "encoded"):
            assert torch.equal(got[key], expected[key]), f"{name}: {key}"
        assert folder["encoded_keys"] == ["attention_mask", "input_ids"], name
        snippets = 2 if summary["transformers"].startswith("4.") else 1
        assert len(folder["card_snippets"]) == snippets and all(folder["card_snippets"]), name
        if summary["transformers"].startswith("4."):
            assert folder["pipeline"] == case["pipeline"], name
        else:
            assert folder["pipeline"] is None  # no "translation" task in transformers 5 without this package
    return differences


# ----------------------------------------------------------------------------------------------------------------
# The folder


@pytest.mark.slow  # its fixture trains a model and exports it in a fresh interpreter
def test_exported_folder_is_a_plain_marian_folder(exports):
    case = exports["demo"]
    folder = case["folder"]
    assert sorted(os.listdir(folder)) == [MANIFEST_NAME, "README.md", "config.json", "generation_config.json",
                                          "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    config = json.loads((folder / "config.json").read_text())
    assert config["model_type"] == "marian" and config["architectures"] == ["MarianMTModel"]
    assert not {"auto_map", "custom_pipelines"} & set(config)
    assert json.loads((folder / "tokenizer_config.json").read_text())["tokenizer_class"] == "PreTrainedTokenizerFast"
    generation = json.loads((folder / "generation_config.json").read_text())
    ours = case["model"].generation_config
    assert (generation["num_beams"], generation["length_penalty"], generation["max_length"]) == (
        4, 0.6, ours.max_length) and ours.max_length == 21  # the trained checkpoint's own limit
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (
        case["model"].config.decoder_start_token_id, case["model"].config.eos_token_id, case["model"].config.pad_token_id)
    card = ModelCard.load(folder / "README.md")
    assert (card.data.library_name, card.data.pipeline_tag) == ("transformers", "translation")
    assert "demo-checkpoint" in card.text and "trust_remote_code" in card.text
    assert 'pipeline("translation", model="demo")' in card.text
    assert "`vanilla-transformer export ctranslate2`" in card.text  # CTranslate2's converter does not fit: <pad> is 0
    # every weight is a permutation of ours: d_model axes reordered, nothing else
    marian = load_file(folder / "model.safetensors")
    ours_state = case["model"].state_dict()
    order = marian_dimension_order(case["model"].config)
    assert not torch.equal(order, torch.arange(len(order)))
    assert torch.equal(marian["model.encoder.layers.0.fc1.weight"], ours_state["model.encoder.layers.0.fc1.weight"][:, order])


@pytest.mark.slow  # a fresh interpreter
def test_fresh_interpreter_without_the_package_loads_marian_with_our_outputs(exports, tmp_path):
    summary, computed = run_fresh(sys.executable, exports, tmp_path)
    differences = assert_computes_ours(exports, summary, computed)
    print("max |logit difference| (transformers", summary["transformers"], "):", json.dumps(differences))
    # the trained model translates sensibly: the comparison is not between empty outputs
    print("demo translations:", exports["demo"]["texts"], "->", exports["demo"]["pipeline"])
    assert len(set(exports["demo"]["pipeline"])) > 1 and all(exports["demo"]["pipeline"])  # not one fixed output


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.skipif(not os.environ.get("VT_TF4_PYTHON"),
                    reason="VT_TF4_PYTHON (a Python with transformers 4.57 and optimum-onnx) is not set; CI's "
                           "marian-4.x job sets it")
def test_transformers_4_loads_marian_with_our_outputs_and_onnx_translates_alike(exports, tmp_path):
    # transformers 4's MarianModel makes the decoder embedding as large as the source vocabulary: folders with target
    # vocabularies of another size are for transformers 5 only (the export warns, the card says so)
    loadable = {name: case for name, case in exports.items()
                if case["model"].config.target_vocab_size == case["model"].config.vocab_size}
    assert set(exports) - set(loadable) == {"separate-vocabs-untied-bias-gelu"}
    summary, computed = run_fresh(os.environ["VT_TF4_PYTHON"], loadable, tmp_path, onnx=True)
    assert summary["transformers"].startswith("4."), summary["transformers"]
    differences = assert_computes_ours(loadable, summary, computed)
    print("max |logit difference| (transformers", summary["transformers"], "):", json.dumps(differences))
    # ONNX (optimum-cli export onnx, onnxruntime): greedy translations of the trained model are ours
    demo = exports["demo"]
    with torch.no_grad():
        greedy = demo["model"].generate(**demo["tokenizer"](demo["texts"], padding=True, return_tensors="pt"),
                                        num_beams=1)
    assert summary["onnx"]["greedy"] == demo["tokenizer"].batch_decode(greedy, skip_special_tokens=True)
    assert "encoder_model.onnx" in summary["onnx"]["files"]


# ----------------------------------------------------------------------------------------------------------------
# Round trips with convert marian


@pytest.mark.parametrize("name", list(VARIANTS))
def test_export_then_convert_gives_our_weights_back(name, tmp_path):
    model, tokenizer = random_variant(name, seed=7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the transformers 4 note of separate vocabularies of different sizes
        to_marian(model, tmp_path / "marian", tokenizer=tokenizer)
    converted = convert("marian", tmp_path / "marian", tmp_path / "back", tokenizer=False)
    # the converted model uses Marian's sinusoid layout: its weights are ours with the d_model axis in Marian's order
    assert converted.config.sinusoidal_layout == "concatenated"
    order = marian_dimension_order(model.config)
    back = permute_d_model(converted.state_dict(), order.argsort())
    ours = model.state_dict()
    if model.final_logits_bias is None:  # Marian's zero bias came along
        assert torch.equal(back.pop("final_logits_bias"), torch.zeros(1, model.config.target_vocab_size))
    assert back.keys() == ours.keys()
    for key, tensor in ours.items():
        assert torch.equal(back[key], tensor), key
    for option in ("share_encoder_decoder_embeddings", "tie_word_embeddings", "activation_function", "scale_embedding",
                   "decoder_start_token_id", "vocab_size", "target_vocab_size", "d_model"):
        assert getattr(converted.config, option) == getattr(model.config, option), option


@pytest.fixture
def opus_mt(tmp_path):
    """An OPUS-MT-like MarianMTModel folder (MarianTokenizer, <pad> last, decoder start <pad> with a zero embedding,
    never generated), converted into ours."""
    from test_convert import build_source, write_marian_tokenizer

    source_folder = tmp_path / "opus"
    source_folder.mkdir()
    vocab_size = write_marian_tokenizer(source_folder)
    _, source = build_source("marian", 5, source_folder, vocab_size=vocab_size, pad_token_id=vocab_size - 1,
                             decoder_start_token_id=vocab_size - 1)
    with torch.no_grad():  # OPUS-MT's <pad> row is zeros: CTranslate2's converter starts the decoder from zeros
        source.get_input_embeddings().weight[source.config.pad_token_id] = 0.0
    source.save_pretrained(source_folder)
    convert("marian", source_folder, tmp_path / "converted")
    return source_folder, source, tmp_path / "converted"


def test_converted_opus_mt_exports_back_to_the_same_marian_weights(opus_mt, tmp_path):
    source_folder, _, converted = opus_mt
    out = to_marian(converted, tmp_path / "marian")
    original, exported = load_file(source_folder / "model.safetensors"), load_file(out / "model.safetensors")
    assert exported.keys() == original.keys()
    for key in original:
        assert torch.equal(exported[key], original[key]), key
    assert json.loads((out / "tokenizer_config.json").read_text())["tokenizer_class"] == "MarianTokenizer"
    assert AutoTokenizer.from_pretrained(out)("Hallo Welt").input_ids == AutoTokenizer.from_pretrained(
        source_folder)("Hallo Welt").input_ids


@pytest.mark.slow  # a fresh interpreter
def test_ctranslate2_own_converter_translates_like_our_ctranslate2_export(opus_mt, tmp_path):
    """`ct2-transformers-converter --model OUT` (CTranslate2's Marian loader: OPUS-MT's conventions) and our
    `export ctranslate2` of the same checkpoint give the same greedy and beam-4 tokens."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    _, _, converted = opus_mt
    out = to_marian(converted, tmp_path / "marian")
    converter = Path(sys.executable).parent / "ct2-transformers-converter"
    result = subprocess.run([str(converter), "--model", str(out), "--output_dir", str(tmp_path / "theirs")],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "ct2-transformers-converter --model marian" in (out / "README.md").read_text()  # the card says it fits
    ours = to_ctranslate2(converted, tmp_path / "ours")
    tokenizer = AutoTokenizer.from_pretrained(out)
    from test_convert import ENGLISH  # the sentences its sentencepiece model was trained on: short token sequences

    sources = [tokenizer.convert_ids_to_tokens(ids) for ids in tokenizer(ENGLISH).input_ids]
    assert max(map(len, sources)) < source_max_positions(out)
    outputs = {}
    for name, folder in (("theirs", tmp_path / "theirs"), ("ours", ours)):
        translator = ctranslate2.Translator(str(folder))
        for beam in (1, 4):
            # OPUS-MT's generation config bans <pad>: our folder suppresses it, CTranslate2's has no such token
            suppress = [["<pad>"]] if name == "ours" else None
            results = translator.translate_batch(sources, beam_size=beam, max_decoding_length=30,
                                                 length_penalty=0.6, suppress_sequences=suppress)
            outputs[name, beam] = [r.hypotheses[0] for r in results]
    for beam in (1, 4):
        assert outputs["theirs", beam] == outputs["ours", beam], f"beam {beam}"
    assert sum(len(row) for row in outputs["ours", 1]) > len(sources)  # not all empty


def source_max_positions(folder: Path) -> int:
    return json.loads((folder / "config.json").read_text())["max_position_embeddings"]


# ----------------------------------------------------------------------------------------------------------------
# Refusals and folders


def saved_checkpoint(folder: Path, **options) -> Path:
    tokenizer = tiny_tokenizer()
    model = tiny_model(seed=0, vocab_size=len(tokenizer), **options)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def assert_refused(argv, capsys, *words) -> str:
    code, _, err = run_main(cli_main, argv, capsys)
    assert code != 0 and "Traceback" not in err
    message = err.strip().splitlines()[-1]
    for word in words:
        assert word in message, message
    return message


@pytest.mark.parametrize("option", list(REFUSED))
def test_an_option_marian_cannot_express_stops_with_one_line_and_writes_nothing(option, tmp_path, capsys):
    checkpoint = saved_checkpoint(tmp_path / "checkpoint", **REFUSED[option])
    before = sorted(os.listdir(tmp_path))
    message = assert_refused(["export", "marian", str(checkpoint), str(tmp_path / "out")], capsys, option, "Marian")
    assert sorted(os.listdir(tmp_path)) == before, message  # no output, no staging folder


def test_folder_refusals_write_nothing_and_overwrite_replaces_only_the_output(tmp_path, capsys):
    checkpoint = saved_checkpoint(tmp_path / "work" / "checkpoint")
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_refused(["export", "marian", str(checkpoint), str(out)], capsys, "not empty", "--overwrite")
    assert (out / "keep.txt").read_text() == "mine"
    files = {path.name: path.read_bytes() for path in checkpoint.iterdir()}
    for target in (checkpoint, tmp_path / "work"):  # the input itself, or a folder that contains it
        assert_refused(["export", "marian", str(checkpoint), str(target), "--overwrite"], capsys, "input")
        assert {path.name: path.read_bytes() for path in checkpoint.iterdir()} == files
        assert sorted(os.listdir(tmp_path / "work")) == ["checkpoint"]
    assert_refused(["export", "marian", str(tmp_path / "missing"), str(tmp_path / "o2")], capsys, "missing")
    assert not (tmp_path / "o2").exists()

    # --overwrite replaces only what this project wrote: the user's keep.txt stops it, an earlier export does not
    assert_refused(["export", "marian", str(checkpoint), str(out), "--overwrite"], capsys, "keep.txt", MANIFEST_NAME)
    assert sorted(os.listdir(out)) == ["keep.txt"]
    (out / "keep.txt").unlink()
    for _ in range(2):
        code, _, err = run_main(cli_main, ["export", "marian", str(checkpoint), str(out), "--overwrite"], capsys)
        assert code == 0, err
    assert (out / "model.safetensors").is_file()
    assert sorted(os.listdir(tmp_path)) == ["out", "work"]  # no staging or set-aside folder left behind
    # an exported Marian folder is not ours to export again
    assert_refused(["export", "marian", str(out), str(tmp_path / "o3")], capsys, "marian")
    assert not (tmp_path / "o3").exists()


def test_python_api_refuses_a_model_without_a_tokenizer_and_a_foreign_model(tmp_path):
    model = tiny_model(seed=0)
    with pytest.raises(ExportError, match="tokenizer"):
        to_marian(model, tmp_path / "out")
    with pytest.raises(ExportError, match="MarianMTModel"):
        to_marian(marian_model(model), tmp_path / "out", tokenizer=tiny_tokenizer())
    assert not (tmp_path / "out").exists()
