"""`vanilla-transformer translate`: batched file translation against sentence-by-sentence `generate`, and clear
errors for bad input.

The model is tiny and untrained (its translations are noise) but deterministic: what matters is that the command
returns, line for line, what `model.generate` gives for each sentence alone.
"""

import io
import os

import pytest
import torch

from helpers import run_main, tiny_config
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.translate import load_model_and_tokenizer

num2words = pytest.importorskip("num2words").num2words

SENTENCES = [
    "two hundred and five",
    "seventeen",
    "",  # a blank line stays a blank line
    "one thousand, three hundred and forty-two",
    "ninety-nine",
    "eleven",
    "zwölf und dreißig",  # non-ASCII input
]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_translator(str(tmp_path_factory.mktemp("tiny-translator")))


def save_tiny_translator(path: str) -> str:
    """A tiny random translator (float64) with a number-words tokenizer saved at `path`; returns `path`."""
    texts = [num2words(i) for i in range(400)] + [num2words(i, lang="de") for i in range(400)]
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1)
    torch.manual_seed(0)
    config = tiny_config(vocab_size=len(tokenizer))
    # float64, so that the different padding of batched and single sentences cannot flip a near-tie in argmax
    model = VanillaTransformerForConditionalGeneration(config).double().eval()
    model.generation_config.max_length = 16
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)
    return path


def one_at_a_time(model_dir, texts, max_length_a=2.0, max_length_b=10, **generate_kwargs):
    """Each text translated alone by `generate`, bounded as fairseq bounds it: at most int(a * n + b) tokens (the
    </s> the bound ends it with among them) for a source of n tokens, unless `max_new_tokens` is given."""
    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    results = []
    for text in texts:
        if not text.strip():
            results.append("")
            continue
        inputs = tokenizer(text, return_tensors="pt")
        kwargs = dict(generate_kwargs)
        longest = int(max_length_a * inputs["input_ids"].shape[1] + max_length_b) - 1  # tokens before that </s>
        if "max_new_tokens" not in kwargs and longest < model.generation_config.max_length - 1:
            kwargs["max_new_tokens"] = longest
        with torch.no_grad():
            ids = model.generate(**inputs, **kwargs)
        results.append(tokenizer.decode(ids[0], skip_special_tokens=True))
    return results


def run_cli(argv, capsys):
    return run_main(main, argv, capsys)


def test_file_translation_writes_one_line_per_input_line_matching_single_sentence_generate(model_dir, tmp_path, capsys):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    code, out, err = run_cli(["translate", "--model", model_dir, "--input", str(source), "--output", str(target),
                              "--batch-size", "3", "--num-beams", "1"], capsys)
    assert code == 0, err
    lines = target.read_text(encoding="utf-8").split("\n")
    assert lines[-1] == ""  # every line ends with a newline
    assert lines[:-1] == one_at_a_time(model_dir, SENTENCES, num_beams=1)
    assert len(lines[:-1]) == len(SENTENCES)
    assert lines[2] == ""
    assert f"{len(SENTENCES)}/{len(SENTENCES)}" in err  # the tqdm progress bar finished
    assert out == ""


def test_sentence_arguments_are_translated_to_stdout_with_beam_search(model_dir, capsys):
    texts = SENTENCES[:2]
    code, out, err = run_cli(["translate", "--model", model_dir, *texts, "--num-beams", "3"], capsys)
    assert code == 0, err
    assert out.split("\n")[:-1] == one_at_a_time(model_dir, texts, num_beams=3)


def test_num_beams_and_max_new_tokens_reach_generate(model_dir, tmp_path, capsys):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(SENTENCES[:4]), encoding="utf-8")  # no final newline: still one line out per line
    code, _, err = run_cli(["translate", "--model", model_dir, "--input", str(source), "--output", str(target),
                            "--num-beams", "2", "--max-new-tokens", "3", "--no-progress"], capsys)
    assert code == 0, err
    expected = one_at_a_time(model_dir, SENTENCES[:4], num_beams=2, max_new_tokens=3)
    assert target.read_text(encoding="utf-8").split("\n")[:-1] == expected
    assert "Translating" not in err
    # the options made a difference, so matching proves they reached generate
    assert expected != one_at_a_time(model_dir, SENTENCES[:4], num_beams=2)


def test_model_folder_without_tokenizer_is_a_clear_error(model_dir, tmp_path, capsys):
    for name in ("config.json", "model.safetensors"):
        (tmp_path / name).write_bytes((open(os.path.join(model_dir, name), "rb")).read())
    code, _, err = run_cli(["translate", "--model", str(tmp_path), "seven"], capsys)
    assert code == 1
    assert "has no tokenizer" in err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model", "{missing}", "seven"], "model folder not found"),
        (["--model", "{empty}", "seven"], "has no config.json"),
        (["--model", "{model}", "--input", "{missing}"], "--input file not found"),
        (["--model", "{model}", "seven", "--input", "{missing}"], "not both"),
        (["--model", "{model}"], "nothing to translate"),
        (["--model", "{model}", "seven", "--output", "{missing}/out.txt"], "cannot be written: its folder"),
        (["--model", "{model}", "seven", "--batch-size", "0"], "--batch-size must be at least 1"),
        (["--model", "{model}", "seven", "--device", "toaster"], "is not a torch device"),
    ],
)
def test_bad_arguments_give_one_line_errors_without_traceback(model_dir, tmp_path, capsys, argv, message):
    paths = {"missing": str(tmp_path / "no-such-thing"), "empty": str(tmp_path), "model": model_dir}
    code, out, err = run_cli(["translate"] + [a.format(**paths) for a in argv], capsys)
    assert code != 0
    assert message in err
    assert "Traceback" not in err
    assert [line for line in err.splitlines() if "error:" in line] == [err.splitlines()[-1]]
    assert out == ""


def test_input_dash_reads_sentences_from_stdin(model_dir, monkeypatch, capsys):
    monkeypatch.setattr("sys.stdin", io.StringIO("seventeen\n\neleven\n"))
    code, out, err = run_cli(["translate", "--model", model_dir, "--input", "-", "--num-beams", "1"], capsys)
    assert code == 0, err
    assert out.split("\n")[:-1] == one_at_a_time(model_dir, ["seventeen", "", "eleven"], num_beams=1)
