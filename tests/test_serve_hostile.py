"""`vanilla-transformer serve` used as a hostile client or operator would: the model's files changed under a running
server, input that makes parsers fail or take quadratic time, forged log lines and proxy headers, options out of
range, SIGTERM right after requests arrive, and public answers that would show the server's files."""

import shutil

import pytest
from serve_fixtures import SENTENCES

pytest.importorskip("fastapi")
pytest.importorskip("sentencex")

from vanilla_transformer.serve.engine import TranslationEngine  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# The files under a running server


def mapped_files() -> str:
    with open("/proc/self/maps", encoding="utf-8") as maps:
        return maps.read()


@pytest.mark.parametrize("change", ["overwritten", "truncated"])
def test_a_checkpoint_changed_on_disk_changes_no_answer_of_a_running_engine(change, served_model_dir, tmp_path):
    import gc
    import os

    import torch

    folder = tmp_path / "model"
    shutil.copytree(served_model_dir, folder)
    engine = TranslationEngine(folder, source_lang="en", target_lang="de")
    before = engine.translate(SENTENCES)
    gc.collect()
    weights = folder / "model.safetensors"
    if os.path.exists("/proc/self/maps"):
        assert str(weights) not in mapped_files()  # the weights are the process's own memory
    if change == "overwritten":  # other weights, written in place (the same inode, as `cp` does)
        from safetensors.torch import load_file, save_file

        state = load_file(weights)
        torch.manual_seed(1)
        other = {name: torch.randn_like(tensor) if tensor.is_floating_point() else tensor
                 for name, tensor in state.items()}
        save_file(other, tmp_path / "other.safetensors", metadata={"format": "pt"})
        with open(weights, "r+b") as file:
            file.write((tmp_path / "other.safetensors").read_bytes())
        assert TranslationEngine(folder, source_lang="en", target_lang="de").translate(SENTENCES) != before
    else:
        with open(weights, "r+b") as file:
            file.truncate(100)
    assert engine.translate(SENTENCES) == before  # a truncated mapped file would be SIGBUS here
