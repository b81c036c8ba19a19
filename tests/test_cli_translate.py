"""`vanilla-transformer translate`: batched file translation against sentence-by-sentence `generate`, and clear
errors for bad input.

The model is tiny and untrained (its translations are noise) but deterministic: what matters is that the command
returns, line for line, what `model.generate` gives for each sentence alone.
"""

import io
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import run_main, tiny_config
from vanilla_transformer import VanillaTransformerForConditionalGeneration
from vanilla_transformer.cli.main import main
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.translate import characters_read, load_model_and_tokenizer, translate, translate_hypotheses

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
    </s> the bound ends it with among them) for a source of n tokens, unless `max_new_tokens` is given. The model's
    own bound is off here: transformers' `max_new_tokens` cuts each sentence alone. A text longer than the
    tokenizer's `model_max_length` is cut to it by the tokenizer's own truncation."""
    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    results = []
    for text in texts:
        if not text.strip():
            results.append("")
            continue
        inputs = tokenizer(text, return_tensors="pt", truncation=True)
        kwargs = {"max_length_a": None, **generate_kwargs}
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
        (["--model", "{model}", "seven", "--batch-size", "0"], "--batch-size must be from 1 to 100000, got 0"),
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


# ---------------------------------------------------------------------------------------------------------------
# a corpus: streamed in chunks, line-aligned, gzip'd in and out, resumable after a kill, flat in memory


LONG_LINE = " ".join(["two hundred and five"] * 60)  # past the tiny model's 64 positions
CORPUS = ["\ufeffseventeen", "two hundred\rand five", "", "   ", "eleven\r", LONG_LINE, "zwölf und dreißig",
          *[num2words(i) for i in range(40)]]


def corpus_bytes(lines=CORPUS) -> bytes:
    return "\r\n".join(lines).encode("utf-8")  # CRLF endings, and no newline after the last line


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of 8 lines, so that a small file takes several."""
    import vanilla_transformer.translate as translation

    monkeypatch.setattr(translation, "CHUNK_SIZE", 8)


def test_a_corpus_in_chunks_is_line_aligned_and_equals_each_line_translated_alone(model_dir, tmp_path, capsys,
                                                                                  small_chunks):
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(corpus_bytes())
    code, out, err = run_cli(["translate", "--model", model_dir, "--input", str(source), "--output", str(target),
                              "--batch-size", "3", "--num-beams", "1"], capsys)
    assert code == 0, err
    expected_input = ["seventeen", "two hundred\rand five", "", "   ", "eleven", LONG_LINE, *CORPUS[6:]]  # BOM, \r\n
    translations = target.read_text(encoding="utf-8").split("\n")
    assert translations[-1] == "" and len(translations[:-1]) == len(CORPUS)
    assert translations[:-1] == one_at_a_time(model_dir, expected_input, num_beams=1)
    assert translations[2] == translations[3] == ""  # blank lines are not sent to the model
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]  # no partial file or progress record left
    assert f"{len(CORPUS)}/{len(CORPUS)}" in err


def test_lines_longer_than_the_model_reads_are_cut_to_it_and_named_in_a_warning(model_dir, tmp_path, capsys,
                                                                               small_chunks, monkeypatch):
    """A line past the 64 tokens the model reads (its tokenizer's `model_max_length`, as a trained folder's is its
    training length) is translated as its first 64 tokens (the oracle: the tokenizer's own truncation, then
    `generate`), not a runaway over all of it; each chunk's warning names its long lines by their number in the
    file."""
    from transformers import AutoTokenizer

    folder = tmp_path / "capped"
    load_model_and_tokenizer(model_dir, "cpu")[0].save_pretrained(folder)
    tokenizer = AutoTokenizer.from_pretrained(model_dir, model_max_length=64)
    tokenizer.save_pretrained(folder)
    longest = " ".join(["one thousand, three hundred and forty-two"] * 400)  # thousands of tokens
    lines = [num2words(i) for i in range(20)]
    lines[2], lines[12], lines[13] = LONG_LINE, longest, f"eleven {LONG_LINE}"
    source, target = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_text("\n".join(lines) + "\n", encoding="utf-8")
    seen = []  # the longest text the tokenizer is given
    tokenizer_class = type(tokenizer)
    call = tokenizer_class.__call__

    def spied(self, text=None, *args, **kwargs):
        seen.extend(len(t) for t in ([text] if isinstance(text, str) else text or []))
        return call(self, text, *args, **kwargs)

    monkeypatch.setattr(tokenizer_class, "__call__", spied)
    code, out, err = run_cli(["translate", "--model", str(folder), "--input", str(source), "--output", str(target),
                              "--batch-size", "3", "--num-beams", "1", "--no-progress"], capsys)
    monkeypatch.undo()
    assert code == 0, err
    budget = characters_read(tokenizer, 64)  # a line of megabytes is tokenized in its first characters only
    assert len(longest) > budget >= max(seen)
    assert target.read_text(encoding="utf-8").split("\n")[:-1] == one_at_a_time(folder, lines, num_beams=1)
    counts = [len(tokenizer(text, verbose=False)["input_ids"]) for text in (lines[2], longest[:budget], lines[13])]
    assert min(counts) > 64 and counts[1] < len(tokenizer(longest, verbose=False)["input_ids"])
    assert err.splitlines() == [
        f"Line 3 ({counts[0]:,} tokens) longer than the 64 tokens the model reads: cut to the first 64, the rest is "
        "not translated (split long lines into sentences).",
        f"Lines 13 ({counts[1]:,}+ tokens), 14 ({counts[2]:,} tokens) longer than the 64 tokens the model reads: cut "
        "to the first 64, the rest is not translated (split long lines into sentences).",
    ], err


