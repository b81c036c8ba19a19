"""A model folder whose files no longer belong together, in `serve` and `translate` alike: a tokenizer that is not the
model's is refused with one line naming it; a file changed since the folder was written (its manifest records
another SHA-256) is loaded with one warning naming it. Made by hand here the way a user would: another model's
files copied over an export or a checkpoint."""

import json
import logging
import shutil

import pytest
from serve_fixtures import SENTENCES

pytest.importorskip("fastapi")
num2words = pytest.importorskip("num2words").num2words

from helpers import run_main  # noqa: E402
from vanilla_transformer.cli.main import main  # noqa: E402
from vanilla_transformer.files import write_manifest  # noqa: E402
from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402
from vanilla_transformer.training.tokenizer import train_tokenizer  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402


def other_tokenizer(folder, vocab_size: int = 300) -> None:
    """Save a tokenizer of English and German number words only (other ids for the same words) in `folder`."""
    texts = [num2words(i, lang=lang) for lang in ("en", "de") for i in range(400)]
    train_tokenizer(texts, vocab_size=vocab_size, min_frequency=1, model_max_length=64).save_pretrained(folder)


def open_in_serve_and_translate(folder, tmp_path, capsys) -> tuple[str, str]:
    """(serve's error or "", translate's error or "") for `folder`: the engine loaded as `serve` loads it, and the
    command `vanilla-transformer translate` run on one line."""
    try:
        TranslationEngine(folder, device="cpu")
        served = ""
    except ValueError as error:
        served = str(error)
    source = tmp_path / "in.txt"
    source.write_text(SENTENCES[0] + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    output.unlink(missing_ok=True)
    code, _, err = run_main(main, ["translate", "--model", str(folder), "--input", str(source), "--output",
                                   str(output), "--device", "cpu", "--no-progress"], capsys)
    assert code in (0, 1), err
    return served, err.strip() if code else ""


@pytest.mark.parametrize("fingerprint", [True, False], ids=["with its fingerprint", "exported before fingerprints"])
def test_a_ctranslate2_export_with_another_tokenizer_is_refused(served_ct2_dir, tmp_path, capsys, fingerprint):
    folder = tmp_path / "export"
    shutil.copytree(served_ct2_dir, folder)
    if not fingerprint:
        (folder / "tokenizer_fingerprint.json").unlink()
    other_tokenizer(folder)
    served, translated = open_in_serve_and_translate(folder, tmp_path, capsys)
    for error in (served, translated):
        assert "is not the tokenizer" in error and "tokenizer.json" in error and "\n" not in error, error


def test_a_checkpoint_with_a_tokenizer_of_more_tokens_than_the_model_is_refused(served_model_dir, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    other_tokenizer(folder, vocab_size=600)
    served, translated = open_in_serve_and_translate(folder, tmp_path, capsys)
    for error in (served, translated):
        assert "tokenizer.json has" in error and "more than the" in error and "\n" not in error, error


def test_a_checkpoint_whose_end_token_is_another_id_is_refused(served_model_dir, tmp_path, capsys):
    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    config = json.loads((folder / "config.json").read_text(encoding="utf-8"))
    config["eos_token_id"] = config["eos_token_id"] + 1
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    served, translated = open_in_serve_and_translate(folder, tmp_path, capsys)
    for error in (served, translated):
        assert "has eos token id" in error and "config.json says" in error, error


@pytest.mark.parametrize("replaced", ["model.safetensors", "tokenizer.json"])
def test_a_file_replaced_after_the_folder_was_written_is_named_in_a_warning(served_model_dir, served_de_fr_dir,
                                                                             tmp_path, capsys, caplog, replaced):
    """The other pair's weights (the same shapes), or a tokenizer of the same size with other ids, copied over a
    folder that has a manifest: the translations change without an error, so the loader names the file."""
    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    write_manifest(folder)  # as every command that writes a folder whole leaves it
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.checkpoints"):
        TranslationEngine(folder, device="cpu")
    assert not caplog.records  # the folder as written: nothing to say
    before = translate(*load_model_and_tokenizer(str(folder), "cpu"), SENTENCES[:4])
    if replaced == "model.safetensors":
        shutil.copyfile(f"{served_de_fr_dir}/model.safetensors", folder / "model.safetensors")
    else:
        other_tokenizer(tmp_path / "other")
        shutil.copyfile(tmp_path / "other" / "tokenizer.json", folder / "tokenizer.json")
    assert translate(*load_model_and_tokenizer(str(folder), "cpu"), SENTENCES[:4]) != before  # a silent change
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.checkpoints"):
        served, translated = open_in_serve_and_translate(folder, tmp_path, capsys)
    assert served == "" and translated == ""  # loaded
    warnings = [record.getMessage() for record in caplog.records]
    assert len(warnings) == 2, warnings  # one from serve's engine, one from translate
    for warning in warnings:
        assert warning.startswith(f"{folder / replaced} is not the file this folder was written with"), warning


def test_decoding_settings_edited_in_generation_config_are_no_warning(served_model_dir, tmp_path, caplog):
    """generation_config.json is there to be edited (docs/train.md): a folder with a manifest, its beam changed."""
    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    write_manifest(folder)
    settings = json.loads((folder / "generation_config.json").read_text(encoding="utf-8"))
    settings["num_beams"] = 3
    (folder / "generation_config.json").write_text(json.dumps(settings), encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="vanilla_transformer.checkpoints"):
        TranslationEngine(folder, device="cpu")
    assert not caplog.records
