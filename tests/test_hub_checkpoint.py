"""A saved checkpoint folder is complete: a fresh Python without this package loads it from the folder alone
(AutoConfig, AutoTokenizer, AutoModelForSeq2SeqLM, pipeline, the model card's own snippets) and translates exactly
as the in-process objects do; push_to_hub uploads the same files."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import transformers.utils.hub as transformers_hub
from huggingface_hub import ModelCard, ModelCardData
from transformers import pipeline

from helpers import HIDE_PACKAGE
from translation_fixtures import GERMAN, tiny_tokenizer, tiny_translator
from vanilla_transformer import save_for_hub
from vanilla_transformer.casing import recase

SOURCE_FILES = {"configuration_vanilla_transformer.py", "modeling_vanilla_transformer.py", "pipeline_translation.py",
                "decoding.py", "casing.py"}

# Runs in `python -I` from an empty directory: neither the repository nor PYTHONPATH is on sys.path, and a meta path
# hook refuses our packages in case they are installed in the environment (e.g. `pip install -e .` in CI).
FRESH_SCRIPT = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import contextlib, io, json, os, re, sys

    try:
        import vanilla_transformer  # noqa: F401
        package_importable = True
    except ImportError:
        package_importable = False

    from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    folder, resave_folder, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
    translator = pipeline("translation", model=folder, trust_remote_code=True)
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    generated = tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)

    model.save_pretrained(resave_folder)  # a model loaded as remote code saves a complete folder too

    readme = open(os.path.join(folder, "README.md"), encoding="utf-8").read()
    snippets = re.findall(r"```python\n(.*?)```", readme, flags=re.S)
    printed = []
    for snippet in snippets:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(snippet, {})
        printed.append(out.getvalue())

    print(json.dumps({
        "package_importable": package_importable,
        "config_class": type(config).__module__ + "." + type(config).__name__,
        "tokenizer_class": type(tokenizer).__module__ + "." + type(tokenizer).__name__,
        "model_class": type(model).__module__ + "." + type(model).__name__,
        "pipeline_class": type(translator).__module__ + "." + type(translator).__name__,
        "num_beams": model.generation_config.num_beams,
        "pipeline": translator(texts),
        "pipeline_batched": translator(texts, batch_size=len(texts)),
        "pipeline_upper": translator([text.upper() for text in texts], batch_size=2),
        "pipeline_upper_as_written": translator([text.upper() for text in texts], recase=False),
        "generate": generated,
        "snippets": len(snippets),
        "snippet_output": printed,
    }))
    '''
)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A Hub-ready folder written by save_for_hub, and the in-process objects it was written from."""
    model, tokenizer = tiny_translator(seed=3), tiny_tokenizer()
    folder = tmp_path_factory.mktemp("checkpoint")
    card = save_for_hub(model, tokenizer, folder, source_lang="de", target_lang="en", dataset_name="bentrevett/multi30k",
                        metrics={"bleu": 1.5, "split": "test"}, training_summary="Ten steps on six sentences.",
                        model_id=str(folder))
    return folder, model, tokenizer, card


