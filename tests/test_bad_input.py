"""Input that is easy to get wrong: text files with a byte-order mark or Windows line ends, and generation parameters
that cannot work. The first are read as the text they hold; the second are refused with a ValueError naming the
parameter, by the pipeline, by `translate` and by the command line, before `generate` runs."""

import pytest
import torch
from transformers import pipeline

from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer, tiny_translator
from vanilla_transformer.training.data_sources import read_parallel_files
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.translate import translate

BOM = "\ufeff"


def _write_windows_file(path, lines):
    """UTF-8 with a byte-order mark and CRLF line ends, as Notepad writes it."""
    path.write_bytes((BOM + "\r\n".join(lines) + "\r\n").encode("utf-8"))
    return str(path)


def test_parallel_files_lose_the_byte_order_mark_and_carriage_returns(tmp_path):
    source = _write_windows_file(tmp_path / "train.de", GERMAN)
    target = _write_windows_file(tmp_path / "train.en", ENGLISH)
    pairs = read_parallel_files(source, target, "train")
    assert pairs == {"source": GERMAN, "target": ENGLISH}


def test_a_tokenizer_trained_on_such_files_has_no_byte_order_mark_in_its_vocabulary(tmp_path):
    files = [_write_windows_file(tmp_path / "a.de", GERMAN), _write_windows_file(tmp_path / "b.en", ENGLISH)]
    from_files = train_tokenizer(files=files, vocab_size=200, min_frequency=1)
    vocabulary = from_files.get_vocab()
    assert not [token for token in vocabulary if BOM in token or "\r" in token]
    # the same vocabulary as from the clean sentences
    assert vocabulary == train_tokenizer(GERMAN + ENGLISH, vocab_size=200, min_frequency=1).get_vocab()


def test_translate_command_reads_such_an_input_file_line_for_line(tmp_path, capsys):
    from vanilla_transformer.cli.main import main

    folder = tmp_path / "model"
    model, tokenizer = tiny_translator(seed=8), tiny_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    source, output = _write_windows_file(tmp_path / "in.de", GERMAN[:3]), tmp_path / "out.en"
    main(["translate", "--model", str(folder), "--input", source, "--output", str(output), "--num-beams", "1",
          "--max-new-tokens", "5", "--no-progress"])
    expected = translate(model, tokenizer, GERMAN[:3], num_beams=1, max_new_tokens=5)
    assert output.read_text(encoding="utf-8").splitlines() == expected


BAD_GENERATION = [
    (dict(num_beams=0), "num_beams=0"),
    (dict(num_beams=-2), "num_beams=-2"),
    (dict(num_beams=2.5), "num_beams=2.5"),
    (dict(max_new_tokens=-1), "max_new_tokens=-1"),
    (dict(max_new_tokens=0), "max_new_tokens=0"),
    (dict(max_length=0), "max_length=0"),
    (dict(min_new_tokens=-1), "min_new_tokens=-1"),
    (dict(num_return_sequences=0), "num_return_sequences=0"),
    (dict(num_beams=2, num_return_sequences=3), "num_return_sequences=3 cannot work with num_beams=2"),
    (dict(do_sample=True, temperature=0.0), "temperature=0.0"),
    (dict(do_sample=True, top_p=1.5), "top_p=1.5"),
    (dict(do_sample=True, top_k=-1), "top_k=-1"),
]


@pytest.fixture(scope="module")
def translator():
    return pipeline("translation", model=tiny_translator(seed=9), tokenizer=tiny_tokenizer())


@pytest.mark.parametrize("kwargs, message", BAD_GENERATION, ids=[m for _, m in BAD_GENERATION])
def test_generation_parameters_that_cannot_work_are_named(translator, kwargs, message):
    with pytest.raises(ValueError, match=f"^{message}".replace("(", r"\(").replace(")", r"\)")):
        translator(GERMAN[0], **kwargs)
    with pytest.raises(ValueError, match=f"^{message}"):
        translate(translator.model, translator.tokenizer, GERMAN[:1], **kwargs)


def test_bad_parameters_given_to_pipeline_are_named_at_the_call(translator):
    bad = pipeline("translation", model=translator.model, tokenizer=translator.tokenizer, num_beams=0)
    with pytest.raises(ValueError, match="^num_beams=0 cannot work"):
        bad(GERMAN[0])


def test_the_checks_let_working_parameters_through(translator):
    """num_return_sequences up to num_beams, sampling with its parameters, the model's own defaults."""
    text = GERMAN[1]
    results = translator(text, num_beams=3, num_return_sequences=3, max_new_tokens=4)
    assert len(results) == 3
    torch.manual_seed(0)
    sampled = translator(text, do_sample=True, top_k=0, top_p=0.9, temperature=0.7, num_return_sequences=2,
                         max_new_tokens=4)
    assert len(sampled) == 2
    assert translator(text, max_new_tokens=4, min_new_tokens=0)[0]["translation_text"]
