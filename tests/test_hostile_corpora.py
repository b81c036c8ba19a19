"""Training files as a hostile user hands them over: pipes, damaged caches, pathological lines, caches that cannot
be written, compressed and mis-encoded files, an output folder holding an input (files/text.py,
training/corpus_cache.py, training/text_corpus.py, training/streaming.py, training/run_folder.py).

Oracles: bash's process substitution and `cat` (real pipes), Python's gzip, bz2 and lzma modules, pyarrow's own
stream writer (a cache cut exactly at a record-batch boundary), /dev/full (the kernel's ENOSPC), the files' own
lines, and the exit status and one-line message of the command.
"""

import bz2
import gzip
import json
import lzma
import os
import shlex
import subprocess
import sys

import datasets
import pyarrow as pa
import pytest
from test_corpora import distinct_pairs, run_args, write_pairs

from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import TextFileError, read_text_lines
from vanilla_transformer.training import corpus_cache
from vanilla_transformer.training.corpus_cache import read_corpus, tokenize_corpus
from vanilla_transformer.training.data_sources import language_from_extension
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.train import main as train_main

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ENV = {**os.environ, "PYTHONPATH": REPO_ROOT, "OMP_NUM_THREADS": "1"}


def _bash(script: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
                          env=ENV)


def _one_line_error(result: subprocess.CompletedProcess, *parts: str) -> str:
    lines = result.stderr.strip().splitlines()
    assert result.returncode in (1, 2) and lines, (result.returncode, result.stderr[-2000:])
    assert "Traceback" not in result.stderr, result.stderr[-3000:]
    for part in parts:
        assert part in lines[-1], (part, lines[-1])
    return lines[-1]


# ---------------------------------------------------------------------------------------------------------------
# Pipes: read exactly once