def test_gzip_input_and_output(model_dir, tmp_path, capsys, small_chunks):
    import gzip

    plain, packed = tmp_path / "in.txt", tmp_path / "in.txt.gz"
    plain.write_bytes(corpus_bytes())
    packed.write_bytes(gzip.compress(corpus_bytes()))
    code, _, err = run_cli(["translate", "--model", model_dir, "--input", str(plain), "--output",
                            str(tmp_path / "plain.out"), "--num-beams", "1", "--no-progress"], capsys)
    assert code == 0, err
    code, _, err = run_cli(["translate", "--model", model_dir, "--input", str(packed), "--output",
                            str(tmp_path / "out.gz"), "--num-beams", "1", "--no-progress"], capsys)
    assert code == 0, err
    expected = (tmp_path / "plain.out").read_bytes()
    assert expected.count(b"\n") == len(CORPUS)
    assert gzip.decompress((tmp_path / "out.gz").read_bytes()) == expected  # several gzip members, one text
    result = subprocess.run(["gzip", "-dc", str(tmp_path / "out.gz")], capture_output=True, check=True)
    assert result.stdout == expected
    # sentence arguments and standard input stream into a gzip'd --output too
    code, _, err = run_cli(["translate", "--model", model_dir, "--output", str(tmp_path / "args.gz"),
                            "--num-beams", "1", *CORPUS[5:8]], capsys)
    assert code == 0, err
    assert gzip.decompress((tmp_path / "args.gz").read_bytes()).split(b"\n")[:-1] == expected.split(b"\n")[5:8]


def _kill_at_record(argv, records: int):
    """Run the command in a forked copy that SIGKILLs itself as it starts writing its `records`-th progress record
    (the chunk before it is on disk in OUT.partial, but not recorded). A record is two events: the temporary file's
    open, and its rename over OUT.progress.json."""
    from test_files_safety import run_forked

    return run_forked(lambda: main(argv), kill_at=2 * records - 1, watch=".progress.json.tmp")


@pytest.mark.slow  # processes killed and run again
@pytest.mark.parametrize("sampling", [[], ["--sampling-topk", "0", "--sampling-temperature", "2", "--seed", "3"]],
                         ids=["greedy", "sampling"])
def test_a_run_killed_midway_continues_where_it_stopped(model_dir, tmp_path, capsys, small_chunks, monkeypatch,
                                                        sampling):
    import vanilla_transformer.translate as translation

    source = tmp_path / "in.txt"
    source.write_bytes(corpus_bytes())
    whole, out = tmp_path / "whole.txt", tmp_path / "out.txt"
    options = ["--model", model_dir, "--input", str(source), "--num-beams", "1", "--no-progress", *sampling]
    code, _, err = run_cli(["translate", *options, "--output", str(whole)], capsys)
    assert code == 0, err
    argv = ["translate", *options, "--output", str(out)]
    # killed after 2 chunks recorded, the 3rd written to OUT.partial but not recorded
    code, stderr = _kill_at_record(argv, 4)[:2]
    assert code == -signal.SIGKILL, stderr
    assert not out.exists()  # nothing that looks finished
    partial = tmp_path / "out.txt.partial"
    assert partial.read_text(encoding="utf-8").count("\n") == 24
    assert json.loads((tmp_path / "out.txt.progress.json").read_text())["lines"] == 16

    translated = []
    original = translation._translate_chunk

    def counting(model, tokenizer, texts, *args):
        translated.extend(texts)
        return original(model, tokenizer, texts, *args)

    monkeypatch.setattr(translation, "_translate_chunk", counting)
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert out.read_bytes() == whole.read_bytes()  # the same file as the uninterrupted run's, sampled or not
    assert translated == [line.removesuffix("\r") for line in CORPUS[16:]]  # what was recorded is not done again
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt", "whole.txt"]


