"""The declared transformers range, across versions: a folder saved under one transformers loads and translates under
another (remote code, package not importable), and a transformers outside the range stops with one line.

The cross-version tests need a second interpreter, so they run where CI provides one (its floor job):
    VT_OTHER_PYTHON   a Python whose environment has another transformers release of the range
    VT_BELOW_FLOOR_PYTHON  a Python whose environment has a transformers release older than the floor (torch is
                           not needed: the check comes first)
"""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import transformers
from transformers import pipeline

from helpers import HIDE_PACKAGE, REPO_ROOT
from translation_fixtures import GERMAN, tiny_tokenizer, tiny_translator
from vanilla_transformer.configuration_vanilla_transformer import SUPPORTED_TRANSFORMERS, check_transformers_version

# Run with `python -I` from an empty folder: neither the repository nor PYTHONPATH is on sys.path, and our packages are
# refused in case they are installed in that environment (`pip install -e .` in CI). argv: folder, resave folder
# (or ""), texts as JSON.
TRANSLATE_SCRIPT = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import json, sys

    import torch
    import transformers
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    folder, resave, texts = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
    translator = pipeline("translation", model=folder, trust_remote_code=True)
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        greedy = tokenizer.batch_decode(model.generate(**inputs, num_beams=1, max_new_tokens=8),
                                        skip_special_tokens=True)
        one_by_one = [tokenizer.decode(model.generate(**tokenizer(text, return_tensors="pt"), max_new_tokens=8)[0],
                                       skip_special_tokens=True) for text in texts]
        logits = model(**inputs, decoder_input_ids=inputs["input_ids"][:, :6]).logits
    if resave:
        model.save_pretrained(resave)
        tokenizer.save_pretrained(resave)
    print(json.dumps({"transformers": transformers.__version__, "model_module": type(model).__module__,
                      "dtype": str(model.dtype),
                      "pipeline": [item["translation_text"] for item in translator(texts, max_new_tokens=8)],
                      "generate_one_by_one": one_by_one, "greedy": greedy, "logits": logits.tolist()}))
    '''
)


def _fresh(python, folder, resave, texts, tmp_path):
    workdir = tmp_path / "empty"
    workdir.mkdir(exist_ok=True)
    script = tmp_path / "translate_saved_folder.py"
    script.write_text(TRANSLATE_SCRIPT)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_MODULES_CACHE=str(tmp_path / f"modules-{os.path.basename(python)}-{len(os.listdir(tmp_path))}"),
               HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([python, "-I", str(script), str(folder), str(resave or ""), json.dumps(texts)], cwd=workdir,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_the_version_check_accepts_the_declared_range_only():
    (low_major, low_minor), (high_major, _) = SUPPORTED_TRANSFORMERS
    check_transformers_version(transformers.__version__)  # the running one is in the range
    for inside in (f"{low_major}.{low_minor}.0", f"{low_major}.{low_minor + 7}.2", f"{low_major}.99.0.dev0"):
        check_transformers_version(inside)
    for outside in ("4.57.1", f"{low_major}.{low_minor - 1}.3", f"{high_major}.0.0", "unknown"):
        with pytest.raises(ImportError) as caught:
            check_transformers_version(outside)
        message = str(caught.value)
        assert "\n" not in message
        assert f"transformers {outside} is installed" in message
        assert f"transformers>={low_major}.{low_minor},<{high_major}" in message


@pytest.mark.slow  # fresh interpreters
@pytest.mark.skipif(not os.environ.get("VT_OTHER_PYTHON"),
                    reason="VT_OTHER_PYTHON (a Python with another transformers of the range) is not set; CI's floor "
                           "job sets it")
def test_a_folder_saved_under_one_transformers_translates_under_the_other_both_ways(tmp_path):
    """Both ways, the other side computes the same logits, greedy and beam-search translations as the model saved, and
    its pipeline gives what its own `generate` gives."""
    other_python = os.environ["VT_OTHER_PYTHON"]
    # float64, so that a different attention kernel on the other side cannot flip a near-tie in argmax
    model, tokenizer = tiny_translator(seed=6).double(), tiny_tokenizer()
    texts = GERMAN[3:6]
    ours = tmp_path / "saved-here"
    model.save_pretrained(ours)
    tokenizer.save_pretrained(ours)
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    expected = [item["translation_text"] for item in pipeline("translation", model=model, tokenizer=tokenizer)(
        texts, max_new_tokens=8)]  # the model's beam search (4 beams, length penalty 0.6)
    with torch.no_grad():
        expected_greedy = tokenizer.batch_decode(model.generate(**inputs, num_beams=1, max_new_tokens=8),
                                                 skip_special_tokens=True)
        expected_logits = model(**inputs, decoder_input_ids=inputs["input_ids"][:, :6]).logits

    theirs = tmp_path / "saved-there"
    there = _fresh(other_python, ours, theirs, texts, tmp_path)  # saved here, loaded there; saved there
    back = _fresh(sys.executable, theirs, None, texts, tmp_path)  # saved there, loaded here
    assert there["transformers"] != transformers.__version__, "VT_OTHER_PYTHON runs the same transformers"
    assert back["transformers"] == transformers.__version__
    assert there["dtype"] == back["dtype"] == "torch.float64"
    for side in (there, back):
        assert side["model_module"].startswith("transformers_modules.")  # the folder's copy of our code
        torch.testing.assert_close(torch.tensor(side["logits"], dtype=torch.float64), expected_logits)
        assert side["greedy"] == expected_greedy
        assert side["pipeline"] == side["generate_one_by_one"] == expected
        assert len(set(" ".join(side["pipeline"]).split())) > 1  # not one token repeated: the comparison can fail


@pytest.mark.slow  # fresh interpreters
@pytest.mark.skipif(not os.environ.get("VT_BELOW_FLOOR_PYTHON"),
                    reason="VT_BELOW_FLOOR_PYTHON (a Python with a transformers older than the floor) is not set; CI's "
                           "floor job sets it")
def test_a_transformers_below_the_floor_stops_import_and_remote_code_with_one_line(tmp_path):
    old_python = os.environ["VT_BELOW_FLOOR_PYTHON"]
    folder = tmp_path / "saved"
    tiny_translator(seed=7).save_pretrained(folder)
    (low_major, low_minor), (high_major, _) = SUPPORTED_TRANSFORMERS
    required = f"transformers>={low_major}.{low_minor},<{high_major}"
    for code in (
        f"import sys; sys.path.insert(0, {str(REPO_ROOT)!r}); import vanilla_transformer",
        # without the package, as a Hub user: the saved config file stops the load
        f"from transformers import AutoConfig; AutoConfig.from_pretrained({str(folder)!r}, trust_remote_code=True)",
    ):
        result = subprocess.run([old_python, "-I", "-c", code], cwd=tmp_path, capture_output=True, text=True,
                                timeout=300, stdin=subprocess.DEVNULL,
                                env={**os.environ, "HF_MODULES_CACHE": str(tmp_path / "modules"), "HF_HUB_OFFLINE": "1"})
        assert result.returncode != 0
        last = result.stderr.strip().splitlines()[-1]
        assert last.startswith("ImportError: vanilla-transformer needs " + required), result.stderr[-2000:]
        assert "but transformers 5." in last and "is installed" in last
