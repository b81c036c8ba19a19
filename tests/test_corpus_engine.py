"""`translate --input` on a PyTorch folder: the automatic CTranslate2 export into a cache, and the PyTorch path.

The oracle of the translations is the PyTorch path itself (`--engine pytorch`, our model's `generate`), run on the same
files; the cache is checked on disk (entries, manifests, modification times) and by counting exports."""

import json
import os

import pytest

pytest.importorskip("ctranslate2")

from test_files_safety import run_forked  # noqa: E402

import vanilla_transformer.cli.translate as translate_command  # noqa: E402
import vanilla_transformer.interop.ctranslate2_cache as cache  # noqa: E402
from helpers import run_main  # noqa: E402
from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer, tiny_translator  # noqa: E402
from vanilla_transformer.cli.main import main  # noqa: E402

LINES = [*ENGLISH, "", *GERMAN, "Two dogs.", *ENGLISH[::-1]]  # a blank line stays blank


@pytest.fixture(autouse=True)
def small_corpus_and_own_cache(monkeypatch, tmp_path):
    """A corpus of a few lines counts as one here, and the cache is this test's own."""
    from huggingface_hub import constants as hub_constants

    monkeypatch.setattr(translate_command, "AUTO_EXPORT_LINES", 10)
    monkeypatch.setattr(hub_constants, "HF_HOME", str(tmp_path / "hf-home"))


def save_folder(path, seed: int = 0, **overrides) -> str:
    model = tiny_translator(seed=seed, **overrides)
    model.generation_config.max_length = 24
    model.save_pretrained(path)
    tiny_tokenizer().save_pretrained(path)
    return str(path)


@pytest.fixture
def folder(tmp_path):
    return save_folder(tmp_path / "model")


@pytest.fixture
def corpus(tmp_path):
    path = tmp_path / "in.en"
    path.write_text("".join(line + "\n" for line in LINES), encoding="utf-8")
    return path


def translate(folder, source, target, capsys, *options):
    code, out, err = run_main(main, ["translate", "--model", str(folder), "--input", str(source), "--output",
                                     str(target), "--num-beams", "1", "--no-progress", *options], capsys)
    return code, err


def entries():
    root = cache.cache_root()
    return sorted(name for name in os.listdir(root) if not name.startswith(".")) if os.path.isdir(root) else []


@pytest.fixture
def exports(monkeypatch):
    """The number of exports `cached_export` made."""
    made = []
    real = cache.to_ctranslate2
    monkeypatch.setattr(cache, "to_ctranslate2", lambda *args, **kwargs: made.append(args) or real(*args, **kwargs))
    return made


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_corpus_is_exported_once_and_translated_as_pytorch_translates_it(seed, tmp_path, corpus, capsys, exports):
    folder = save_folder(tmp_path / f"model{seed}", seed=seed)
    code, err = translate(folder, corpus, tmp_path / "torch.de", capsys, "--engine", "pytorch")
    assert code == 0, err
    assert "CTranslate2" not in err and not entries() and not exports  # --engine pytorch: the old path, no export

    code, err = translate(folder, corpus, tmp_path / "ct2.de", capsys)
    assert code == 0, err
    [entry] = entries()
    assert err.count("\n") == 1 and f"Translating with CTranslate2: {folder} exported now to the cache" in err, err
    assert os.path.join(cache.cache_root(), entry) in err
    assert len(exports) == 1
    expected = (tmp_path / "torch.de").read_text(encoding="utf-8")
    assert (tmp_path / "ct2.de").read_text(encoding="utf-8") == expected
    assert expected.count("\n") == len(LINES) and expected.splitlines()[len(ENGLISH)] == ""

    model_bin = os.path.join(cache.cache_root(), entry, "model.bin")
    written = os.stat(model_bin).st_mtime_ns
    code, err = translate(folder, corpus, tmp_path / "again.de", capsys)
    assert code == 0, err
    assert "exported in the cache" in err and len(exports) == 1  # the second run reuses the entry
    assert os.stat(model_bin).st_mtime_ns == written and entries() == [entry]
    assert (tmp_path / "again.de").read_text(encoding="utf-8") == expected


@pytest.mark.parametrize("limit, overrides", [(64, {}), (32, {"position_embedding_type": "learned",
                                                                 "max_position_embeddings": 32})])