def test_a_resumed_run_refuses_a_changed_input_or_other_options_in_one_line(model_dir, tmp_path, capsys,
                                                                            small_chunks):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(corpus_bytes())
    argv = ["translate", "--model", model_dir, "--input", str(source), "--output", str(out), "--num-beams", "1",
            "--no-progress"]
    assert _kill_at_record(argv, 3)[0] == -signal.SIGKILL  # 8 lines recorded
    partial = (tmp_path / "out.txt.partial").read_bytes()
    for changed, words in [(["--num-beams", "2"], "it was started with other options"),
                           (["--max-length-b", "3"], "it was started with other options")]:
        code, out_text, err = run_cli([*argv, *changed], capsys)
        line = err.strip().splitlines()[-1]
        assert code == 2 and words in line and "give --overwrite to start again" in line, err
        assert "Traceback" not in err
    source.write_bytes(corpus_bytes() + b"\r\nsix")
    code, _, err = run_cli(argv, capsys)
    assert code == 2 and f"--input {source} changed since" in err.strip().splitlines()[-1], err
    assert (tmp_path / "out.txt.partial").read_bytes() == partial  # refused: nothing touched
    code, _, err = run_cli([*argv, "--overwrite"], capsys)  # started again
    assert code == 0, err
    assert out.read_text(encoding="utf-8").count("\n") == len(CORPUS) + 1
    # an OUT.partial this command did not make is never touched, even with --overwrite
    (tmp_path / "mine.txt.partial").write_text("my notes\n")
    code, _, err = run_cli([*argv[:6], str(tmp_path / "mine.txt"), *argv[7:], "--overwrite"], capsys)
    assert code == 2 and "no interrupted run of this command made it" in err, err
    assert (tmp_path / "mine.txt.partial").read_text() == "my notes\n"


def _bad_inputs() -> dict:
    """Inputs the reader refuses at their first bytes or midway: (name, bytes, the fixed bytes)."""
    import gzip

    good = corpus_bytes()
    return {
        "latin-1": ("in.txt", "one\nzw\xf6lf\nthree\n".encode("latin-1"), "one\nzwölf\nthree\n".encode()),
        "utf-16": ("in.txt", "one\ntwo\n".encode("utf-16"), b"one\ntwo\n"),
        "truncated gzip": ("in.txt.gz", gzip.compress(good)[:-30], gzip.compress(good)),
        "zip": ("in.txt", b"PK\x03\x04" + bytes(range(60)), good),
        "binary": ("in.txt", b"\x7fELF\x02\x01\x01" + bytes(300), good),
        "bad after a chunk": ("in.txt", good + b"\r\n\xff\xfe", good),  # the first chunk is translated: kept
    }


@pytest.mark.parametrize("case", list(_bad_inputs()))
def test_a_run_that_fails_before_a_line_is_done_leaves_nothing_behind(model_dir, tmp_path, capsys, small_chunks,
                                                                      case):
    """Bad input found before any line is recorded: one line, and no OUT.partial or record of this run left to
    refuse the run that follows the fix. A run that recorded lines keeps them, as a kill would."""
    name, data, fixed = _bad_inputs()[case]
    source, out = tmp_path / name, tmp_path / "out.txt"
    source.write_bytes(data)
    argv = ["translate", "--model", model_dir, "--input", str(source), "--output", str(out), "--num-beams", "1",
            "--no-progress"]
    code, _, err = run_cli(argv, capsys)
    assert code == 1 and "Traceback" not in err and err.count("error:") == 1, err
    left = sorted(os.listdir(tmp_path))
    if case == "bad after a chunk":
        assert left == [name, "out.txt.partial", "out.txt.progress.json"], left
        assert json.loads((tmp_path / "out.txt.progress.json").read_text())["lines"] > 0
        return
    assert left == [name], left
    source.write_bytes(fixed)  # the hinted fix: the same command now runs
    code, _, err = run_cli(argv, capsys)
    assert code == 0, err
    assert sorted(os.listdir(tmp_path)) == [name, "out.txt"]


