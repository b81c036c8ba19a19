"""No noise for nothing: the everyday calls print no warning, neither a Python warning nor a transformers log record.

- `generate(max_new_tokens=...)`: the generation config holds a `max_length` (the default for calls that ask for no
  length), and transformers warns that both are set whenever a model's config holds one; ours does not let it.
- A `trust_remote_code` load of a saved folder in an interpreter without our package, and a translation with it.
"""

import contextlib
import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from transformers import pipeline

from helpers import HIDE_PACKAGE, random_batch, tiny_model
from translation_fixtures import GERMAN, tiny_tokenizer, tiny_translator


class Collect(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.WARNING)
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


@contextlib.contextmanager
def no_warning_allowed():
    """Fails on any Python warning; yields the list of transformers' warning log records (to be checked empty)."""
    handler = Collect()
    library_logger = logging.getLogger("transformers")  # transformers' loggers send their records here
    library_logger.addHandler(handler)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            yield handler.messages
    finally:
        library_logger.removeHandler(handler)


def test_generate_with_max_new_tokens_warns_about_nothing():
    model = tiny_model(3)
    input_ids, attention_mask = random_batch(3)
    assert model.generation_config.max_length is not None  # the default for calls that ask for no length stays
    with no_warning_allowed() as messages, torch.no_grad():
        beam = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5)
        greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, num_beams=1)
        unbounded = model.generate(input_ids=input_ids, attention_mask=attention_mask)  # up to the config's max_length
    assert messages == []
    assert beam.shape[1] <= 6 and greedy.shape[1] == 6
    assert unbounded.shape[1] <= model.generation_config.max_length

    # the filter is narrow: a call that sets both lengths itself is still told
    with no_warning_allowed() as messages, torch.no_grad():
        model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5, max_length=9)
    assert len(messages) == 1 and "max_new_tokens" in messages[0] and "max_length" in messages[0]


def test_the_translation_pipeline_with_max_new_tokens_warns_about_nothing():
    translator = pipeline("translation", model=tiny_translator(seed=4), tokenizer=tiny_tokenizer())
    with no_warning_allowed() as messages:
        results = translator(GERMAN[:2], max_new_tokens=6)
        translator(GERMAN[2], max_new_tokens=6)
    assert messages == []
    assert len(results) == 2 and all(result["translation_text"] for result in results)


FRESH = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import json, logging, sys, warnings

    messages = []


    class Collect(logging.Handler):
        def emit(self, record):
            messages.append(record.getMessage())


    logging.getLogger("transformers").addHandler(Collect(level=logging.WARNING))
    warnings.simplefilter("always")
    with warnings.catch_warnings(record=True) as caught:
        import torch
        from transformers import AutoConfig, AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

        folder = sys.argv[1]
        AutoConfig.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
        inputs = tokenizer(json.loads(sys.argv[2]), return_tensors="pt", padding=True)
        with torch.no_grad():
            ids = model.generate(**inputs, max_new_tokens=6)
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        texts = [item["translation_text"] for item in translator(json.loads(sys.argv[2]), max_new_tokens=6)]
    print(json.dumps({"module": type(model).__module__, "logged": messages, "texts": texts,
                      "warnings": [f"{w.category.__name__}: {w.message}" for w in caught]}))
    '''
)


@pytest.mark.slow  # a fresh interpreter
def test_a_trust_remote_code_load_and_translation_warn_about_nothing(tmp_path):
    folder = tmp_path / "saved"
    tiny_translator(seed=5).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    script = tmp_path / "fresh.py"
    script.write_text(FRESH)
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    result = subprocess.run([sys.executable, "-I", str(script), str(folder), json.dumps(GERMAN[:2])], cwd=tmp_path,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    outputs = json.loads(result.stdout.strip().splitlines()[-1])
    assert outputs["module"].startswith("transformers_modules.")  # the folder's own code ran
    assert outputs["logged"] == [] and outputs["warnings"] == []
    assert "[transformers]" not in result.stderr, result.stderr[-2000:]
    assert len(outputs["texts"]) == 2