def test_lines_longer_than_the_model_reads_are_cut_alike_by_both_engines(limit, overrides, tmp_path, capsys, exports):
    """A line past the tokens the model reads (the tokenizer's 64; learned positions' 32) is cut to them by either
    engine, with the same warning, and the translations agree (CTranslate2 would refuse the whole batch for a
    source past its position table, and our model would attend over all of it)."""
    folder = save_folder(tmp_path / "model", **overrides)
    long_lines = [" ".join(ENGLISH) * 3, " ".join(GERMAN * 40)]
    source = tmp_path / "long.en"
    source.write_text("".join(line + "\n" for line in [*LINES[:3], long_lines[0], *LINES[3:], long_lines[1]]),
                      encoding="utf-8")
    code, torch_err = translate(folder, source, tmp_path / "torch.de", capsys, "--engine", "pytorch")
    assert code == 0, torch_err
    code, err = translate(folder, source, tmp_path / "ct2.de", capsys)
    assert code == 0, err
    assert len(exports) == 1 and "Translating with CTranslate2" in err
    warnings = [line for line in torch_err.splitlines() if f"longer than the {limit} tokens the model reads" in line]
    assert len(warnings) == 1 and warnings[0].startswith("Lines 4 (") and f", {len(LINES) + 2} (" in warnings[0]
    assert [line for line in err.splitlines() if "longer than" in line] == warnings
    assert (tmp_path / "ct2.de").read_text(encoding="utf-8") == (tmp_path / "torch.de").read_text(encoding="utf-8")


def test_a_few_lines_and_sentence_arguments_stay_with_pytorch(folder, tmp_path, capsys, exports):
    few = tmp_path / "few.en"
    few.write_text("".join(line + "\n" for line in ENGLISH), encoding="utf-8")  # under AUTO_EXPORT_LINES
    code, err = translate(folder, few, tmp_path / "few.de", capsys)
    assert code == 0, err
    code, out, err = run_main(main, ["translate", "--model", folder, *ENGLISH, "--num-beams", "1"], capsys)
    assert code == 0, err
    assert not exports and not entries() and "CTranslate2" not in err


@pytest.mark.parametrize("seed", ["0", "3"])
def test_sampling_keeps_pytorch_so_the_input_s_size_never_changes_the_draws(folder, tmp_path, corpus, capsys,
                                                                              exports, seed):
    sampling = ["--sampling-topk", "5", "--seed", seed]
    code, err = translate(folder, corpus, tmp_path / "torch.de", capsys, "--engine", "pytorch", *sampling)
    assert code == 0, err
    code, err = translate(folder, corpus, tmp_path / "auto.de", capsys, *sampling)
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("Translating with PyTorch: sampling draws other tokens"), err
    assert not exports and not entries()
    assert (tmp_path / "auto.de").read_bytes() == (tmp_path / "torch.de").read_bytes()


def test_a_changed_folder_is_exported_again_and_a_copy_finds_the_same_entry(folder, tmp_path, corpus, capsys,
                                                                             exports):
    import shutil

    assert translate(folder, corpus, tmp_path / "a.de", capsys)[0] == 0
    copy = shutil.copytree(folder, tmp_path / "copy")
    assert translate(copy, corpus, tmp_path / "b.de", capsys)[0] == 0
    assert len(exports) == 1 and len(entries()) == 1  # same files, same entry
    save_folder(copy, seed=5)  # retrained in place
    assert translate(copy, corpus, tmp_path / "c.de", capsys)[0] == 0
    assert len(exports) == 2 and len(entries()) == 2