def test_a_record_of_no_lines_never_blocks_a_changed_input_or_other_options(model_dir, tmp_path, capsys,
                                                                            small_chunks):
    source, out = tmp_path / "in.txt", tmp_path / "out.txt"
    source.write_bytes(corpus_bytes())
    argv = ["translate", "--model", model_dir, "--input", str(source), "--output", str(out), "--num-beams", "1",
            "--no-progress"]
    assert _kill_at_record(argv, 2)[0] == -signal.SIGKILL  # killed with 0 lines recorded, a chunk written
    assert json.loads((tmp_path / "out.txt.progress.json").read_text())["lines"] == 0
    assert (tmp_path / "out.txt.partial").stat().st_size > 0
    source.write_bytes(corpus_bytes(CORPUS[:20]))  # another input, and other options: nothing was done to lose
    code, _, err = run_cli([*argv, "--max-length-b", "3"], capsys)
    assert code == 0, err
    assert out.read_text(encoding="utf-8").count("\n") == 20
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt"]


def _edit(path, offset: int, data: bytes) -> None:
    """Overwrite `data` at `offset` of the file `path`, as an editor saving it in place would."""
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(data)


@pytest.mark.parametrize("edit", ["more lines, same size", "fewer lines, same size", "same lines, other bytes",
                                  "more lines, larger", "gzip member changed"])
def test_a_partial_changed_since_its_record_is_refused_never_misaligned(model_dir, tmp_path, capsys, small_chunks,
                                                                         edit):
    import gzip

    source = tmp_path / "in.txt"
    source.write_bytes(corpus_bytes())
    out = tmp_path / ("out.txt.gz" if edit.startswith("gzip") else "out.txt")
    partial = tmp_path / f"{out.name}.partial"
    argv = ["translate", "--model", model_dir, "--input", str(source), "--output", str(out), "--num-beams", "1",
            "--no-progress"]
    assert _kill_at_record(argv, 4)[0] == -signal.SIGKILL  # 16 lines recorded, 24 written
    recorded = json.loads((tmp_path / f"{out.name}.progress.json").read_text())
    assert recorded["lines"] == 16
    text = partial.read_bytes()
    if edit == "more lines, same size":  # its first 10 bytes become 5 short lines
        _edit(partial, 0, b"a\nb\nc\nd\ne\n")
    elif edit == "fewer lines, same size":  # two lines joined into one
        _edit(partial, text.index(b"\n"), b" ")
    elif edit == "same lines, other bytes":  # a translation corrected in place: as many lines, the same size
        _edit(partial, 0, b"X" if text[:1] != b"X" else b"Y")
    elif edit == "more lines, larger":
        partial.write_bytes(b"a line of mine\n" + text)
    else:  # the first gzip member holds other text
        member = gzip.compress(b"x\n" * 8, mtime=0)
        partial.write_bytes(member + text[len(member):] if len(member) < len(text) else member)
    edited = partial.read_bytes()
    code, _, err = run_cli(argv, capsys)
    line = err.strip().splitlines()[-1]
    assert code == 2 and "Traceback" not in err, err
    assert f"{partial} was changed since it was recorded" in line and "give --overwrite to start again" in line, line
    assert partial.read_bytes() == edited and not out.exists()  # refused: nothing touched, nothing finished
    code, _, err = run_cli([*argv, "--overwrite"], capsys)  # started again
    assert code == 0, err
    result = gzip.decompress(out.read_bytes()) if out.name.endswith(".gz") else out.read_bytes()
    assert result.count(b"\n") == len(CORPUS)


@pytest.mark.slow  # three corpus runs
def test_memory_stays_flat_on_a_file_ten_times_larger(model_dir, tmp_path, capsys, monkeypatch):
    import tracemalloc

    import vanilla_transformer.files.text as text_files
    import vanilla_transformer.translate as translation

    monkeypatch.setattr(translation, "CHUNK_SIZE", 100)  # sentences translated per chunk
    monkeypatch.setattr(text_files, "READ_CHUNK_BYTES", 1 << 12)  # bytes the line reader holds at once
    line = "two hundred and five thousand three hundred and seventeen " * 10
    peaks = []
    for lines in (10, 100, 1000):  # the first run warms caches
        source = tmp_path / f"in{lines}.txt"
        source.write_text((line + "\n") * lines, encoding="utf-8")
        tracemalloc.start()
        code, _, err = run_cli(["translate", "--model", model_dir, "--input", str(source), "--output",
                                str(tmp_path / f"out{lines}.txt"), "--max-new-tokens", "1", "--batch-size", "100",
                                "--no-progress"], capsys)
        peaks.append(tracemalloc.get_traced_memory()[1])
        tracemalloc.stop()
        assert code == 0, err
        assert (tmp_path / f"out{lines}.txt").read_text().count("\n") == lines
    # the file 10x larger costs no more than 10% more, and far less than its text (which reading it whole would add)
    added_text = source.stat().st_size - (tmp_path / "in100.txt").stat().st_size
    assert peaks[2] < peaks[1] * 1.1 and peaks[2] - peaks[1] < added_text / 4, (peaks, added_text)


