"""No runaway outputs: `generate`, `pipeline("translation")`, `translate`, the CTranslate2 engine and `serve` bound each
translation by its source's length, at most int(a * n + b) tokens (</s> included) for a source of n tokens, by default
(a = 2, b = 10, fairseq's --max-len-a / --max-len-b).

The model under test never ends a sentence by itself (its final_logits_bias holds </s> at -1e4), as an untrained or
out-of-domain model may not: without the bound every output runs to the generation config's maximum, with it each row
ends exactly at its own bound, which the tests count by hand from the source's attention mask. The oracles: those
counts; transformers' own `GenerationMixin.generate` (the bound off must give exactly its output); each sentence
alone against the batch, the cache against recomputation; transformers' own length cut (`max_new_tokens`) for the
translations of `translate`, CTranslate2 and the server; a fresh interpreter without this package.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from transformers import AutoModelForSeq2SeqLM, GenerationConfig, GenerationMixin, pipeline

from helpers import HIDE_PACKAGE, random_batch
from translation_fixtures import GERMAN, saved_with_export, tiny_tokenizer, tiny_translator
from vanilla_transformer.modeling_vanilla_transformer import MAX_LENGTH_A, MAX_LENGTH_B
from vanilla_transformer.serve.engine import TranslationEngine
from vanilla_transformer.serve.settings import ServeSettings
from vanilla_transformer.translate import load_model_and_tokenizer, translate

MAX_LENGTH = 80  # the generation config's maximum: where a runaway output stops without the bound
# sentences of different lengths; the one in mixed case is many more tokens than its words (an ALL-CAPS one would
# be recased, casing.py)
TEXTS = [GERMAN[4], GERMAN[1], "zWeI hUnDe SpIeLeN iM sChNeE.", GERMAN[5], "Ja."]
DECODINGS = {"greedy": dict(num_beams=1), "sampling": dict(do_sample=True, top_k=0, num_beams=1),
             "beam 4": dict(num_beams=4), "beam 4, no early stop": dict(num_beams=4, early_stopping=False)}


def runaway_translator(seed: int = 0):
    """A tiny random translator (float64: batched and single sentences cannot flip a near-tie) that never emits </s>."""
    model = tiny_translator(seed=seed, add_final_logits_bias=True, max_position_embeddings=256).double()
    with torch.no_grad():
        model.final_logits_bias[0, model.config.eos_token_id] = -1e4
    model.generation_config.max_length = MAX_LENGTH
    return model


@pytest.fixture(scope="module")
def model():
    return runaway_translator()


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def bounds(attention_mask, a: float = MAX_LENGTH_A, b: float = MAX_LENGTH_B) -> list[int]:
    """Each row's bound, by hand: int(a * n + b) for the n tokens its mask holds."""
    return [int(a * n + b) for n in attention_mask.sum(-1).tolist()]


def lengths(sequences, eos: int) -> list[int]:
    """The tokens each output row holds after the decoder start token, up to and with its first </s>."""
    rows = sequences[:, 1:].tolist()
    return [row.index(eos) + 1 if eos in row else len(row) for row in rows]


def tokens(sequence, eos: int) -> list[int]:
    """One output row's tokens after the decoder start token, up to and with its first </s>."""
    row = sequence[1:].tolist()
    return row[: row.index(eos) + 1] if eos in row else row


def mixed_batch(model, seed: int):
    return random_batch(seed, vocab_size=model.config.vocab_size, batch=5, length=12)


# ---------------------------------------------------------------------------------------------------------------
# generate


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("decoding", list(DECODINGS))
def test_each_row_ends_at_its_own_sources_bound(model, decoding, seed):
    input_ids, attention_mask = mixed_batch(model, seed)
    eos = model.config.eos_token_id
    torch.manual_seed(seed)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, **DECODINGS[decoding])
    assert lengths(out, eos) == bounds(attention_mask)  # the default: 2n + 10, each row its own
    assert out.shape[1] == 1 + max(bounds(attention_mask))  # generation stopped as soon as every row had ended
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_length_a=0.5, max_length_b=3,
                         **DECODINGS[decoding])
    assert lengths(out, eos) == bounds(attention_mask, 0.5, 3)  # the call's own a and b
    assert len(set(bounds(attention_mask, 0.5, 3))) > 1  # the batch mixes bounds


