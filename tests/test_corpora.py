"""Training on text files out of core (training/corpus_cache.py, training/cleaning.py,
training/text_corpus.py, training/streaming.py).

Oracles: the tokenizer's own calls counted while a run tokenizes, the cache folder's files, planted bad pairs of
each kind counted by construction, Python's gzip module and `wc -l`'s count of lines, tracemalloc's peak, an
uninterrupted run of the same streamed training, the token-budget cut written out with Python lists, and
`datasets`' own column access.
"""

import gzip
import json
import os
import random
import re
import subprocess
import sys
import tracemalloc

import datasets
import numpy as np
import pytest

from helpers import Interrupt, assert_resumed_like_uninterrupted, crash_at
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import text_lines
from vanilla_transformer.training.arrow_columns import length_columns, numpy_columns, select_rows
from vanilla_transformer.training.batching import TokenBudgetBatchSampler, cut_points
from vanilla_transformer.training.corpus_cache import check_pairs, read_corpus
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.train import main as train_main

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

TINY = ["--preset", "multi30k", "--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1",
        "--attention_heads", "2", "--ffn_dim", "64", "--vocab_size", "120", "--max_tokens", "300",
        "--max_source_length", "100", "--max_target_length", "100", "--report_to", "none", "--disable_tqdm", "true",
        "--average_last_n_checkpoints", "0", "--warmup_steps", "2", "--dropout", "0", "--num_sample_translations", "0"]
LETTERS = "abcdefghijklmnop"


def _words(rng, count):
    return " ".join("".join(rng.choice(LETTERS) for _ in range(rng.randint(2, 4))) for _ in range(count))


def distinct_pairs(n, seed=0):
    """`n` different pairs of 3-6 short words a side: never empty, far below 64 tokens, ratio below 9."""
    rng, pairs = random.Random(seed), {}
    while len(pairs) < n:
        pairs.setdefault((_words(rng, rng.randint(3, 6)), _words(rng, rng.randint(3, 6))), None)
    return list(pairs)


def write_pairs(folder, pairs, name="train", compress=False):
    opener = gzip.open if compress else open
    suffix = ".gz" if compress else ""
    paths = []
    for side, lang in ((0, "en"), (1, "de")):
        path = folder / f"{name}.{lang}{suffix}"
        with opener(path, "wt", encoding="utf-8") as f:
            f.write("".join(pair[side] + "\n" for pair in pairs))
        paths.append(str(path))
    return paths


def run_args(source, target, out, cache, *extra):
    return [*TINY, "--train_source", source, "--train_target", target, "--output_dir", str(out),
            "--data_cache_dir", str(cache), *extra]


class CountTokenizerCalls:
    """Counts the training sentences a run hands to the tokenizer: every encoder that training/corpus_cache.py makes
    (`batch_encoder`, around the fast tokenizer's batched calls) is wrapped."""

    def __init__(self, monkeypatch, sentences):
        from vanilla_transformer.training import corpus_cache

        self.sentences, self.seen = set(sentences), 0
        original = corpus_cache.batch_encoder

        def counting_encoder(*args, **kwargs):
            encode = original(*args, **kwargs)

            def counted(texts):
                self.seen += sum(text in self.sentences for text in texts)
                return encode(texts)

            return counted

        monkeypatch.setattr(corpus_cache, "batch_encoder", counting_encoder)