# ---------------------------------------------------------------------------------------------------------------
# no runaway outputs: each translation bounded by its source's length, alone or in any batch, in both engines

BOUND_TEXTS = ["tWo HuNdReD aNd FiVe SeVeNtEeN eLeVeN", "seventeen", "a", "", "one thousand, three hundred and five",
               "eleven", LONG_LINE]


def test_each_translation_is_bounded_by_its_source_length_in_any_batch(model_dir):
    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    bounded = translate(model, tokenizer, BOUND_TEXTS, batch_size=4, num_beams=1, max_length_a=0.5, max_length_b=2)
    assert bounded == one_at_a_time(model_dir, BOUND_TEXTS, 0.5, 2, num_beams=1)  # generate, max_new_tokens by hand
    unbounded = translate(model, tokenizer, BOUND_TEXTS, batch_size=4, num_beams=1, max_length_a=100)
    assert unbounded == one_at_a_time(model_dir, BOUND_TEXTS, 100, num_beams=1)
    assert all(len(a) <= len(b) for a, b in zip(bounded, unbounded)) and bounded != unbounded  # the bound bit


def test_ctranslate2_bounds_and_samples_as_generate_does(model_dir, tmp_path, capsys):
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    exported = str(to_ctranslate2(model_dir, tmp_path / "ct2", quantization="float32"))
    model, tokenizer = load_model_and_tokenizer(exported, "cpu")
    for a, b in [(0.5, 2), (2.0, 10)]:
        assert translate(model, tokenizer, BOUND_TEXTS, batch_size=4, num_beams=1, max_length_a=a,
                         max_length_b=b) == one_at_a_time(model_dir, BOUND_TEXTS, a, b, num_beams=1)
    sampled = []
    for seed in ("1", "1", "2"):
        code, out, err = run_cli(["translate", "--model", exported, *BOUND_TEXTS[:3], "--sampling-topk", "0",
                                  "--sampling-temperature", "3", "--seed", seed], capsys)
        assert code == 0, err
        sampled.append(out)
    greedy = run_cli(["translate", "--model", exported, *BOUND_TEXTS[:3], "--num-beams", "1"], capsys)[1]
    assert sampled[0] == sampled[1] != sampled[2] and sampled[0] != greedy  # seeded, and sampled


def test_sampling_options_that_cannot_work_are_usage_errors(model_dir, capsys):
    for argv, words in [(["--sampling-topk", "5", "--num-beams", "4"], "takes no --num-beams above 1"),
                        (["--max-new-tokens", "5", "--max-length-a", "1"], "not both"),
                        (["--sampling-temperature", "0"], "--sampling-temperature must be from 0.001 to 1000"),
                        (["--sampling-temperature", "1e-300"], "--sampling-temperature must be from 0.001 to 1000"),
                        (["--max-length-a", "-1"], "--max-length-a must be from 0 to 1000, got -1"),
                        (["--max-length-a", "inf"], "--max-length-a must be from 0 to 1000, got inf"),
                        (["--sampling-topk", "9" * 20], f"--sampling-topk must be from 0 to 1000000, got {'9' * 20}"),
                        (["--max-new-tokens", "9" * 20], "--max-new-tokens must be from 1 to 100000"),
                        (["--max-length-b", "9" * 20], "--max-length-b must be from 0 to 100000"),
                        (["--seed", "9" * 20], "--seed must be from 0 to 4294967295"),
                        (["--num-beams", "100000"], "--num-beams must be from 1 to 64, got 100000"),
                        (["--sampling-topk", "100000"], "--sampling-topk 100000 is more than the")]:
        code, out, err = run_cli(["translate", "--model", model_dir, "seven", *argv], capsys)
        assert code == 2 and words in err.strip().splitlines()[-1] and out == "", err
        assert "Traceback" not in err