@pytest.mark.parametrize("seed", [0, 1])
def test_each_returned_sequence_is_bounded_by_its_own_source(model, seed):
    input_ids, attention_mask = mixed_batch(model, seed)
    torch.manual_seed(seed)
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True, num_return_sequences=3)
    assert lengths(out, model.config.eos_token_id) == [bound for bound in bounds(attention_mask) for _ in range(3)]
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, num_return_sequences=2)
    assert lengths(out, model.config.eos_token_id) == [bound for bound in bounds(attention_mask) for _ in range(2)]


@pytest.mark.parametrize("seed", [0, 1])
@pytest.mark.parametrize("decoding", ["greedy", "beam 4"])
def test_a_sentence_gets_the_same_translation_alone_as_in_a_batch(model, decoding, seed):
    input_ids, attention_mask = mixed_batch(model, seed)
    eos = model.config.eos_token_id
    batched = model.generate(input_ids=input_ids, attention_mask=attention_mask, **DECODINGS[decoding])
    for row, (ids, mask) in enumerate(zip(input_ids, attention_mask)):
        alone = model.generate(input_ids=ids[mask.bool()][None], **DECODINGS[decoding])  # no padding, no mask
        assert tokens(alone[0], eos) == tokens(batched[row], eos)


@pytest.mark.parametrize("decoding", ["greedy", "beam 4"])
def test_generating_with_the_cache_equals_recomputing(model, decoding):
    input_ids, attention_mask = mixed_batch(model, 3)
    cached = model.generate(input_ids=input_ids, attention_mask=attention_mask, use_cache=True, **DECODINGS[decoding])
    recomputed = model.generate(input_ids=input_ids, attention_mask=attention_mask, use_cache=False,
                                **DECODINGS[decoding])
    assert torch.equal(cached, recomputed)
    assert lengths(cached, model.config.eos_token_id) == bounds(attention_mask)


@pytest.mark.parametrize("decoding", ["greedy", "beam 4"])
def test_the_bound_turned_off_gives_transformers_own_generate(model, decoding):
    input_ids, attention_mask = mixed_batch(model, 4)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, **DECODINGS[decoding])
    theirs = GenerationMixin.generate(model, **inputs)  # transformers' generate, without our processor
    assert theirs.shape[1] == MAX_LENGTH  # every row ran away
    assert torch.equal(model.generate(**inputs, max_length_a=None), theirs)
    assert torch.equal(model.generate(**inputs, max_length_b=None), theirs)
    off = GenerationConfig(**{**DECODINGS[decoding], "max_length": MAX_LENGTH})
    off.max_length_a = None
    assert torch.equal(model.generate(input_ids=input_ids, attention_mask=attention_mask, generation_config=off),
                       theirs)
    saved = model.generation_config.max_length_a
    try:
        model.generation_config.max_length_a = None  # off in the model's own generation config
        assert torch.equal(model.generate(**inputs), theirs)
    finally:
        model.generation_config.max_length_a = saved


def test_an_explicit_length_still_applies_and_the_smaller_wins(model):
    input_ids, attention_mask = mixed_batch(model, 5)
    eos, rows = model.config.eos_token_id, bounds(attention_mask)
    assert min(rows) < 25 < max(rows)
    for length in (5, 25, MAX_LENGTH):
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=length)
        assert lengths(out, eos) == [min(bound, length) for bound in rows]
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_length=length + 1)
        assert lengths(out, eos) == [min(bound, length) for bound in rows]