@pytest.mark.slow  # training runs
def test_a_second_run_tokenizes_nothing_and_a_changed_file_or_option_tokenizes_again(tmp_path, monkeypatch, capsys):
    pairs = distinct_pairs(200)
    source, target = write_pairs(tmp_path, pairs)
    cache = tmp_path / "cache"
    counter = CountTokenizerCalls(monkeypatch, [s for s, _ in pairs])
    train_main(run_args(source, target, tmp_path / "one", cache, "--max_steps", "1"))
    assert counter.seen == 200  # every source sentence once
    assert "Tokenized 200 training pairs into" in capsys.readouterr().out
    tokens = sorted(cache.glob("pairs-*/tokens-*.arrow"))
    assert len(tokens) == 1 and len(list(cache.glob("pairs-*/tokenizer-*/tokenizer.json"))) == 1

    counter.seen = 0
    train_main(run_args(source, target, tmp_path / "two", cache, "--max_steps", "1"))
    out = capsys.readouterr().out
    assert counter.seen == 0, "the second run tokenized training pairs"
    assert "Reusing the tokenized training pairs in" in out and "Reusing the BPE tokenizer in" in out
    assert sorted(cache.glob("pairs-*/tokens-*.arrow")) == tokens
    # the two runs trained on the same tokens: the same first loss
    losses = [json.loads((tmp_path / name / "trainer_state.json").read_text())["log_history"][-1]
              for name in ("one", "two")]
    assert losses[0]["train_loss"] == losses[1]["train_loss"]

    train_main(run_args(source, target, tmp_path / "three", cache, "--max_steps", "1", "--max_source_length", "60"))
    assert counter.seen == 200 and len(list(cache.glob("pairs-*/tokens-*.arrow"))) == 2  # a changed option
    counter.seen = 0
    with open(source, "a", encoding="utf-8") as f_source, open(target, "a", encoding="utf-8") as f_target:
        f_source.write("one more pair\n")
        f_target.write("noch ein paar\n")
    train_main(run_args(source, target, tmp_path / "four", cache, "--max_steps", "1"))
    assert counter.seen == 200 and len(list(cache.glob("pairs-*"))) == 2  # a changed file: read and tokenized anew
    assert json.loads((tmp_path / "four" / "all_results.json").read_text())["train_pairs_read"] == 201


@pytest.mark.slow  # a training run
def test_planted_bad_pairs_are_counted_per_rule_in_the_results_and_the_card(tmp_path):
    rng = random.Random(5)
    good = distinct_pairs(150, seed=1)
    planted = {
        "empty_side": [("", good[0][1]), (good[1][0], "   "), ("\t", "")],
        "too_long": [(_words(rng, 120), good[2][1]), (good[3][0], _words(rng, 130))],
        # a one-letter side (at most 2 tokens) against 25 words (25 to 75 tokens)
        "length_ratio": [("a", " ".join(["abcd"] * 25)), (" ".join(["mnop"] * 25), "b")],
        "duplicate": [good[4], good[5], good[4], good[9]],
    }
    # kept: the same source with another target, and the same pair with the sides swapped
    kept_extra = [(good[6][0], good[7][1]), (good[8][1], good[8][0])]
    corpus = good + kept_extra + [pair for rule in planted.values() for pair in rule]
    random.Random(0).shuffle(corpus)
    # a duplicate is the second occurrence: the first of each stays among the kept pairs
    source, target = write_pairs(tmp_path, corpus)
    out = tmp_path / "out"
    metrics = train_main(run_args(source, target, out, tmp_path / "cache", "--max_steps", "1"))
    expected = {rule: len(pairs) for rule, pairs in planted.items()}
    assert metrics["cleaning"] == expected
    assert metrics["train_pairs_read"] == len(corpus)
    assert metrics["train_pairs_used"] == len(good) + len(kept_extra)
    saved = json.loads((out / "all_results.json").read_text())
    assert saved["cleaning"] == expected and saved["train_pairs_used"] == len(good) + len(kept_extra)
    card = (out / "README.md").read_text()
    assert f"**training pairs**: {len(good) + len(kept_extra)}" in card
    assert f"**training pairs read**: {len(corpus)}" in card
    assert "empty side 3, too long 2, length ratio 2, duplicate 4" in card

    # the planted pairs break their rule under the tokenizer the run trained (the plant is sound)
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    for s, t in planted["length_ratio"]:
        n_s, n_t = (len(tokenizer(x)["input_ids"]) - 1 for x in (s, t))
        assert max(n_s, n_t) > 9 * min(n_s, n_t) and max(n_s, n_t) < 100
    for s, t in planted["too_long"]:
        assert max(len(tokenizer(s)["input_ids"]), len(tokenizer(t)["input_ids"])) > 100

    metrics = train_main(run_args(source, target, tmp_path / "kept", tmp_path / "cache", "--max_steps", "1",
                                  "--no_clean"))
    assert metrics["train_pairs_used"] == len(corpus) - 3 and metrics["cleaning"] == {"empty_side": 3}