def test_closest_to_options_that_cannot_work_are_usage_errors(model_dir, tmp_path, capsys):
    source, originals = tmp_path / "in.en", tmp_path / "originals.de"
    source.write_text("seven\neight\n", encoding="utf-8")
    originals.write_text("sieben\nacht\n", encoding="utf-8")
    (tmp_path / "short.de").write_text("sieben\n", encoding="utf-8")
    for argv, words in [(["seven", "--closest-to", str(originals)], "give --input FILE"),
                        (["--input", str(source), "--closest-to", str(originals), "--sampling-topk", "5"],
                         "takes no sampling"),
                        (["--input", str(source), "--closest-to", str(tmp_path / "missing.de")], "not found"),
                        (["--input", str(source), "--closest-to", str(tmp_path / "short.de")],
                         "has 1 lines and --input"),
                        (["--input", str(source), "--closest-to", str(originals), "--output", str(originals),
                          "--overwrite"], str(originals))]:
        code, out, err = run_cli(["translate", "--model", model_dir, *argv], capsys)
        assert code == 2 and words in err.strip().splitlines()[-1] and out == "", err
    assert originals.read_text(encoding="utf-8") == "sieben\nacht\n"  # an input is never an output


@pytest.fixture(scope="module")
def ct2_dir(model_dir, tmp_path_factory):
    pytest.importorskip("ctranslate2")
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    return str(to_ctranslate2(model_dir, tmp_path_factory.mktemp("ct2") / "ct2", quantization="float32"))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_a_ctranslate2_folders_tokenizer_is_the_one_autotokenizer_loads(ct2_dir, tmp_path, seed):
    """`checkpoints.load.load_tokenizer` loads the exported fast tokenizer by its class, without AutoTokenizer (whose
    config lookup imports torch): the same class, vocabulary and special tokens as AutoTokenizer's, and the same ids,
    padding and decoding of random text; a tokenizer of another class goes through AutoTokenizer itself."""
    import random
    import shutil

    from transformers import AutoTokenizer

    from vanilla_transformer.checkpoints.load import load_tokenizer

    rng = random.Random(seed)
    words = [*SENTENCES[0].split(), "zwölf", "Schnee", "ß", "<s>", "</s>", "<unk>", "<pad>", "\t", "☃", "e\u0301"]
    texts = [" ".join(rng.choice(words) for _ in range(rng.randint(1, 12))) for _ in range(20)]
    other = tmp_path / "other"
    shutil.copytree(ct2_dir, other)
    config = json.loads((other / "tokenizer_config.json").read_text(encoding="utf-8"))
    assert config["tokenizer_class"] == "TokenizersBackend"  # what transformers saves for a fast tokenizer
    (other / "tokenizer_config.json").write_text(json.dumps({**config, "tokenizer_class": "PreTrainedTokenizerFast"}),
                                                 encoding="utf-8")
    for folder in (ct2_dir, str(other)):
        ours, theirs = load_tokenizer(folder), AutoTokenizer.from_pretrained(folder)
        assert type(ours) is type(theirs) and ours.get_vocab() == theirs.get_vocab()
        assert ours.special_tokens_map == theirs.special_tokens_map and ours.model_max_length == theirs.model_max_length
        encoded = ours(texts)["input_ids"]
        assert encoded == theirs(texts)["input_ids"]
        assert ours.pad({"input_ids": encoded}) == theirs.pad({"input_ids": encoded})
        assert ours.batch_decode(encoded, skip_special_tokens=True) == theirs.batch_decode(encoded,
                                                                                          skip_special_tokens=True)