def test_settings_that_cannot_work_are_a_value_error_naming_them(model):
    input_ids, attention_mask = mixed_batch(model, 0)
    for name, value in [("max_length_a", -1), ("max_length_a", "2"), ("max_length_a", float("nan")),
                        ("max_length_a", True), ("max_length_b", -3), ("max_length_b", float("inf"))]:
        with pytest.raises(ValueError, match=f"^{name}="):
            model.generate(input_ids=input_ids, attention_mask=attention_mask, **{name: value})


@pytest.mark.parametrize("a", [1e30, 1e300, 1.7976931348623157e308])
def test_a_huge_bound_bounds_nothing_as_the_bound_turned_off(model, a):
    input_ids, attention_mask = mixed_batch(model, 7)
    unbounded = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_length_a=None)
    huge = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_length_a=a)
    assert torch.equal(huge, unbounded)


def test_a_minimum_over_a_rows_bound_is_a_value_error_and_one_within_it_is_kept(model):
    input_ids, attention_mask = mixed_batch(model, 8)
    eos, shortest = model.config.eos_token_id, min(bounds(attention_mask))
    for name, least in [("min_new_tokens", shortest - 1), ("min_length", shortest)]:  # each: exactly the bound
        out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, **{name: least})
        assert min(lengths(out, eos)) == shortest
        with pytest.raises(ValueError, match=f"^{name}={least + 1} cannot work with max_length_a="):
            model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, **{name: least + 1})
    out = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_length_a=None,
                         max_new_tokens=shortest + 3, min_new_tokens=shortest + 1)  # the bound off: no contradiction
    assert min(lengths(out, eos)) == shortest + 3


def test_a_source_given_without_a_mask_counts_its_tokens_that_are_not_padding(model):
    input_ids, attention_mask = mixed_batch(model, 6)
    out = model.generate(input_ids=input_ids, num_beams=1)  # padding id 0 where the mask is 0
    assert lengths(out, model.config.eos_token_id) == bounds(attention_mask)


# ---------------------------------------------------------------------------------------------------------------
# the pipeline and saved folders


def text_bounds(tokenizer, texts, a: float = MAX_LENGTH_A, b: float = MAX_LENGTH_B) -> list[int]:
    return [int(a * len(ids) + b) for ids in tokenizer(texts)["input_ids"]]


def pipeline_lengths(translator, texts, **kwargs) -> list[int]:
    eos = translator.model.config.eos_token_id
    results = translator(texts, return_tensors=True, **kwargs)
    return [lengths(result["translation_token_ids"][None], eos)[0] for result in results]


def test_the_pipeline_bounds_each_translation(model, tokenizer):
    translator = pipeline("translation", model=model, tokenizer=tokenizer)
    assert pipeline_lengths(translator, TEXTS, batch_size=3) == text_bounds(tokenizer, TEXTS)
    assert pipeline_lengths(translator, TEXTS, max_length_a=0.5, max_length_b=2) == text_bounds(tokenizer, TEXTS, .5, 2)
    assert pipeline_lengths(translator, TEXTS, max_length_a=None, num_beams=1) == [MAX_LENGTH - 1] * len(TEXTS)
    bounded = pipeline("translation", model=model, tokenizer=tokenizer, max_length_a=1, max_length_b=1)
    assert pipeline_lengths(bounded, TEXTS) == text_bounds(tokenizer, TEXTS, 1, 1)  # set at pipeline(...)


def generate_lengths(model, tokenizer, texts, **kwargs) -> list[int]:
    inputs = tokenizer(texts, return_tensors="pt", padding=True)
    return lengths(model.generate(**inputs, num_beams=1, **kwargs), model.config.eos_token_id)