def _read_fifos(tmp_path, source: str, target: str, cache: str, logged: list):
    """`read_corpus` on two FIFOs fed by `cat`, in a thread the test waits for at most a minute."""
    import threading

    fifos = []
    for path, name in ((source, "source.fifo"), (target, "target.fifo")):
        fifo = tmp_path / name
        if not fifo.exists():
            os.mkfifo(fifo)
        fifos.append((path, fifo))
    writers = [subprocess.Popen(["bash", "-c", f"cat {shlex.quote(path)} > {shlex.quote(str(fifo))}"])
               for path, fifo in fifos]
    result = []
    reader = threading.Thread(target=lambda: result.append(read_corpus(str(fifos[0][1]), str(fifos[1][1]), "train",
                                                                       cache, log=logged.append)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    for writer in writers:
        writer.wait(timeout=60)
    assert result, "read_corpus did not finish"
    return result[0]


def test_fifos_are_read_once_into_the_cache_with_every_pair(tmp_path):
    pairs = distinct_pairs(3000, seed=2)  # more than a pipe's 64 KiB buffer: a second open would lose lines
    source, target = write_pairs(tmp_path, pairs)
    cache, logged = str(tmp_path / "cache"), []
    dataset, key = _read_fifos(tmp_path, source, target, cache, logged)
    assert dataset["source"] == [s for s, _ in pairs] and dataset["target"] == [t for _, t in pairs]
    again, same = _read_fifos(tmp_path, source, target, cache, logged)
    assert same == key and len(again) == 3000 and logged[-1].startswith("Reusing"), logged


@pytest.mark.slow  # two interpreters started by bash
def test_process_substitution_is_read_once_into_the_cache_with_every_pair(tmp_path):
    """`<(cat a) <(cat b)`: bash hands over two pipes (/dev/fd/N). Each is opened and read once, every pair lands in
    the cache, and the same content piped again finds it there."""
    pairs = distinct_pairs(3000, seed=2)  # more than a pipe's 64 KiB buffer: a second open would lose lines
    source, target = write_pairs(tmp_path, pairs)
    cache = tmp_path / "cache"
    program = ("import sys, json; from vanilla_transformer.training.corpus_cache import read_corpus; "
               "d, key = read_corpus(sys.argv[1], sys.argv[2], 'train', sys.argv[3]); "
               "print(json.dumps([len(d), d[0]['source'], d[len(d) - 1]['target'], key]))")
    script = (f"{shlex.quote(sys.executable)} -c {shlex.quote(program)} <(cat {shlex.quote(source)}) "
              f"<(cat {shlex.quote(target)}) {shlex.quote(str(cache))}")
    results = []
    for _ in range(2):
        result = _bash(script, timeout=120)
        assert result.returncode == 0, result.stderr[-3000:]
        results.append(json.loads(result.stdout.strip().splitlines()[-1]))
        assert results[-1][:3] == [3000, pairs[0][0], pairs[-1][1]], results[-1]
    assert results[0][3] == results[1][3]  # the same content: the same cache entry
    assert "Reusing" in result.stdout and len(list(cache.glob("pairs-*/pairs.arrow"))) == 1


def test_a_fifo_is_opened_once(tmp_path):
    """A FIFO whose writer (`cat`) writes once: a reader that opened it twice would wait forever for a second
    writer (the reader runs in a thread that the test waits for at most a minute)."""
    import threading

    lines = [f"line {i} " + "x" * 40 for i in range(5000)]  # 240 KB: more than a pipe holds
    fifo = tmp_path / "fifo.en"
    os.mkfifo(fifo)
    text = tmp_path / "lines.txt"
    text.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    writer = subprocess.Popen(["bash", "-c", f"cat {shlex.quote(str(text))} > {shlex.quote(str(fifo))}"])
    read = []
    reader = threading.Thread(target=lambda: read.append(read_text_lines(fifo)), daemon=True)
    reader.start()
    reader.join(timeout=60)
    writer.wait(timeout=60)
    assert read and read[0] == lines


def test_the_tokenizer_trains_on_a_fifo_read_once(tmp_path):
    """`train_tokenizer(files=[FIFO])` learns the vocabulary of the whole text: the oracle is the same call on the
    plain file (the training runs in a thread the test waits for at most a minute: a second open would wait forever)."""
    import threading

    from vanilla_transformer.training.tokenizer import train_tokenizer

    text = tmp_path / "plain.en"
    text.write_text("".join(f"{s}\n{t}\n" for s, t in distinct_pairs(3000, seed=5)), encoding="utf-8")
    fifo = tmp_path / "fifo.en"
    os.mkfifo(fifo)
    writer = subprocess.Popen(["bash", "-c", f"cat {shlex.quote(str(text))} > {shlex.quote(str(fifo))}"])
    trained = []
    thread = threading.Thread(target=lambda: trained.append(train_tokenizer(files=[fifo], vocab_size=150)),
                              daemon=True)
    thread.start()
    thread.join(timeout=60)
    writer.wait(timeout=60)
    assert trained and trained[0].get_vocab() == train_tokenizer(files=[text], vocab_size=150).get_vocab()


def test_streaming_from_a_fifo_is_refused_before_it_is_opened(tmp_path):
    """Opening a FIFO waits for its writer: the refusal comes before any open (a hang otherwise)."""
    fifo = tmp_path / "pipe.en"
    os.mkfifo(fifo)
    target = write_pairs(tmp_path, distinct_pairs(20))[1]
    with pytest.raises(UsageError, match="--streaming reads the training files again and again, but .* is a pipe"):
        train_main(run_args(str(fifo), target, tmp_path / "out", tmp_path / "cache", "--streaming", "--max_steps",
                            "2"))
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_a_pipe_in_a_run_of_several_processes_is_refused_before_it_is_opened(tmp_path):
    from types import SimpleNamespace

    from vanilla_transformer.training.text_corpus import open_text_corpus

    fifo = tmp_path / "pipe.de"
    os.mkfifo(fifo)
    source = write_pairs(tmp_path, distinct_pairs(20))[0]
    data_args = SimpleNamespace(train_source=source, train_target=str(fifo), streaming=False, verify_corpus=False,
                                data_cache_dir=str(tmp_path / "cache"), max_train_samples=None)
    training_args = SimpleNamespace(world_size=2, process_index=0)
    with pytest.raises(UsageError, match=f"{fifo} is a pipe .* every process of this 2-process run"):
        open_text_corpus(data_args, training_args)
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow  # a command in a subprocess
def test_streaming_from_a_pipe_is_refused_in_one_line(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(50))
    tokenizer = tmp_path / "tok"
    from vanilla_transformer.training.tokenizer import train_tokenizer

    train_tokenizer([s for pair in distinct_pairs(50) for s in pair], vocab_size=120).save_pretrained(tokenizer)
    argv = run_args("SOURCE", "TARGET", tmp_path / "out", tmp_path / "cache", "--streaming", "--max_steps", "2",
                    "--tokenizer_name", str(tokenizer))
    quoted = " ".join(shlex.quote(a) for a in argv).replace("SOURCE", f"<(cat {shlex.quote(source)})").replace(
        "TARGET", f"<(cat {shlex.quote(target)})")
    result = _bash(f"{shlex.quote(sys.executable)} -m vanilla_transformer.training.train {quoted}", timeout=150)
    _one_line_error(result, "--streaming", "pipe")
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


@pytest.mark.slow  # a training run in a subprocess
def test_a_training_run_on_process_substitution_trains_on_every_pair(tmp_path):
    pairs = distinct_pairs(2000, seed=4)
    source, target = write_pairs(tmp_path, pairs, compress=True)
    argv = run_args("SOURCE", "TARGET", tmp_path / "out", tmp_path / "cache", "--max_steps", "1",
                    "--source_lang", "en", "--target_lang", "de")
    quoted = " ".join(shlex.quote(a) for a in argv).replace("SOURCE", f"<(zcat {shlex.quote(source)})").replace(
        "TARGET", f"<(zcat {shlex.quote(target)})")
    result = _bash(f"{shlex.quote(sys.executable)} -m vanilla_transformer.training.train {quoted}", timeout=400)
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads((tmp_path / "out" / "all_results.json").read_text())
    assert results["train_pairs_read"] == 2000 and results["train_pairs_used"] == 2000
    card = (tmp_path / "out" / "README.md").read_text()
    assert "**training pairs**: 2000" in card and "fd" not in card.split("## Training")[0].split()


# ---------------------------------------------------------------------------------------------------------------
# Compressed and mis-encoded files


@pytest.mark.parametrize("module, suffix", [(gzip, ".gz"), (bz2, ".bz2"), (lzma, ".xz")])
def test_gzip_bzip2_and_xz_files_read_as_the_plain_file(tmp_path, module, suffix):
    raw = "".join(f"satz {i} für\r\n" for i in range(3000)).encode() + b"last"
    plain, packed = tmp_path / "a.de", tmp_path / f"a.de{suffix}"
    plain.write_bytes(raw)
    packed.write_bytes(module.compress(raw))
    assert read_text_lines(packed) == read_text_lines(plain) == raw.decode().replace("\r\n", "\n").split("\n")
    cut = tmp_path / f"cut.de{suffix}"
    cut.write_bytes(module.compress(raw)[:-20])
    with pytest.raises(TextFileError) as raised:
        read_text_lines(cut, "train target file")
    message = str(raised.value)
    assert str(cut) in message and "not a whole" in message and "\n" not in message


@pytest.mark.parametrize("name, data, hint", [
    ("utf16le.en", "one\ntwo\n".encode("utf-16-le"), "UTF-16"),  # no byte-order mark: valid UTF-8 full of NULs
    ("utf16be.en", "eins\nzwei für\n".encode("utf-16-be"), "UTF-16"),
    ("bom.en", "one\ntwo\n".encode("utf-16"), "UTF-16"),
    ("packed.en.zst", b"\x28\xb5\x2f\xfd" + bytes(range(40)), "zstd -d"),
])
def test_undecodable_files_get_a_hint_that_fits_them(tmp_path, name, data, hint):
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TextFileError) as raised:
        read_text_lines(path, "train source file")
    message = str(raised.value)
    assert str(path) in message and hint in message and "latin1" not in message and "\n" not in message, message


def _program_head() -> bytes:
    """The first 2,000 bytes of this Python's executable (ELF on Linux, Mach-O on macOS): a binary file."""
    with open(os.path.realpath(sys.executable), "rb") as f:
        return f.read(2000)


NUL_CASES = [
    ("program.en", _program_head(), "binary file", "UTF-16"),  # NULs everywhere: no text form puts them so
    ("zeros.en", bytes(4096), "binary file", "UTF-16"),
    ("program.en.gz", gzip.compress(_program_head()), "binary file", "UTF-16"),
    ("image.en", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00\x01\x00\x00\x00\x01\x00\x08\x06\x00\x00\x00", "binary file",
     "UTF-16"),
    ("utf32le.en", "one\ntwo\n".encode("utf-32-le"), "UTF-32", "binary"),
    ("utf32be.en", "eins\nzwei für\n".encode("utf-32-be"), "UTF-32", "binary"),
    ("utf32bom.en", "one\ntwo\n".encode("utf-32"), "UTF-32", "binary"),
    ("utf16cjk.en", "这是中文。\n那是日本語。\n".encode("utf-16-le"), "UTF-16", "binary"),  # NULs at newlines only
]


@pytest.mark.parametrize("name, data, hint, not_said", NUL_CASES, ids=[case[0] for case in NUL_CASES])
def test_nul_bytes_get_the_hint_of_the_form_that_puts_them_there(tmp_path, name, data, hint, not_said):
    """A UTF-16 or UTF-32 hint only where the NULs follow that form's pattern (every second or fourth byte, on one
    side); NULs anywhere else are a binary file's."""
    path = tmp_path / name
    path.write_bytes(data)
    with pytest.raises(TextFileError) as raised:
        read_text_lines(path, "--input file")
    message = str(raised.value)
    assert str(path) in message and hint in message and not_said not in message and "\n" not in message, message


def test_languages_are_never_read_from_a_compression_suffix():
    assert language_from_extension("data/train.en.gz") == "en"
    assert language_from_extension("data/train.de.xz") == "de"
    assert language_from_extension("data/train.fr.bz2") == "fr"
    assert language_from_extension("data/train.gz") is None
    assert language_from_extension("data/train.de") == "de"


# ---------------------------------------------------------------------------------------------------------------
# A cache that validates itself


def _cut_at_batch(path, batches: int) -> None:
    """Cut the Arrow stream file `path` right after its first `batches` record batches: a valid, shorter stream."""
    with pa.ipc.open_stream(pa.memory_map(str(path))) as reader:
        schema, kept = reader.schema, [reader.read_next_batch() for _ in range(batches)]
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in kept:
            writer.write_batch(batch)
    length = sink.getvalue().size - 8  # without the end-of-stream marker the writer adds at close
    assert path.read_bytes()[:length] == sink.getvalue().to_pybytes()[:length]  # the same bytes, written the same way
    os.truncate(path, length)


@pytest.mark.parametrize("damage", ["batch_boundary", "mid_batch", "emptied", "record_removed"])
def test_a_damaged_pairs_cache_is_read_again_with_a_notice(tmp_path, monkeypatch, damage):
    monkeypatch.setattr(corpus_cache, "PAIRS_PER_BATCH", 100)
    pairs = distinct_pairs(400, seed=1)
    source, target = write_pairs(tmp_path, pairs)
    cache = str(tmp_path / "cache")
    key = read_corpus(source, target, "train", cache, log=lambda line: None)[1]  # its mapping released
    (arrow,) = (tmp_path / "cache").glob("pairs-*/pairs.arrow")
    if damage == "batch_boundary":
        _cut_at_batch(arrow, 3)
        with pa.ipc.open_stream(pa.memory_map(str(arrow))) as reader:
            assert reader.read_all().num_rows == 300  # pyarrow reads the cut file without a word
    elif damage == "mid_batch":
        os.truncate(arrow, arrow.stat().st_size // 2 + 3)
    elif damage == "emptied":
        arrow.write_bytes(b"")
    else:
        for record in arrow.parent.glob("*.json"):
            record.unlink()
    logged = []
    again, same_key = read_corpus(source, target, "train", cache, log=logged.append)
    assert same_key == key and len(again) == 400 and again[399] == {"source": pairs[399][0], "target": pairs[399][1]}
    assert not any(line.startswith("Reusing") for line in logged), logged
    if damage != "record_removed":
        assert any("damaged" in line and str(arrow) in line for line in logged), logged
    logged.clear()
    read_corpus(source, target, "train", cache, log=logged.append)
    assert logged[0].startswith("Reusing"), logged


def test_a_damaged_tokens_cache_is_tokenized_again_and_a_sample_never_stands_for_the_whole(tmp_path):
    from translation_fixtures import tiny_tokenizer

    tokenizer = tiny_tokenizer()
    source, target = write_pairs(tmp_path, distinct_pairs(300, seed=3))
    cache = str(tmp_path / "cache")
    pairs, key = read_corpus(source, target, "train", cache, log=lambda line: None)

    def tokens(rows, logged):
        return tokenize_corpus(rows, key, tokenizer, 64, 64, clean=True, cache_dir=cache, log=logged.append)

    logged = []
    sample = tokens(pairs.select(range(100)), logged)  # --max_train_samples 100
    assert len(sample) == 100
    whole = tokens(pairs, logged)
    assert len(whole) == 300, "the first 100 pairs stood for the whole corpus"
    assert whole[299]["input_ids"] == tokenizer(pairs[299]["source"], max_length=65, truncation=True)["input_ids"]
    last = whole[299]["input_ids"]
    del whole  # memory-mapped: the truncation below would pull the pages from under it
    arrow = next(p for p in (tmp_path / "cache").glob("pairs-*/tokens-*.arrow") if len(datasets.Dataset.from_file(
        str(p))) == 300)
    os.truncate(arrow, arrow.stat().st_size // 2)
    logged.clear()
    again = tokens(pairs, logged)
    assert len(again) == 300 and again[299]["input_ids"] == last
    assert any("damaged" in line for line in logged) and not any(line.startswith("Reusing") for line in logged)


def test_a_damaged_cached_tokenizer_is_trained_again_with_a_notice(tmp_path, capsys):
    import contextlib
    from types import SimpleNamespace

    from vanilla_transformer.training.text_corpus import TextCorpus, cached_tokenizer
    from vanilla_transformer.training.tokenizer import train_tokenizer

    source, target = write_pairs(tmp_path, distinct_pairs(100, seed=6))
    cache = str(tmp_path / "cache")
    corpus = TextCorpus(source, target, False, cache)
    corpus.pairs, corpus.key = read_corpus(source, target, "train", cache, log=lambda line: None)
    corpus.pairs_read = len(corpus.pairs)
    data_args = SimpleNamespace(vocab_size=120, tokenizer_sample_lines=1000, max_source_length=64,
                                max_target_length=64)
    training_args = SimpleNamespace(seed=0, world_size=1, process_index=0,
                                    main_process_first=lambda desc: contextlib.nullcontext())

    def train(texts):
        return train_tokenizer(texts, vocab_size=120)

    first = cached_tokenizer(corpus, data_args, training_args, train)
    (saved,) = (tmp_path / "cache").glob("pairs-*/tokenizer-*/tokenizer.json")
    saved.write_text(saved.read_text()[:100])  # cut short
    capsys.readouterr()
    again = cached_tokenizer(corpus, data_args, training_args, train)
    out = capsys.readouterr().out
    assert "is damaged" in out and "Trained the BPE tokenizer" in out and "Reusing" not in out, out
    assert again.get_vocab() == first.get_vocab()
    assert "Reusing the BPE tokenizer" in (cached_tokenizer(corpus, data_args, training_args, train) and
                                           capsys.readouterr().out)


def test_an_in_place_edit_that_keeps_size_and_mtime_is_read_again(tmp_path):
    source, target = write_pairs(tmp_path, [("a b c", "x y z"), ("d e f", "u v w")])
    cache = str(tmp_path / "cache")
    first, key = read_corpus(source, target, "train", cache, log=lambda line: None)
    status = os.stat(source)
    with open(source, "r+b") as f:  # the same bytes count, the same modification time
        f.write(b"A B C")
    os.utime(source, ns=(status.st_atime_ns, status.st_mtime_ns))
    assert os.stat(source).st_size == status.st_size and os.stat(source).st_mtime_ns == status.st_mtime_ns
    again, new_key = read_corpus(source, target, "train", cache, log=lambda line: None)
    assert new_key != key and again[0]["source"] == "A B C"


def test_verify_corpus_finds_an_edit_the_file_system_does_not_show(tmp_path, monkeypatch):
    """On a file system whose sizes, times and inodes say nothing (here: the identity made of the path alone), only
    the content hash of --verify_corpus sees the edit."""
    monkeypatch.setattr(corpus_cache, "file_identity", lambda path, status: [os.path.abspath(path)])
    source, target = write_pairs(tmp_path, [("a b c", "x y z"), ("d e f", "u v w")])
    cache = str(tmp_path / "cache")
    read_corpus(source, target, "train", cache, log=lambda line: None)
    with open(source, "r+b") as f:
        f.write(b"A B C")
    stale, _ = read_corpus(source, target, "train", cache, log=lambda line: None)
    assert stale[0]["source"] == "a b c"  # what the identity alone cannot see
    logged = []
    fresh, _ = read_corpus(source, target, "train", cache, log=logged.append, verify=True)
    assert fresh[0]["source"] == "A B C" and any("changed" in line for line in logged), logged
    logged.clear()
    read_corpus(source, target, "train", cache, log=logged.append, verify=True)
    assert logged[-1].startswith("Reusing"), logged


def test_verify_corpus_with_streaming_is_a_usage_error(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    with pytest.raises(UsageError, match="--verify_corpus checks the corpus cache, which --streaming does not use"):
        train_main(run_args(source, target, tmp_path / "out", tmp_path / "cache", "--streaming", "--max_steps", "2",
                            "--verify_corpus"))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------
# A cache folder that cannot take the files


def test_a_full_disk_is_one_line_naming_the_cache_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """Every file the cache writes goes to /dev/full, which the kernel answers with ENOSPC."""
    real = pa.OSFile
    monkeypatch.setattr(pa, "OSFile", lambda path, mode="r": real("/dev/full", mode) if "w" in mode else
                        real(path, mode))
    source, target = write_pairs(tmp_path, distinct_pairs(50))
    cache = tmp_path / "cache"
    with pytest.raises(ValueError) as raised:
        read_corpus(source, target, "train", str(cache), log=lambda line: None)
    message = str(raised.value)
    assert str(cache) in message and "No space left" in message and "\n" not in message, message
    assert [p.name for p in cache.iterdir()] == [], list(cache.iterdir())


def test_a_disk_that_fills_while_tokenizing_is_one_line_and_leaves_no_temporary_file(tmp_path, monkeypatch):
    """`datasets.map` writes the tokens into a temporary file: here a link to /dev/full (the kernel's ENOSPC)."""
    import tempfile

    import datasets.arrow_dataset

    from translation_fixtures import tiny_tokenizer

    source, target = write_pairs(tmp_path, distinct_pairs(50))
    cache = tmp_path / "cache"
    pairs, key = read_corpus(source, target, "train", str(cache), log=lambda line: None)
    made = tempfile.NamedTemporaryFile

    def on_a_full_disk(*args, **kwargs):
        file = made(*args, **kwargs)
        file.close()
        os.remove(file.name)
        os.symlink("/dev/full", file.name)
        return open(file.name, "wb")

    monkeypatch.setattr(datasets.arrow_dataset.tempfile, "NamedTemporaryFile", on_a_full_disk)
    with pytest.raises(ValueError) as raised:
        tokenize_corpus(pairs, key, tiny_tokenizer(), 64, 64, clean=True, cache_dir=str(cache), log=lambda line: None)
    message = str(raised.value)
    assert message == f"Cannot write to {cache}: No space left on device.", message
    assert [p.name for p in cache.iterdir()] == [f"pairs-{key}"]
    assert sorted(p.name for p in (cache / f"pairs-{key}").iterdir()) == ["files.json", "pairs.arrow"]


def test_temporary_files_of_killed_runs_are_removed_and_nothing_else(tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                              text=True)
    dead = int(finished.stdout)
    cache = tmp_path / "cache"
    killed = cache / corpus_cache.staging_folder_name(dead)
    killed.mkdir(parents=True)
    (killed / corpus_cache.STAGING_MARKER).write_text("")
    (killed / "pairs.arrow").write_bytes(b"half")
    killed_thread = cache / corpus_cache.staging_folder_name(dead, user="tokens")  # a thread's, of the same run
    killed_thread.mkdir()
    (killed_thread / corpus_cache.STAGING_MARKER).write_text("")
    alive = cache / corpus_cache.staging_folder_name(os.getppid())
    alive.mkdir()
    (alive / corpus_cache.STAGING_MARKER).write_text("")
    for name in (".staging-notes", "mine.txt"):
        (cache / name).write_text("the user's")
    foreign = cache / f"{corpus_cache.staging_folder_name(dead)}-copy"
    foreign.mkdir()
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    logged = []
    read_corpus(source, target, "train", str(cache), log=logged.append)
    assert not killed.exists() and not killed_thread.exists() and alive.exists() and foreign.exists()
    assert (cache / ".staging-notes").exists() and (cache / "mine.txt").exists()
    assert any(str(killed) in line and "killed" in line for line in logged), logged


def _error_of(argv) -> str:
    from vanilla_transformer.cli.main import main as cli_main

    with pytest.raises(SystemExit) as raised:
        cli_main(["train", *argv])
    message = str(raised.value.code)
    assert message.startswith("vanilla-transformer train: error: ") and "\n" not in message, message
    return message


def test_a_cache_folder_that_is_a_file_is_one_line_before_any_work(tmp_path, monkeypatch):
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    blocker = tmp_path / "cache-file"
    blocker.write_text("not a folder")
    read = []
    monkeypatch.setattr(corpus_cache, "text_lines", lambda *a, **k: read.append(a) or iter(()))
    message = _error_of(run_args(source, target, tmp_path / "out", blocker / "sub", "--max_steps", "1"))
    assert "--data_cache_dir" in message or "--data-cache-dir" in message
    assert str(blocker) in message and not read and not (tmp_path / "out").exists()


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_a_read_only_cache_folder_is_one_line_before_any_work(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o555)
    try:
        message = _error_of(run_args(source, target, tmp_path / "out", cache, "--max_steps", "1"))
    finally:
        cache.chmod(0o755)
    assert str(cache) in message and not (tmp_path / "out").exists()


def test_a_cache_inside_a_new_output_folder_is_refused_before_any_work(tmp_path, monkeypatch):
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    out = tmp_path / "out"
    read = []
    monkeypatch.setattr(corpus_cache, "text_lines", lambda *a, **k: read.append(a) or iter(()))
    with pytest.raises(UsageError, match="inside --output_dir|inside --output-dir"):
        train_main(run_args(source, target, out, out / "cache", "--max_steps", "1"))
    assert not read and not out.exists()


@pytest.mark.parametrize("overwrite", [True, False])
def test_the_output_folder_may_never_hold_an_input(tmp_path, overwrite):
    out = tmp_path / "out"
    out.mkdir()
    pairs = distinct_pairs(20)
    predictions = out / "test_predictions.txt"
    predictions.write_text("".join(s + "\n" for s, _ in pairs))
    from vanilla_transformer.files import write_manifest

    write_manifest(out)  # an earlier run's folder: its predictions are the project's own file
    target = write_pairs(tmp_path, pairs)[1]
    before = predictions.read_bytes()
    extra = ["--overwrite_output_dir", "true"] if overwrite else []
    with pytest.raises(UsageError) as raised:
        train_main(run_args(str(predictions), target, out, tmp_path / "cache", "--max_steps", "1", *extra))
    message = str(raised.value)
    assert str(predictions) in message and str(out) in message and "\n" not in message
    assert predictions.read_bytes() == before and "test_predictions.txt" in [p.name for p in out.iterdir()]
    assert not (tmp_path / "cache").exists()


# ---------------------------------------------------------------------------------------------------------------
# Pathological lines and streams


def test_a_long_word_is_cut_for_the_vocabulary_and_encoded_whole():
    """A 200,000-character word took over a minute of BPE training (quadratic in its length); cut into pieces it
    takes about a second (the bound leaves room for a loaded machine), and the tokenizer still encodes and decodes it
    whole."""
    import random
    import time

    from vanilla_transformer.training.tokenizer import MAX_WORD_CHARS, train_tokenizer

    rng = random.Random(1)
    word = "".join(rng.choice("abcdefghij") for _ in range(200_000))
    started = time.monotonic()
    tokenizer = train_tokenizer(["the cat sat on the mat"] * 20 + [word, "a " + word[:500]], vocab_size=300)
    assert time.monotonic() - started < 30
    assert max(len(token) for token in tokenizer.get_vocab()) <= MAX_WORD_CHARS
    assert tokenizer.decode(tokenizer("a " + word)["input_ids"], skip_special_tokens=True) == "a " + word
    # the saved tokenizer splits on spaces only: the cut is the trainer's
    assert tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str("ab " + "c" * 100)[-1][0] == "▁" + "c" * 100


@pytest.mark.slow  # a 1 MB line through the tokenizer command in a subprocess
def test_a_megabyte_line_without_spaces_trains_a_tokenizer_in_linear_time(tmp_path):
    """BPE training is quadratic in a word's length: long words are cut into pieces for it (as SentencePiece's
    max_sentencepiece_length). A 1 MB word took minutes; with the cut, seconds."""
    import random

    rng = random.Random(0)
    big = tmp_path / "big.en"
    big.write_text("the cat sat on the mat\n" * 20 + "".join(rng.choice("abcdefghij") for _ in range(1_000_000))
                   + "\n", encoding="utf-8")
    out = tmp_path / "tok"
    result = subprocess.run([sys.executable, "-m", "vanilla_transformer.training.tokenizer", "--files", str(big),
                             "--vocab-size", "200", "--output-dir", str(out)], capture_output=True, text=True,
                            timeout=180, env=ENV)
    assert result.returncode == 0, result.stderr[-2000:]
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    from vanilla_transformer.training.tokenizer import MAX_WORD_CHARS

    assert max(len(token) for token in tokenizer.get_vocab()) <= 1 + MAX_WORD_CHARS
    line = big.read_text(encoding="utf-8").splitlines()[-1]
    assert tokenizer.decode(tokenizer(line)["input_ids"], skip_special_tokens=True) == line  # nothing lost


@pytest.mark.slow  # a command in a subprocess
def test_streaming_when_cleaning_drops_every_pair_is_one_line_and_leaves_no_lock(tmp_path):
    bad = [("a", " ".join(["abcd"] * 30))] * 40  # every pair breaks the length ratio
    source, target = write_pairs(tmp_path, bad)
    out = tmp_path / "out"
    argv = run_args(source, target, out, tmp_path / "cache", "--streaming", "--max_steps", "3")
    result = subprocess.run([sys.executable, "-m", "vanilla_transformer.training.train", *argv], capture_output=True,
                            text=True, timeout=150, env=ENV, cwd=REPO_ROOT)
    _one_line_error(result, "left after cleaning", source)
    assert not out.exists() or not any(p.name.endswith(".lock") or p.name.startswith(".") for p in out.iterdir())
    assert not (tmp_path / "cache").exists()


def test_streaming_checks_every_pass_reaches_a_pair_before_the_run_writes(tmp_path):
    """The check at the function level: a stream whose pairs all break a rule says so in one line."""
    from translation_fixtures import tiny_tokenizer
    from vanilla_transformer.training.streaming import StreamingTokenBatches

    source, target = write_pairs(tmp_path, [("a", " ".join(["abcd"] * 30))] * 40)
    stream = StreamingTokenBatches(source, target, tiny_tokenizer(), max_source_length=64, max_target_length=64,
                                   max_tokens=200)
    with pytest.raises(DataError, match="left after cleaning"):
        stream.check_some_pair_is_kept()
    good = StreamingTokenBatches(*write_pairs(tmp_path, distinct_pairs(30), name="good"), tiny_tokenizer(),
                                 max_source_length=64, max_target_length=64, max_tokens=200)
    good.check_some_pair_is_kept()