def test_a_damaged_entry_is_exported_again_with_one_line(folder, tmp_path, corpus, capsys, exports):
    assert translate(folder, corpus, tmp_path / "a.de", capsys)[0] == 0
    [entry] = entries()
    model_bin = os.path.join(cache.cache_root(), entry, "model.bin")
    with open(model_bin, "r+b") as f:  # cut short
        f.truncate(os.path.getsize(model_bin) // 2)
    code, err = translate(folder, corpus, tmp_path / "b.de", capsys)
    assert code == 0, err
    assert "is damaged" in err and "exported now" in err and len(exports) == 2
    assert (tmp_path / "b.de").read_text() == (tmp_path / "a.de").read_text()
    assert cache.entry_is_whole(os.path.join(cache.cache_root(), entry))


# the export's file-system events under the cache's staging folder: 3 its folder made, 5 model.bin opened, 12 the
# manifest (written last) opened, 14 the rename of the whole folder into place
@pytest.mark.parametrize("kill_at", [3, 5, 12, 14])
def test_an_export_killed_midway_leaves_no_entry_and_the_next_run_exports_whole(kill_at, folder, tmp_path, corpus,
                                                                                capsys, exports):
    argv = ["translate", "--model", folder, "--input", str(corpus), "--output", str(tmp_path / "a.de"),
            "--num-beams", "1", "--no-progress"]
    status, err = run_forked(lambda: main(argv), kill_at=kill_at, watch="staging")
    assert status == -9, err  # killed while the export was being written
    assert entries() == []  # no entry, only the hidden staging folder
    assert any(name.startswith(".") and "staging" in name for name in os.listdir(cache.cache_root()))
    code, err = translate(folder, corpus, tmp_path / "a.de", capsys)
    assert code == 0, err
    assert "exported now" in err and len(exports) == 1
    [entry] = entries()
    assert cache.entry_is_whole(os.path.join(cache.cache_root(), entry))
    assert not any(name.startswith(".") for name in os.listdir(cache.cache_root()))  # the staging folder removed


def test_a_folder_ctranslate2_cannot_express_falls_back_to_pytorch_with_one_line(tmp_path, corpus, capsys, exports):
    folder = save_folder(tmp_path / "narrow", attention_key_dim=4)  # queries and keys narrower than the values
    code, err = translate(folder, corpus, tmp_path / "out.de", capsys)
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith(f"Translating with PyTorch: {folder} cannot be exported to "
                                                   "CTranslate2 (attention_key_dim=4"), err
    assert not exports and not entries()
    code, err = translate(folder, corpus, tmp_path / "torch.de", capsys, "--engine", "pytorch")
    assert code == 0 and err == "", err
    assert (tmp_path / "out.de").read_text() == (tmp_path / "torch.de").read_text()


def test_a_failed_export_falls_back_to_pytorch_with_one_line(folder, tmp_path, corpus, capsys, monkeypatch):
    from vanilla_transformer.interop.export_ctranslate2 import ExportError

    def refuse(*args, **kwargs):
        raise ExportError("The eos_token (id 999) is outside the target vocabulary of 12 tokens.")

    monkeypatch.setattr(cache, "to_ctranslate2", refuse)
    code, err = translate(folder, corpus, tmp_path / "out.de", capsys)
    assert code == 0, err
    assert err.count("\n") == 1 and "Translating with PyTorch" in err and "eos_token (id 999)" in err, err
    record_free = tmp_path / "out.de"
    assert record_free.read_text().count("\n") == len(LINES)


def test_a_resumed_run_is_never_translated_by_two_engines(folder, tmp_path, corpus, capsys, monkeypatch):
    """A run killed after its first chunk (CTranslate2) and resumed with --engine pytorch is refused in one line;
    resumed as it was, it continues; the finished file equals one PyTorch run's."""
    import vanilla_transformer.translate as translation

    monkeypatch.setattr(translation, "CHUNK_SIZE", 4)
    argv = ["translate", "--model", folder, "--input", str(corpus), "--output", str(tmp_path / "out.de"),
            "--num-beams", "1", "--no-progress"]
    status, err = run_forked(lambda: main(argv), kill_at=5, watch=".progress.json.tmp")
    assert status == -9, err
    record = json.loads((tmp_path / "out.de.progress.json").read_text())
    assert record["lines"] == 4, record
    code, out, err = run_main(main, [*argv, "--engine", "pytorch"], capsys)
    assert code == 2 and err.count("error:") == 1 and not err.strip().splitlines()[-1].startswith(" "), err
    assert "translated its first 4 lines with CTranslate2, and this run would translate with PyTorch" in err
    assert "continue with --engine auto" in err
    code, out, err = run_main(main, argv, capsys)  # as it was
    assert code == 0, err
    assert not (tmp_path / "out.de.progress.json").exists()
    code, err = translate(folder, corpus, tmp_path / "torch.de", capsys, "--engine", "pytorch")
    assert code == 0, err
    assert (tmp_path / "out.de").read_text() == (tmp_path / "torch.de").read_text()


def test_a_pytorch_run_resumed_by_the_automatic_engine_is_refused(folder, tmp_path, corpus, capsys, monkeypatch):
    import vanilla_transformer.translate as translation

    monkeypatch.setattr(translation, "CHUNK_SIZE", 4)
    argv = ["translate", "--model", folder, "--input", str(corpus), "--output", str(tmp_path / "out.de"),
            "--num-beams", "1", "--no-progress"]
    status, err = run_forked(lambda: main([*argv, "--engine", "pytorch"]), kill_at=5, watch=".progress.json.tmp")
    assert status == -9, err
    code, out, err = run_main(main, argv, capsys)
    assert code == 2 and err.count("error:") == 1 and not err.strip().splitlines()[-1].startswith(" "), err
    assert "with PyTorch, and this run would translate with CTranslate2" in err and "--engine pytorch" in err
    code, out, err = run_main(main, [*argv, "--engine", "pytorch"], capsys)
    assert code == 0, err


def test_without_ctranslate2_a_corpus_is_translated_by_pytorch_with_one_line(folder, tmp_path, corpus, capsys,
                                                                              monkeypatch):
    import vanilla_transformer.interop.ctranslate2_runtime as runtime
    from vanilla_transformer.extras import missing_extra

    def missing(*args, **kwargs):
        raise missing_extra("Translating with CTranslate2", ["ctranslate2"], "fast")

    monkeypatch.setattr(runtime, "import_ctranslate2", missing)
    code, err = translate(folder, corpus, tmp_path / "out.de", capsys)
    assert code == 0, err
    assert err.count("\n") == 1 and err.startswith("Translating with PyTorch (install CTranslate2"), err
    assert not entries()
    code, err = translate(folder, corpus, tmp_path / "torch.de", capsys, "--engine", "pytorch")
    assert code == 0 and (tmp_path / "out.de").read_text() == (tmp_path / "torch.de").read_text()


def test_compute_type_int8_exports_int8_weights_in_their_own_entry(folder, tmp_path, corpus, capsys, exports):
    assert translate(folder, corpus, tmp_path / "f32.de", capsys)[0] == 0
    code, err = translate(folder, corpus, tmp_path / "int8.de", capsys, "--compute-type", "int8")
    assert code == 0, err
    assert len(exports) == 2 and [args[2] for args in exports] == ["float32", "int8"]
    float32, int8 = (os.path.getsize(os.path.join(args[1], "model.bin")) for args in exports)
    assert len(entries()) == 2 and int8 < 0.75 * float32, (int8, float32)  # a tiny model's tables stay float32
    assert (tmp_path / "int8.de").read_text().count("\n") == len(LINES)


def test_a_bad_input_file_is_still_one_line_from_the_translation(folder, tmp_path, capsys, exports):
    bad = tmp_path / "bad.en"
    bad.write_bytes(b"fine\n" * 20 + b"\xff\xfe broken\n")
    code, err = translate(folder, bad, tmp_path / "out.de", capsys)
    assert code == 1 and err.count("\n") == 1 and "UTF-8" in err, err
    assert not exports


def test_standard_input_counts_as_a_corpus(folder, tmp_path, capsys, monkeypatch, exports):
    import io

    text = "".join(line + "\n" for line in ENGLISH[:2])  # few lines, but a pipe cannot be counted before it is read
    monkeypatch.setattr("sys.stdin", io.StringIO(text))
    code, out, err = run_main(main, ["translate", "--model", folder, "--input", "-", "--num-beams", "1",
                                     "--no-progress"], capsys)
    assert code == 0, err
    assert "Translating with CTranslate2" in err and len(exports) == 1
    code, torch_out, err = run_main(main, ["translate", "--model", folder, *ENGLISH[:2], "--num-beams", "1"], capsys)
    assert code == 0 and out == torch_out, err


def test_an_entry_another_process_finished_first_is_used(folder, tmp_path, corpus, capsys, monkeypatch):
    """Two runs export the same entry at once: the one that finds the other's whole entry in place uses it."""
    from vanilla_transformer.files.errors import OutputError

    real = cache.to_ctranslate2

    def raced(checkpoint, entry, quantization):
        real(checkpoint, entry, quantization)  # the other process's export, finished first
        raise OutputError(f"{entry} is not empty")  # what this one's final check then finds

    monkeypatch.setattr(cache, "to_ctranslate2", raced)
    code, err = translate(folder, corpus, tmp_path / "out.de", capsys)
    assert code == 0, err
    assert "Translating with CTranslate2" in err and len(entries()) == 1