def test_saved_folders_keep_their_bound_and_older_folders_get_the_default(model, tokenizer, tmp_path):
    model.save_pretrained(tmp_path / "new")
    generation = json.loads((tmp_path / "new" / "generation_config.json").read_text())
    assert (generation["max_length_a"], generation["max_length_b"]) == (MAX_LENGTH_A, MAX_LENGTH_B)
    expected = text_bounds(tokenizer, TEXTS)
    assert generate_lengths(AutoModelForSeq2SeqLM.from_pretrained(tmp_path / "new"), tokenizer, TEXTS) == expected

    old = tmp_path / "old"  # a folder saved before the bound's settings existed
    model.save_pretrained(old)
    generation = json.loads((old / "generation_config.json").read_text())
    del generation["max_length_a"], generation["max_length_b"]
    (old / "generation_config.json").write_text(json.dumps(generation))
    loaded = AutoModelForSeq2SeqLM.from_pretrained(old)
    assert not hasattr(loaded.generation_config, "max_length_a")
    assert generate_lengths(loaded, tokenizer, TEXTS) == expected

    for a, b, folder in [(1.0, 4, "own"), (None, 10, "off")]:
        copy = runaway_translator()
        copy.generation_config.max_length_a, copy.generation_config.max_length_b = a, b
        copy.save_pretrained(tmp_path / folder)
        loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path / folder)
        got = generate_lengths(loaded, tokenizer, TEXTS)
        assert got == (text_bounds(tokenizer, TEXTS, a, b) if a is not None else [MAX_LENGTH - 1] * len(TEXTS))


FRESH_SCRIPT = HIDE_PACKAGE + textwrap.dedent(
    r'''
    import json, sys
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer, pipeline

    texts = json.loads(sys.argv[2])
    results = {}
    for folder in sys.argv[1].split(","):
        model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True)
        tokenizer = AutoTokenizer.from_pretrained(folder, trust_remote_code=True)
        translator = pipeline("translation", model=folder, trust_remote_code=True)
        eos = model.config.eos_token_id

        def lengths(rows):
            rows = [list(row[1:]) for row in rows]
            return [row.index(eos) + 1 if eos in row else len(row) for row in rows]

        inputs = tokenizer(texts, return_tensors="pt", padding=True)
        results[folder] = {
            "module": type(model).__module__,
            "greedy": lengths(model.generate(**inputs, num_beams=1).tolist()),
            "beam": lengths(model.generate(**inputs).tolist()),
            "off": lengths(model.generate(**inputs, num_beams=1, max_length_a=None).tolist()),
            "pipeline": lengths([r["translation_token_ids"].tolist() for r in translator(texts, return_tensors=True)]),
        }
    print(json.dumps(results))
    '''
)