@pytest.mark.slow  # training runs
def test_a_streamed_run_trains_resumes_like_an_uninterrupted_one_and_writes_no_cache(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(120), compress=True)
    cache = tmp_path / "cache"
    common = ["--streaming", "--max_steps", "8", "--save_steps", "4", "--logging_steps", "1",
              "--shuffle_buffer_pairs", "50", "--maxi_batch_pairs", "40"]
    full = tmp_path / "full"
    train_main(run_args(source, target, full, cache, *common))
    broken = tmp_path / "broken"
    with pytest.raises(Interrupt):
        train_main(run_args(source, target, broken, cache, *common), callbacks=[crash_at(5)])
    train_main(run_args(source, target, broken, cache, *common, "--resume_from_checkpoint", "true"))
    assert not cache.exists()

    assert_resumed_like_uninterrupted(broken, full, 8)
    results = json.loads((full / "all_results.json").read_text())
    assert results["train_pairs_read"] == 120 and "cleaning" not in results


def test_streaming_needs_a_number_of_steps(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(20))
    with pytest.raises(UsageError, match="--streaming reads the files as an endless stream: give --max_steps"):
        train_main(run_args(source, target, tmp_path / "out", tmp_path / "cache", "--streaming", "--max_steps", "-1"))
    assert not (tmp_path / "out").exists()


# ---------------------------------------------------------------------------------------------------------------
# Bad input: one line naming the file, nothing written


def _error_of(argv) -> str:
    """The one line `vanilla-transformer train` ends with (exit status 1)."""
    with pytest.raises(SystemExit) as raised:
        cli_main(["train", *argv])
    message = str(raised.value.code)
    assert raised.value.code == 1 and message.startswith("vanilla-transformer train: error: "), message
    assert "\n" not in message and "Traceback" not in message
    return message