@pytest.mark.slow  # a fresh interpreter
def test_a_ctranslate2_export_is_translated_without_torch_or_the_models_code(model_dir, ct2_dir):
    """`vanilla-transformer translate --model CT2_FOLDER` in a fresh interpreter, through the console script's entry
    point: each line is what `generate` gives the sentence alone, and neither torch nor transformers' model code nor
    ours was imported (transformers' tokenizer classes and GenerationConfig are all a CTranslate2 folder needs; torch
    only where transformers' GenerationConfig imports it itself, as transformers 5.18's does)."""
    from helpers import REPO_ROOT

    config_alone = subprocess.run([sys.executable, "-c", "import sys; from transformers import GenerationConfig; "
                                   "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=300)
    assert config_alone.returncode == 0, config_alone.stderr[-2000:]
    needed = ["torch"] if config_alone.stdout.split() == ["True"] else []
    heavy = ["torch", "transformers.modeling_utils", "transformers.pipelines", "transformers.models.auto",
             "vanilla_transformer.modeling_vanilla_transformer", "vanilla_transformer.registration"]
    script = (f"import contextlib, io, json, sys, vanilla_transformer_cli\n"
              f"with contextlib.redirect_stdout(io.StringIO()) as out:\n"
              f"    vanilla_transformer_cli.main(sys.argv[1:])\n"
              f"print(json.dumps([out.getvalue(), [m for m in {heavy!r} if m in sys.modules],"
              f" 'ctranslate2' in sys.modules]))")
    result = subprocess.run([sys.executable, "-c", script, "translate", "--model", ct2_dir, "--num-beams", "1",
                             *SENTENCES], cwd=REPO_ROOT, capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    out, imported, ran_ctranslate2 = json.loads(result.stdout)
    assert imported == needed and ran_ctranslate2
    assert out.splitlines() == one_at_a_time(model_dir, SENTENCES, num_beams=1)


@pytest.mark.slow  # a fresh interpreter
def test_a_ctranslate2_exports_bound_and_n_best_need_no_torch(model_dir, ct2_dir):
    """The library's CTranslate2 path in a fresh interpreter that loaded the command line's entry point first (so
    that the package does not register the model): a translation bounded by its source's length (max_length_a 0.5,
    max_length_b 2) is what transformers' own length cut gives the sentence alone, and `translate_hypotheses`' three
    best equal the PyTorch model's; neither torch nor transformers' model code was imported (torch only where
    transformers' GenerationConfig imports it itself)."""
    from helpers import REPO_ROOT

    config_alone = subprocess.run([sys.executable, "-c", "import sys; from transformers import GenerationConfig; "
                                   "print('torch' in sys.modules)"], capture_output=True, text=True, timeout=300)
    assert config_alone.returncode == 0, config_alone.stderr[-2000:]
    needed = ["torch"] if config_alone.stdout.split() == ["True"] else []
    heavy = ["torch", "transformers.modeling_utils", "transformers.models.auto",
             "vanilla_transformer.modeling_vanilla_transformer", "vanilla_transformer.registration"]
    script = ("import json, sys, vanilla_transformer_cli\n"
              "from vanilla_transformer.translate import characters_read, load_model_and_tokenizer, translate, translate_hypotheses\n"
              "model, tokenizer = load_model_and_tokenizer(sys.argv[1])\n"
              "texts = json.loads(sys.argv[2])\n"
              "bounded = translate(model, tokenizer, texts, num_beams=1, max_length_a=0.5, max_length_b=2)\n"
              "best = translate_hypotheses(model, tokenizer, texts, 3)\n"
              f"print(json.dumps([bounded, best, [m for m in {heavy!r} if m in sys.modules]]))")
    result = subprocess.run([sys.executable, "-c", script, ct2_dir, json.dumps(SENTENCES)], cwd=REPO_ROOT,
                            capture_output=True, text=True, timeout=300,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    bounded, best, imported = json.loads(result.stdout)
    assert imported == needed
    assert bounded == one_at_a_time(model_dir, SENTENCES, max_length_a=0.5, max_length_b=2, num_beams=1)
    assert bounded != one_at_a_time(model_dir, SENTENCES, num_beams=1)  # the tighter bound cut something
    model, tokenizer = load_model_and_tokenizer(model_dir, "cpu")
    assert best == translate_hypotheses(model, tokenizer, SENTENCES, 3)
    assert all(len(row) == 3 for row in best) and best[2] == ["", "", ""]


# ---------------------------------------------------------------------------------------------------------------
# the command as a shell runs it: stdin, pipes, devices and links


def console_script(argv, tmp_path, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """`vanilla-transformer ARGV` in a fresh interpreter through the console script's entry point (which registers
    nothing before the command asks), with `stdin` and a cache of its own."""
    from helpers import REPO_ROOT

    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "HF_HOME": str(tmp_path / "hf")}
    return subprocess.run([sys.executable, "-c", "import sys, vanilla_transformer_cli; "
                           "vanilla_transformer_cli.main(sys.argv[1:])", *argv], input=stdin, cwd=tmp_path,
                          capture_output=True, timeout=300, env=env)


@pytest.mark.slow  # fresh interpreters
def test_a_saved_folder_translates_standard_input_through_its_cached_export_without_a_question(model_dir, tmp_path):
    """A folder saved with remote code (`auto_map`): the plan to export it reads its config with this package's
    class, so transformers never asks on stdin whether to run the folder's code (which read the sentences of
    `--input -` as the answer). Oracle: each line translated alone by `generate`, and the engine named."""
    pytest.importorskip("ctranslate2")
    assert "auto_map" in json.loads((Path(model_dir) / "config.json").read_text())
    lines = [num2words(i) for i in range(3, 40, 3)]
    result = console_script(["translate", "--model", model_dir, "--input", "-", "--num-beams", "1",
                             "--no-progress"], tmp_path, stdin="\n".join(lines).encode() + b"\n")
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    err = result.stderr.decode()
    assert "custom code" not in err + result.stdout.decode() and "Translating with CTranslate2" in err, err
    assert result.stdout.decode().splitlines() == one_at_a_time(model_dir, lines, num_beams=1)


@pytest.mark.parametrize("kind", ["device", "fifo", "link to a file"])
def test_an_output_that_is_a_device_a_pipe_or_a_link_is_written_into_never_replaced(model_dir, tmp_path, capsys,
                                                                                    kind):
    import stat
    import threading

    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    expected = one_at_a_time(model_dir, SENTENCES, num_beams=1)
    output, received = tmp_path / "out", []
    if kind == "device":
        os.symlink("/dev/null", output)
    elif kind == "fifo":
        os.mkfifo(output)
        reader = threading.Thread(target=lambda: received.append(output.read_bytes()), daemon=True)
        reader.start()
    else:
        (tmp_path / "target.txt").write_text("the user's old text\n")
        os.symlink("target.txt", output)
    code, out, err = run_cli(["translate", "--model", model_dir, "--input", str(source), "--output", str(output),
                              "--num-beams", "1", "--overwrite", "--no-progress"], capsys)
    assert code == 0, err
    if kind == "device":
        assert os.readlink(output) == "/dev/null" and stat.S_ISCHR(os.stat("/dev/null").st_mode)
    elif kind == "fifo":
        reader.join(timeout=60)
        assert stat.S_ISFIFO(os.lstat(output).st_mode)
        assert received[0].decode().split("\n")[:-1] == expected
    else:
        assert os.readlink(output) == "target.txt"  # the link kept, what it points to replaced when whole
        assert (tmp_path / "target.txt").read_text().split("\n")[:-1] == expected
    assert sorted(path.name for path in tmp_path.iterdir()) == sorted(["in.txt", "out"] + (
        ["target.txt"] if kind == "link to a file" else []))  # no .partial, no record left


@pytest.mark.parametrize("kind", ["fifo", "process substitution"])
def test_an_input_that_is_a_pipe_is_read_once(model_dir, tmp_path, capsys, kind):
    import threading

    if kind == "fifo":
        source = tmp_path / "fifo"
        os.mkfifo(source)
        writer = threading.Thread(target=lambda: source.write_text("\n".join(SENTENCES) + "\n"), daemon=True)
        writer.start()
        name = str(source)
    else:
        read_end, write_end = os.pipe()
        os.write(write_end, ("\n".join(SENTENCES) + "\n").encode())
        os.close(write_end)
        name = f"/dev/fd/{read_end}"
    try:
        code, out, err = run_cli(["translate", "--model", model_dir, "--input", name, "--output",
                                  str(tmp_path / "out.txt"), "--num-beams", "1", "--no-progress"], capsys)
    finally:
        if kind != "fifo":
            os.close(read_end)
    assert code == 0, err
    assert (tmp_path / "out.txt").read_text().split("\n")[:-1] == one_at_a_time(model_dir, SENTENCES, num_beams=1)
    code, out, err = run_cli(["translate", "--model", model_dir, "--input", str(tmp_path)], capsys)
    assert code == 2 and err.strip().splitlines()[-1].endswith(f"--input {tmp_path} is a folder: give a file")


@pytest.mark.slow  # a fresh interpreter
def test_a_reader_that_stops_reading_ends_the_command_quietly(ct2_dir, tmp_path):
    """`vanilla-transformer translate ... | head -1`: the command stops with SIGPIPE's status and says nothing."""
    from helpers import REPO_ROOT

    source = tmp_path / "in.txt"
    source.write_text("\n".join(num2words(i) for i in range(20_000)) + "\n")
    process = subprocess.Popen([sys.executable, "-c", "import sys, vanilla_transformer_cli; "
                                "vanilla_transformer_cli.main(sys.argv[1:])", "translate", "--model", ct2_dir,
                                "--input", str(source), "--no-progress", "--num-beams", "1"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=tmp_path,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert process.stdout.readline().strip()
    process.stdout.close()
    err = process.stderr.read().decode()
    assert process.wait(timeout=300) == 128 + signal.SIGPIPE
    assert "error" not in err and "Traceback" not in err, err