@pytest.mark.slow  # a fresh interpreter
def test_a_fresh_interpreter_without_the_package_bounds_new_and_old_folders(model, tokenizer, tmp_path):
    folders = []
    for name in ("new", "old"):
        folder = tmp_path / name
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        if name == "old":
            generation = json.loads((folder / "generation_config.json").read_text())
            del generation["max_length_a"], generation["max_length_b"]
            (folder / "generation_config.json").write_text(json.dumps(generation))
        folders.append(str(folder))
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(HF_MODULES_CACHE=str(tmp_path / "modules"), HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    script = tmp_path / "fresh.py"
    script.write_text(FRESH_SCRIPT)
    workdir = tmp_path / "elsewhere"
    workdir.mkdir()
    result = subprocess.run([sys.executable, "-I", str(script), ",".join(folders), json.dumps(TEXTS)], cwd=workdir,
                            env=env, stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    fresh = json.loads(result.stdout.strip().splitlines()[-1])
    expected = text_bounds(tokenizer, TEXTS)
    for folder in folders:
        assert fresh[folder]["module"].startswith("transformers_modules.")  # the folder's own copy of the model
        assert fresh[folder]["greedy"] == fresh[folder]["beam"] == fresh[folder]["pipeline"] == expected
        assert fresh[folder]["off"] == [MAX_LENGTH - 1] * len(TEXTS)


# ---------------------------------------------------------------------------------------------------------------
# translate, CTranslate2 and the server: the translations transformers' own length cut gives each sentence alone


def cut_alone(model, tokenizer, texts, a: float = MAX_LENGTH_A, b: float = MAX_LENGTH_B) -> list[str]:
    """Each text translated alone by greedy `generate` with the bound off and transformers' `max_new_tokens` at the
    bound less its </s>: the text the bound gives (a forced </s> adds no text)."""
    results = []
    for text in texts:
        inputs = tokenizer(text, return_tensors="pt")
        bound = int(a * inputs["input_ids"].shape[1] + b)
        ids = model.generate(**inputs, num_beams=1, max_length_a=None, max_new_tokens=bound - 1)
        results.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return results


@pytest.fixture(scope="module")
def served_folders(model, tokenizer, tmp_path_factory):
    """The runaway translator saved for serving (greedy, with a model card saying de -> en), and its CTranslate2
    export (None without CTranslate2)."""
    folder = tmp_path_factory.mktemp("runaway")
    greedy = runaway_translator()
    greedy.generation_config.update(num_beams=1, early_stopping=False, length_penalty=1.0)
    return saved_with_export(greedy, tokenizer, folder)


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_translate_bounds_both_engines_by_the_folders_generation_config(engine, served_folders, model, tokenizer,
                                                                       tmp_path):
    if engine not in served_folders:
        pytest.skip("CTranslate2 is not installed")
    loaded, loaded_tokenizer = load_model_and_tokenizer(served_folders[engine], "cpu")
    assert translate(loaded, loaded_tokenizer, TEXTS, batch_size=3) == cut_alone(model, tokenizer, TEXTS)
    assert translate(loaded, loaded_tokenizer, TEXTS, batch_size=3, max_length_a=0.5,
                     max_length_b=2) == cut_alone(model, tokenizer, TEXTS, 0.5, 2)

    old = tmp_path / "old"  # exported or saved before the bound's settings existed: the default bound
    shutil.copytree(served_folders[engine], old)
    generation = json.loads((old / "generation_config.json").read_text())
    del generation["max_length_a"], generation["max_length_b"]
    (old / "generation_config.json").write_text(json.dumps(generation))
    loaded, loaded_tokenizer = load_model_and_tokenizer(old, "cpu")
    assert translate(loaded, loaded_tokenizer, TEXTS, batch_size=3) == cut_alone(model, tokenizer, TEXTS)


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_the_server_answers_with_bounded_translations(engine, served_folders, model, tokenizer):
    from serve_fixtures import post, server_in_thread  # a module that skips where num2words is not installed

    if engine not in served_folders:
        pytest.skip("CTranslate2 is not installed")
    served = TranslationEngine(served_folders[engine], source_lang="de", target_lang="en")
    with server_in_thread(served, ServeSettings()) as url:
        answers = [post(url, q=text, source="de", target="en").json()["translatedText"] for text in TEXTS]
        together = post(url, q=TEXTS, source="de", target="en").json()["translatedText"]
    expected = cut_alone(model, tokenizer, TEXTS)
    assert answers == together == expected
    unbounded = tokenizer.batch_decode(model.generate(**tokenizer(TEXTS[2:3], return_tensors="pt"), num_beams=1,
                                                      max_length_a=None), skip_special_tokens=True)
    assert len(expected[2]) < len(unbounded[0])  # the mixed-case sentence would have run away


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
@pytest.mark.parametrize("settings", [dict(max_new_tokens=0), dict(max_length=0), dict(num_beams=0),
                                      dict(num_beams=2, num_return_sequences=3), dict(max_length_a=-1)])
def test_both_engines_refuse_the_same_settings_with_a_value_error(engine, served_folders, settings):
    if engine not in served_folders:
        pytest.skip("CTranslate2 is not installed")
    loaded, loaded_tokenizer = load_model_and_tokenizer(served_folders[engine], "cpu")
    inputs = loaded_tokenizer(TEXTS[:2], return_tensors="pt", padding=True)
    name = next(iter(settings)) if len(settings) == 1 else "num_return_sequences"
    with pytest.raises(ValueError, match=f"{name}"):
        loaded.generate(inputs["input_ids"], attention_mask=inputs["attention_mask"], **settings)