def test_bad_training_files_stop_the_run_with_one_line_naming_the_file_and_write_nothing(tmp_path):
    good = distinct_pairs(30)
    source, target = write_pairs(tmp_path, good)
    cache, out = tmp_path / "cache", tmp_path / "out"
    cases = []
    missing = str(tmp_path / "missing.de")
    cases.append(((source, missing), [missing, "does not exist"]))
    short = tmp_path / "short.de"
    short.write_text("".join(t + "\n" for _, t in good[:-1]), encoding="utf-8")
    cases.append(((source, str(short)), [source, str(short), "30 lines", "29"]))
    truncated = tmp_path / "train.de.gz"
    data = gzip.compress("".join(t + "\n" for _, t in good * 50).encode())
    truncated.write_bytes(data[: len(data) // 2])
    cases.append(((source, str(truncated)), [str(truncated), "not a whole gzip file"]))
    latin = tmp_path / "latin.de"
    latin.write_bytes("".join(t + "\n" for _, t in good).encode()[:-4] + "\xe4\n".encode("latin-1"))
    cases.append(((source, str(latin)), [str(latin), "not UTF-8"]))
    blank_source = write_pairs(tmp_path, [("", t) for _, t in good], name="blank")[0]
    cases.append(((blank_source, target), [blank_source, "empty"]))
    emptied = write_pairs(tmp_path, [("a", " ".join(["abcd"] * 25))] * 5 + [("", "x")] * 3, name="emptied")
    cases.append((tuple(emptied), ["left after cleaning", emptied[0], "empty_side 3", "length_ratio 5",
                                   "duplicate 0"]))
    for (src, tgt), expected in cases:
        message = _error_of(run_args(src, tgt, out, cache, "--max_steps", "1"))
        for part in expected:
            assert part in message, (part, message)
        assert not out.exists(), message
        assert not list(cache.glob("pairs-*/*.arrow")) or expected[0] == "left after cleaning", message
    assert not list(cache.glob("**/*.tmp-*")) and not list(cache.glob("pairs-*/pairs.arrow.*"))


@pytest.mark.slow  # large files
def test_mismatched_line_counts_are_found_without_holding_the_files_in_memory(tmp_path, monkeypatch):
    from vanilla_transformer.files import text
    from vanilla_transformer.training import corpus_cache

    monkeypatch.setattr(corpus_cache, "PAIRS_PER_BATCH", 1_000)  # small batches and reads: the peak shows what is held
    monkeypatch.setattr(text, "READ_CHUNK_BYTES", 1 << 16)

    def peak_of_check(lines: int) -> tuple[int, int]:
        """(the peak of traced memory while the check reads files of `lines` and `lines + 7` lines, their size)."""
        source, target = tmp_path / f"{lines}.en", tmp_path / f"{lines}.de"
        source.write_text("".join(f"sentence number {i} of the source side\n" for i in range(lines)), encoding="utf-8")
        target.write_text("".join(f"Satz {i} der Zielseite\n" for i in range(lines + 7)), encoding="utf-8")
        counted = [int(subprocess.run(["wc", "-l", str(p)], capture_output=True, text=True).stdout.split()[0])
                   for p in (source, target)]
        tracemalloc.start()
        with pytest.raises(DataError) as raised:
            check_pairs(str(source), str(target), "train")
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        assert f"has {counted[0]:,} lines but {target} has {counted[1]:,}" in str(raised.value)
        return peak, os.path.getsize(source) + os.path.getsize(target)

    peak_of_check(10)  # what a first call imports and caches, which no file costs
    small, _ = peak_of_check(50_000)
    large, size = peak_of_check(200_000)
    # a batch of lines and a read buffer, the same for both files: four times the lines, not four times the memory
    assert large < 1.5 * small and large < size / 5, (small, large, size)


@pytest.mark.parametrize("compress", [False, True])
def test_lines_are_split_as_wc_counts_them_gzip_or_not(tmp_path, compress):
    text = "\ufefffirst line\r\nsecond\x0cline with a form feed\nthird\u2028line\rwith a lone CR\nlast, no newline"
    path = tmp_path / ("a.txt.gz" if compress else "a.txt")
    raw = text.encode("utf-8")
    path.write_bytes(gzip.compress(raw) if compress else raw)
    from vanilla_transformer.files import read_text_lines

    plain = tmp_path / "plain.txt"
    plain.write_bytes(raw)
    assert list(text_lines(str(path), "test")) == read_text_lines(str(plain)) == [
        "first line", "second\x0cline with a form feed", "third\u2028line\rwith a lone CR", "last, no newline"]


def test_a_cached_corpus_is_memory_mapped_and_read_again_only_when_a_file_changes(tmp_path):
    source, target = write_pairs(tmp_path, distinct_pairs(50))
    logged = []
    pairs, key = read_corpus(source, target, "train", str(tmp_path / "cache"), log=logged.append)
    assert pairs[7] == {"source": distinct_pairs(50)[7][0], "target": distinct_pairs(50)[7][1]}
    assert all(f["filename"].startswith(str(tmp_path / "cache")) for f in pairs.cache_files)  # on disk, mapped
    again, same_key = read_corpus(source, target, "train", str(tmp_path / "cache"), log=logged.append)
    assert same_key == key and logged[1].startswith("Reusing") and again["source"] == pairs["source"]
    os.utime(source, ns=(1, 1))
    assert read_corpus(source, target, "train", str(tmp_path / "cache"), log=logged.append)[1] != key


# ---------------------------------------------------------------------------------------------------------------
# The sampler on numpy length columns


def _greedy_batches(source, target, max_tokens, seed):
    """The token-budget cut written out with Python lists (the oracle)."""
    rng = np.random.default_rng(seed)
    order = np.lexsort((rng.permutation(len(source)), target, source))
    batches, batch, longest = [], [], 0
    for index in order.tolist():
        length = max(source[index], target[index])
        if batch and (len(batch) + 1) * max(longest, length) > max_tokens:
            batches.append(batch)
            batch, longest = [], 0
        batch.append(index)
        longest = max(longest, length)
    batches.append(batch)
    return batches


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_sampler_on_numpy_columns_makes_the_batches_of_the_greedy_cut(seed):
    rng = np.random.default_rng(seed)
    source = rng.integers(1, 90, size=5000).astype(np.int32)
    target = rng.integers(1, 90, size=5000).astype(np.int32)
    sampler = TokenBudgetBatchSampler(source, target, max_tokens=700, seed=seed)
    assert [b.tolist() for b in sampler.batches] == _greedy_batches(source.tolist(), target.tolist(), 700, seed)
    assert all(isinstance(b, list) for b in sampler)
    ends = cut_points(np.asarray([5, 5, 300, 2, 2, 2]), max_tokens=12)
    assert ends.tolist() == [2, 3, 6]  # a pair over the budget alone; three pairs of 2 within 12


def _chunked_token_columns(tmp_path, rows, seed):
    """A memory-mapped Arrow file of length and hash columns written in chunks of 1,000 rows, as `Dataset.map`
    writes the tokenized corpus."""
    rng = np.random.default_rng(seed)
    columns = {"source_length": rng.integers(1, 200, rows).astype(np.int32),
               "target_length": rng.integers(1, 200, rows).astype(np.int32),
               "pair_hash": rng.integers(0, 2**63, rows, dtype=np.uint64)}
    features = datasets.Features({"source_length": datasets.Value("int32"), "target_length": datasets.Value("int32"),
                                  "pair_hash": datasets.Value("uint64")})
    in_memory = datasets.Dataset.from_dict({name: list(range(rows)) for name in ["row"]})
    mapped = in_memory.map(lambda batch: {name: column[batch["row"]] for name, column in columns.items()},
                           batched=True, batch_size=1000, writer_batch_size=1000, remove_columns=["row"],
                           features=features, cache_file_name=str(tmp_path / f"columns-{seed}.arrow"))
    return mapped, columns


@pytest.mark.slow  # large data
@pytest.mark.parametrize("seed", [0, 1])
def test_columns_are_read_from_arrow_with_their_types_and_no_python_object_per_row(tmp_path, seed):
    names = ["source_length", "target_length", "pair_hash"]
    dataset, columns = _chunked_token_columns(tmp_path, 200_000, seed)
    assert dataset.data.column("pair_hash").num_chunks > 1
    tracemalloc.start()
    read = numpy_columns(dataset, names)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the three columns hold 16 bytes a row; a Python object per row (datasets' numpy formatter) would be 100+
    assert peak < 20 * len(dataset), peak / len(dataset)
    for name, array in zip(names, read):
        assert array.dtype == columns[name].dtype and np.array_equal(array, columns[name])
    # scattered rows (an indices mapping): the rows `datasets` itself returns for that selection
    kept = np.flatnonzero(np.random.default_rng(seed).random(5000) > 0.3)
    selected = dataset.select(range(5000)).select(kept)
    for name, array in zip(names, numpy_columns(selected, names)):
        assert np.array_equal(array, np.asarray(selected[name], dtype=columns[name].dtype))
    assert [array.tolist() for array in length_columns(selected)] == [selected["source_length"],
                                                                       selected["target_length"]]


@pytest.mark.slow  # large data
@pytest.mark.parametrize("seed", [0, 1])
def test_selected_rows_are_the_rows_datasets_selects_without_a_python_object_per_row(tmp_path, seed):
    names = ["source_length", "target_length", "pair_hash"]
    dataset, columns = _chunked_token_columns(tmp_path, 200_000, seed)
    rng = np.random.default_rng(seed)
    rows = np.flatnonzero(rng.random(len(dataset)) > 0.1).astype(np.int32)  # what the cleaning keeps
    tracemalloc.start()
    selected = select_rows(dataset, rows)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert peak < 12 * len(rows), peak / len(rows)  # the 8-byte indices; `Dataset.select` makes a Python list of them
    expected = dataset.select(rows)
    assert len(selected) == len(expected) == len(rows)
    probe = rng.integers(0, len(rows), 300).tolist()
    assert selected[probe] == expected[probe]
    assert [array.tolist() for array in numpy_columns(selected, names)] == [
        array.tolist() for array in numpy_columns(expected, names)]
    # on a selection, the rows of the selection; an empty choice and one out of range
    again = rng.permutation(len(rows))[:1000]
    assert select_rows(selected, again)[:] == expected.select(again)[:]
    assert len(select_rows(dataset, np.zeros(0, dtype=np.int64))) == 0
    for wrong in ([len(dataset)], [-1]):
        with pytest.raises(IndexError, match="within the dataset's 200000 rows"):
            select_rows(dataset, np.asarray(wrong))


@pytest.mark.parametrize("seed", [0, 1])
def test_lengths_given_to_the_trainer_make_the_batches_of_its_own_columns_and_wrong_ones_are_refused(tmp_path, seed):
    from helpers import tiny_model
    from vanilla_transformer.training.trainer import TranslationTrainer, TranslationTrainingArguments

    rng = np.random.default_rng(seed)
    source, target = rng.integers(2, 40, 500).astype(np.int32), rng.integers(2, 40, 500).astype(np.int32)
    dataset = datasets.Dataset.from_dict({"input_ids": [[5] * n for n in source.tolist()],
                                          "labels": [[6] * n for n in target.tolist()],
                                          "source_length": source, "target_length": target})
    args = TranslationTrainingArguments(output_dir=str(tmp_path), max_tokens=200, learning_rate=1e-3,
                                        report_to="none", seed=seed)
    from_columns = TranslationTrainer(model=tiny_model(seed), args=args, train_dataset=dataset)
    given = TranslationTrainer(model=tiny_model(seed), args=args, train_dataset=dataset,
                               train_lengths=(source, target))
    assert [b.tolist() for b in given.token_batch_sampler.batches] == [
        b.tolist() for b in from_columns.token_batch_sampler.batches]
    with pytest.raises(ValueError, match="train_lengths gives 499 source and 500 target lengths for a training set "
                                         "of 500 pairs"):
        TranslationTrainer(model=tiny_model(seed), args=args, train_dataset=dataset,
                           train_lengths=(source[:-1], target))


# ---------------------------------------------------------------------------------------------------------------
# Two processes (torchrun, gloo on the CPU)


@pytest.mark.slow  # two processes (torchrun)
def test_two_gloo_processes_tokenize_once_and_split_the_single_process_batches(tmp_path):
    """One process with --gradient_accumulation_steps 2 takes batches 2k and 2k + 1 at step k; two processes take
    one each. Without dropout, the same losses mean the same batches, split between the ranks."""
    source, target = write_pairs(tmp_path, distinct_pairs(160))
    common = ["--max_steps", "3", "--save_steps", "3", "--logging_steps", "1"]
    train_main(run_args(source, target, tmp_path / "one", tmp_path / "cache-one", *common,
                        "--gradient_accumulation_steps", "2"))
    cache = tmp_path / "cache-two"
    result = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", "-m",
         "vanilla_transformer.training.train", *run_args(source, target, tmp_path / "two", cache, *common)],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=400,
        env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": REPO_ROOT},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = result.stdout
    assert out.count("Tokenized 160 training pairs") == 1 and out.count("Read 160 train pairs") == 1, out[-3000:]
    assert "[process 1] Reusing the tokenized training pairs" in out and "[process 1] Reusing the BPE tokenizer" in out
    assert len(list(cache.glob("pairs-*/tokens-*.arrow"))) == 1 and len(list(cache.glob("pairs-*"))) == 1

    def losses(folder):
        state = json.loads((folder / "trainer_state.json").read_text())
        return {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}

    one, two = losses(tmp_path / "one"), losses(tmp_path / "two")
    assert sorted(two) == [1, 2, 3]
    for step in (1, 2, 3):
        assert two[step] == pytest.approx(one[step], rel=1e-4), step

def _first_rule_broken(s, t, max_s, max_t):
    """clean-corpus-n.perl's checks in its order, on token counts that include </s> (the oracle)."""
    if s - 1 == 0 or t - 1 == 0:
        return "empty_side"
    if s > max_s or t > max_t:
        return "too_long"
    if (s - 1) / (t - 1) > 9 or (t - 1) / (s - 1) > 9:
        return "length_ratio"
    return None


@pytest.mark.parametrize("seed", [0, 1])
def test_the_cache_and_the_stream_drop_the_pairs_the_rules_written_out_drop(seed):
    from vanilla_transformer.training.cleaning import pair_rules
    from vanilla_transformer.training.streaming import StreamingTokenBatches

    rng = np.random.default_rng(seed)
    source = rng.choice([1, 2, 3, 10, 19, 20, 21, 28, 29, 30, 64, 65, 80], size=3000).astype(np.int32)
    target = rng.choice([1, 2, 3, 10, 19, 20, 21, 28, 29, 30, 64, 65, 80], size=3000).astype(np.int32)
    expected = [_first_rule_broken(s, t, 64, 30) for s, t in zip(source.tolist(), target.tolist())]
    assert set(expected) == {"empty_side", "too_long", "length_ratio", None}  # every case is met

    broken = pair_rules(source, target, 64, 30)
    assert [next((rule for rule, mask in broken.items() if mask[i]), None) for i in range(len(source))] == expected
    stream = StreamingTokenBatches("unused", "unused", tokenizer=None, max_source_length=64, max_target_length=30,
                                   max_tokens=100)
    batch = {"input_ids": [[5] * n for n in source.tolist()], "labels": [[6] * n for n in target.tolist()]}
    assert stream.keep(batch) == [rule is None for rule in expected]



@pytest.mark.parametrize("max_length", [4, 9, 200])
def test_the_batch_encoder_gives_the_ids_of_the_tokenizers_own_truncating_call(max_length):
    from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer
    from vanilla_transformer.training.corpus_cache import batch_encoder

    tokenizer = tiny_tokenizer()
    texts = ENGLISH + GERMAN + ["", "  ", "ünïcödé ☃ text"]
    assert batch_encoder(tokenizer, max_length)(texts) == tokenizer(texts, max_length=max_length,
                                                                    truncation=True)["input_ids"]
    assert batch_encoder(tokenizer, max_length, target=True)(texts) == tokenizer(
        text_target=texts, max_length=max_length, truncation=True)["input_ids"]
    assert tokenizer(ENGLISH[:1])["input_ids"] == tiny_tokenizer()(ENGLISH[:1])["input_ids"]  # the copy truncates


# ---------------------------------------------------------------------------------------------------------------
# The BPE vocabulary from a sample; streaming under a time budget


@pytest.mark.slow  # a training run
def test_the_bpe_vocabulary_is_trained_on_a_seeded_sample_of_sentences_recorded_in_the_card(tmp_path):
    """--tokenizer_sample_lines 100 on 200 pairs (400 sentences): both sides of 50 pairs drawn by numpy's seeded
    generator. Oracle: the `tokenizers` BPE trainer run on exactly those sentences, picked here from the files; the
    streamed run picks the same ones in its single pass over the files."""
    from tokenizers import Tokenizer

    from vanilla_transformer.training.tokenizer import train_tokenizer

    pairs = distinct_pairs(200, seed=3)
    source, target = write_pairs(tmp_path, pairs)
    chosen = sorted(np.random.default_rng(7).choice(200, size=50, replace=False).tolist())
    expected = train_tokenizer([side for i in chosen for side in pairs[i]], vocab_size=120, model_max_length=100)
    expected_vocab = Tokenizer.from_str(expected.backend_tokenizer.to_str()).get_vocab()
    for name, extra in (("cached", []), ("streamed", ["--streaming"])):
        out = tmp_path / name
        train_main(run_args(source, target, out, tmp_path / "cache", "--max_steps", "1", "--seed", "7",
                            "--tokenizer_sample_lines", "100", *extra))
        saved = Tokenizer.from_file(str(out / "tokenizer.json"))
        assert saved.get_vocab() == expected_vocab, name
        card = (out / "README.md").read_text()
        assert ("**tokenizer**: BPE vocabulary trained on a random sample (seed 7) of 50 of the 200 training pairs "
                "(100 sentences)") in card, name
    # a sample as large as the corpus is the whole corpus, and the card says nothing of a sample
    train_main(run_args(source, target, tmp_path / "whole", tmp_path / "cache", "--max_steps", "1",
                        "--tokenizer_sample_lines", "400"))
    assert "random sample" not in (tmp_path / "whole" / "README.md").read_text()


@pytest.mark.slow  # a training run
def test_a_streamed_run_under_a_time_budget_trains_the_planned_steps_and_writes_no_cache(tmp_path, capsys):
    """--streaming with --max_train_minutes and no --max_steps: the budget's plan (here from a given step time, so
    the same on any machine: int(0.97 * 15 s / 0.5 s) = 29 steps) sets the length of the endless stream."""
    source, target = write_pairs(tmp_path, distinct_pairs(60, seed=4))
    out, cache = tmp_path / "out", tmp_path / "cache"
    metrics = train_main(run_args(source, target, out, cache, "--streaming", "--max_train_minutes", "0.25",
                                  "--budget_seconds_per_step", "0.5", "--lr_scheduler_type", "linear", "--logging_steps", "1",
                                  "--shuffle_buffer_pairs", "30", "--maxi_batch_pairs", "20"))
    console = capsys.readouterr().out
    assert "-> 29 steps expected" in console
    state = json.loads((out / "trainer_state.json").read_text())
    assert state["global_step"] == metrics["time_budget"]["total_steps"] == 29
    losses = [entry["loss"] for entry in state["log_history"] if "loss" in entry]
    assert len(losses) == 29 and all(np.isfinite(losses))
    lr = [entry["learning_rate"] for entry in state["log_history"] if "learning_rate" in entry]
    assert lr[-1] < 0.1 * max(lr)  # the decay reached its end at the planned last step
    assert metrics["train_pairs_read"] == 60 and not cache.exists()
    assert (out / "model.safetensors").is_file()
    # a stream counts no used pairs: the card says it was streamed, not "None"; the speed is counted in pairs, each
    # batch holding at least one pair and at most --max_tokens / 2 (a pair has 2 tokens at least)
    card = (out / "README.md").read_text()
    assert "**training pairs**: None" not in card and "**training pairs**: streamed from the 60 pairs" in card
    assert "train_pairs_used" not in metrics
    pairs_trained = metrics["train_samples_per_second"] * metrics["train_runtime"]
    assert 29 * 0.99 <= pairs_trained <= 29 * 300 / 2, pairs_trained
    # the console's and trainer_state.json's end-of-training line say the same speed, not the Trainer's
    # steps x --per_device_train_batch_size
    printed = re.findall(r"'train_samples_per_second': '([^']+)'", console)
    logged = [entry["train_samples_per_second"] for entry in state["log_history"] if "train_samples_per_second" in entry]
    assert len(printed) == len(logged) == 1, console[-2000:]
    assert float(printed[0]) == pytest.approx(metrics["train_samples_per_second"], rel=1e-3) == logged[0]