def test_checkpoint_folder_holds_everything_the_hub_needs(checkpoint):
    folder, model, tokenizer, _ = checkpoint
    files = set(os.listdir(folder))
    assert {"model.safetensors", "config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json",
            "README.md"} | SOURCE_FILES <= files
    config = json.loads((folder / "config.json").read_text())
    assert config["auto_map"] == {
        "AutoConfig": "configuration_vanilla_transformer.VanillaTransformerConfig",
        "AutoModelForSeq2SeqLM": "modeling_vanilla_transformer.VanillaTransformerForConditionalGeneration",
    }
    assert config["custom_pipelines"] == {
        "translation": {"impl": "pipeline_translation.TranslationPipeline", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
    }
    generation = json.loads((folder / "generation_config.json").read_text())
    assert (generation["num_beams"], generation["length_penalty"]) == (4, 0.6)  # section 6.1 of the paper
    assert generation["max_length"] == min(256, model.config.max_position_embeddings)
    assert (generation["decoder_start_token_id"], generation["eos_token_id"], generation["pad_token_id"]) == (
        tokenizer.bos_token_id, tokenizer.eos_token_id, tokenizer.pad_token_id)
    card = ModelCard.load(folder / "README.md")
    assert card.data.pipeline_tag == "translation" and card.data.library_name == "transformers"


@pytest.mark.slow  # a fresh interpreter
def test_fresh_interpreter_without_the_package_translates_like_the_in_process_objects(checkpoint, tmp_path):
    folder, model, tokenizer, _ = checkpoint
    texts = GERMAN[:3]
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1")
    env.setdefault("OMP_NUM_THREADS", "1")  # tiny model: more threads only contend for the CPU
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_SCRIPT)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run(
        [sys.executable, "-I", str(script), str(folder), str(tmp_path / "resaved"), json.dumps(texts)],
        cwd=workdir, env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    fresh = json.loads(result.stdout.strip().splitlines()[-1])

    assert fresh["package_importable"] is False
    for key in ("config_class", "model_class", "pipeline_class"):
        assert fresh[key].startswith("transformers_modules."), fresh[key]  # the folder's own copies of our code
    assert fresh["pipeline_class"].endswith("pipeline_translation.TranslationPipeline")
    assert fresh["tokenizer_class"] == "transformers.tokenization_utils_tokenizers.TokenizersBackend"
    assert fresh["num_beams"] == 4

    in_process = pipeline("translation", model=model, tokenizer=tokenizer)
    expected = in_process(texts)
    assert fresh["pipeline"] == expected
    assert fresh["pipeline_batched"] == expected
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    assert fresh["generate"] == tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)
    assert [item["translation_text"] for item in expected] == fresh["generate"]
    # ALL-CAPS input: recased by the folder's own copy of casing.py, as in this process; recase=False as written
    upper = [text.upper() for text in texts]
    assert fresh["pipeline_upper"] == in_process(upper)
    assert fresh["pipeline_upper_as_written"] == in_process(upper, recase=False)
    recased = recase(upper, tokenizer)[0]
    inputs = tokenizer(recased, return_tensors="pt", padding=True)
    assert [item["translation_text"] for item in fresh["pipeline_upper"]] == [
        text.upper() for text in tokenizer.batch_decode(model.generate(**inputs), skip_special_tokens=True)]

    assert fresh["snippets"] == 2  # the card's usage code ran as written (pointed at this folder)
    assert all(output.strip() for output in fresh["snippet_output"])

    resaved = tmp_path / "resaved"
    assert SOURCE_FILES <= set(os.listdir(resaved))
    assert "translation" in json.loads((resaved / "config.json").read_text())["custom_pipelines"]


class FakeHubApi:
    """Stands in for the Hub: records what transformers' own push_to_hub would upload."""

    def __init__(self):
        self.uploaded: dict[str, bytes] = {}

    def create_repo(self, repo_id, **kwargs):
        return type("RepoUrl", (), {"repo_id": repo_id})()

    def create_commit(self, repo_id, operations, **kwargs):
        for operation in operations:
            with open(operation.path_or_fileobj, "rb") as f:
                self.uploaded[operation.path_in_repo] = f.read()
        return f"https://huggingface.co/{repo_id}/commit/0"


def test_push_to_hub_uploads_the_pipeline_code_and_custom_pipelines(monkeypatch):
    api = FakeHubApi()
    if hasattr(transformers_hub, "hf_api"):  # transformers >= 5.19 routes its Hub calls through hf_api()
        monkeypatch.setattr(transformers_hub, "hf_api", lambda: api)
    else:  # 5.18 calls huggingface_hub's functions, imported into transformers.utils.hub
        monkeypatch.setattr(transformers_hub, "create_repo", api.create_repo)
        monkeypatch.setattr(transformers_hub, "create_commit", api.create_commit)
    monkeypatch.setattr(transformers_hub, "create_and_tag_model_card",
                        lambda repo_id, tags=None, token=None: ModelCard.from_template(ModelCardData(), template_str="---\n{{ card_data }}\n---\n"))
    model = tiny_translator(seed=4)
    model.push_to_hub("someone/tiny-vanilla-transformer")
    assert SOURCE_FILES | {"config.json", "generation_config.json", "model.safetensors"} <= set(api.uploaded)
    config = json.loads(api.uploaded["config.json"])
    assert config["custom_pipelines"]["translation"]["impl"] == "pipeline_translation.TranslationPipeline"
    assert "AutoModelForSeq2SeqLM" in config["auto_map"]
