"""Folders saved by earlier versions keep working: tests/fixtures/saved_by_version_0_1/ holds a folder saved by
version 0.1's model files (tests/fixtures/make_folder_saved_by_version_0_1.py writes it), with what that version
computed for three sentences. Loaded with the package under test, and with the folder's own remote code in an
interpreter without the package, it computes the same logits and the same greedy and beam-search token ids."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vanilla_transformer
from helpers import HIDE_PACKAGE, REPO_ROOT

FIXTURE = REPO_ROOT / "tests" / "fixtures" / "saved_by_version_0_1"
EXPECTED = json.loads((FIXTURE / "expected.json").read_text())


def outputs_of(model, tokenizer) -> dict:
    """What `expected.json` holds, computed by `model`."""
    inputs = tokenizer(EXPECTED["texts"], return_tensors="pt", padding=True)
    with torch.no_grad():
        greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10)
        beam = model.generate(**inputs, max_new_tokens=10)
        logits = model(**inputs, decoder_input_ids=inputs["input_ids"][:, :5]).logits
    return {"greedy": greedy.tolist(), "beam": beam.tolist(), "logits_first_8": logits[..., :8].tolist(),
            "logits_logsumexp": logits.logsumexp(-1).tolist(), "logits_argmax": logits.argmax(-1).tolist()}


def assert_same_as_when_saved(outputs: dict) -> None:
    assert outputs["greedy"] == EXPECTED["greedy"]
    assert outputs["beam"] == EXPECTED["beam"]
    assert outputs["logits_argmax"] == EXPECTED["logits_argmax"]
    for key in ("logits_first_8", "logits_logsumexp"):
        torch.testing.assert_close(torch.tensor(outputs[key]), torch.tensor(EXPECTED[key]))


def test_the_fixture_can_tell_models_apart():
    assert EXPECTED["made_at"] == "1852522"
    assert len({token for row in EXPECTED["greedy"] for token in row[1:]}) > 3  # not one repeated token
    assert EXPECTED["greedy"] != EXPECTED["beam"]


def test_a_folder_saved_by_version_0_1_loads_and_translates_identically_with_the_package(tmp_path):
    folder = tmp_path / "saved"
    shutil.copytree(FIXTURE, folder)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder).eval()
    assert type(model) is vanilla_transformer.VanillaTransformerForConditionalGeneration  # the package's class, not the folder's
    assert_same_as_when_saved(outputs_of(model, AutoTokenizer.from_pretrained(folder)))

    # saved again by the package: the remote code it writes includes compat.py, and it still computes the same
    model.save_pretrained(tmp_path / "resaved")
    AutoTokenizer.from_pretrained(folder).save_pretrained(tmp_path / "resaved")
    assert (tmp_path / "resaved" / "compat.py").is_file()
    again = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "resaved").eval()
    assert_same_as_when_saved(outputs_of(again, AutoTokenizer.from_pretrained(tmp_path / "resaved")))


FRESH = HIDE_PACKAGE + textwrap.dedent(
    '''
    import json, sys

    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    folder = sys.argv[1]
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    texts = json.loads(open(folder + "/expected.json").read())["texts"]
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        greedy = model.generate(**inputs, num_beams=1, max_new_tokens=10)
        beam = model.generate(**inputs, max_new_tokens=10)
        logits = model(**inputs, decoder_input_ids=inputs["input_ids"][:, :5]).logits
    print(json.dumps({"module": type(model).__module__, "greedy": greedy.tolist(), "beam": beam.tolist(),
                      "logits_first_8": logits[..., :8].tolist(), "logits_logsumexp": logits.logsumexp(-1).tolist(),
                      "logits_argmax": logits.argmax(-1).tolist()}))
    '''
)


@pytest.mark.slow  # a fresh interpreter
@pytest.mark.parametrize("resaved", [False, True], ids=["as-saved", "resaved-by-the-package"])
def test_a_folder_saved_by_version_0_1_translates_identically_with_its_own_remote_code(tmp_path, resaved):
    folder = tmp_path / "saved"
    if resaved:  # the package's remote code (compat.py included) written by its save_pretrained
        AutoModelForSeq2SeqLM.from_pretrained(FIXTURE).save_pretrained(folder)
        AutoTokenizer.from_pretrained(FIXTURE).save_pretrained(folder)
        shutil.copy(FIXTURE / "expected.json", folder)
    else:
        shutil.copytree(FIXTURE, folder)
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", str(script), str(folder)], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    assert outputs["module"].startswith("transformers_modules.")  # the folder's own copy of the code
    assert_same_as_when_saved(outputs)
