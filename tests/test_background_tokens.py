"""Training while the corpus is tokenized (training/background_tokens.py, `--train_while_tokenizing`): the oracle for
the tokens and the cleaning is the cached path's own (`corpus_cache.tokenize_corpus`, `cleaning.clean_corpus`,
`batching.TokenBudgetBatchSampler`), run on its own cache."""

import errno
import itertools
import json
import os
import random

import numpy as np
import pytest

from helpers import Interrupt, assert_resumed_like_uninterrupted, crash_at, step_losses
from tests.test_corpora import distinct_pairs, run_args, write_pairs
from vanilla_transformer.files import OutputError
from vanilla_transformer.training import background_tokens
from vanilla_transformer.training.arrow_columns import length_columns, numpy_columns
from vanilla_transformer.training.background_tokens import TrainingWhileTokenizing, block_bounds, block_order
from vanilla_transformer.training.batching import TokenBudgetBatchSampler
from vanilla_transformer.training.cleaning import clean_corpus
from vanilla_transformer.training.corpus_cache import read_corpus, tokenize_corpus
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.training.train import main as train_main

LIMIT = 24  # max source / target length of these tests: some planted pairs are longer


def planted_corpus(tmp_path, seed: int, n: int = 400):
    """`n` pairs: distinct ones, exact duplicates of earlier ones (some in other blocks), a few too long for LIMIT,
    one with an empty side; written as files and read into a cache."""
    rng = random.Random(seed)
    pairs = distinct_pairs(n, seed)
    for i in range(0, n, 7):
        pairs[i] = pairs[rng.randrange(n)]  # a duplicate, anywhere in the corpus
    for i in rng.sample(range(n), 5):
        pairs[i] = (" ".join(["abcd efgh"] * 20), pairs[i][1])
    pairs[rng.randrange(n)] = ("", "leer")
    source, target = write_pairs(tmp_path, pairs)
    read, key = read_corpus(source, target, "train", str(tmp_path / "cache"), log=lambda line: None)
    texts = [side for pair in pairs for side in pair if side]
    tokenizer = train_tokenizer(texts, vocab_size=150, min_frequency=1, model_max_length=64)
    return read, key, tokenizer


def stream(read, key, tokenizer, cache, seed, block_pairs=64, **kwargs):
    return TrainingWhileTokenizing(read, key, tokenizer, max_source_length=LIMIT, max_target_length=LIMIT,
                                   max_tokens=200, cache_dir=str(cache), seed=seed, maxi_batch_pairs=50,
                                   block_pairs=block_pairs, log=lambda line: None, **kwargs)


def as_tuples(batch):
    return [(tuple(example["input_ids"]), tuple(example["labels"])) for example in batch]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_stream_trains_every_kept_pair_once_then_the_cached_paths_epochs(tmp_path, seed):
    read, key, tokenizer = planted_corpus(tmp_path, seed)
    # the oracle: the cached path on a cache of its own
    reference = tokenize_corpus(read, key, tokenizer, LIMIT, LIMIT, clean=True, cache_dir=str(tmp_path / "oracle"),
                                log=lambda line: None)
    kept, counts = clean_corpus(reference, read, LIMIT, LIMIT, lengths=length_columns(reference))
    assert counts["duplicate"] > 0 and counts["too_long"] > 0 and counts["empty_side"] == 1
    ids = reference.select_columns(["input_ids", "labels"])
    kept_pairs = [(tuple(row["input_ids"]), tuple(row["labels"])) for row in ids.select(kept)]

    cleaned = []
    batches = stream(read, key, tokenizer, tmp_path / "cache", seed, on_cleaned=lambda *a: cleaned.append(a))
    assert batches.thread is not None  # the cache held no tokens: a thread tokenizes them
    first_pass, iterator = [], iter(batches)
    while len(first_pass) < len(kept_pairs):
        batch = next(iterator)
        assert sum(1 for _ in batch) >= 1
        longest = max(max(len(e["input_ids"]), len(e["labels"])) for e in batch)
        assert len(batch) == 1 or len(batch) * longest <= 200  # the token budget
        first_pass.extend(as_tuples(batch))
    # pass 0: every pair the cleaning keeps, each once (a duplicate's kept copy may be a later row: the same pair)
    assert sorted(first_pass) == sorted(kept_pairs)
    assert first_pass != kept_pairs  # visited in blocks in a seeded order, shuffled

    # then the cached path's epochs 1, 2 over the same kept rows
    sampler = TokenBudgetBatchSampler(*(column[kept] for column in length_columns(reference)), 200, seed=seed)
    rows = ids.select(kept)
    for epoch in (1, 2):
        sampler.set_epoch(epoch)
        for expected in sampler:
            assert as_tuples(next(iterator)) == as_tuples([rows[i] for i in expected])
    assert len(cleaned) == 1 and cleaned[0][1] == counts and np.array_equal(cleaned[0][0], kept)

    # the thread installed the same tokenized copy the cached path makes (same key), in the corpus's order
    batches.thread.join()
    assert not list((tmp_path / "cache").glob(".staging-*"))  # the thread's staging folder, removed
    record = next((tmp_path / "cache").glob("pairs-*/tokens-*.json"))
    assert record.name == next((tmp_path / "oracle").glob("pairs-*/tokens-*.json")).name
    assert len(json.loads(record.read_text())["files"]) == len(block_bounds(len(read), 64)) > 3
    installed = tokenize_corpus(read, key, tokenizer, LIMIT, LIMIT, clean=True, cache_dir=str(tmp_path / "cache"),
                                log=lambda line: None)
    for column in ("source_length", "target_length", "pair_hash"):
        assert np.array_equal(*(numpy_columns(d, [column])[0] for d in (installed, reference)))
    assert installed["input_ids"] == reference["input_ids"] and installed["labels"] == reference["labels"]
    assert not list((tmp_path / "cache").glob(".staging-*"))


@pytest.mark.parametrize("seed", [0, 3])
def test_a_stream_read_from_the_cache_is_the_stream_that_tokenized(tmp_path, seed):
    """The batches do not depend on whether the run tokenized: a resumed run sees the killed one's stream."""
    read, key, tokenizer = planted_corpus(tmp_path, seed)
    tokenizing = stream(read, key, tokenizer, tmp_path / "cache", seed)
    first = [as_tuples(batch) for batch in itertools.islice(iter(tokenizing), 60)]
    tokenizing.finish()
    reading = stream(read, key, tokenizer, tmp_path / "cache", seed)
    assert reading.thread is None  # found whole in the cache
    assert [as_tuples(batch) for batch in itertools.islice(iter(reading), 60)] == first
    assert [as_tuples(batch) for batch in itertools.islice(iter(reading), 60)] == first  # a second iteration too
    other = stream(read, key, tokenizer, tmp_path / "cache", seed + 10)
    assert [as_tuples(batch) for batch in itertools.islice(iter(other), 60)] != first  # the seed orders them


def test_the_blocks_cover_the_corpus_once_in_a_seeded_order():
    for pairs, size in ((1, 5), (10, 5), (11, 5), (1000, 64)):
        bounds = block_bounds(pairs, size)
        assert [i for start, end in bounds for i in range(start, end)] == list(range(pairs))
        assert all(end - start <= size for start, end in bounds)
    assert sorted(block_order(40, 0)) == list(range(40)) and block_order(40, 0) == block_order(40, 0)
    assert block_order(40, 0) != block_order(40, 1)


def test_a_full_disk_in_the_thread_is_one_line_in_the_training_loop_and_nothing_is_cached(tmp_path, monkeypatch):
    """Also: the thread stages in a folder of its own, which a killed run's successor removes."""
    read, key, tokenizer = planted_corpus(tmp_path, 0)
    original = TrainingWhileTokenizing._write_block
    written = []

    def fills_the_disk(self, start, end, path):
        assert os.path.basename(os.path.dirname(path)).endswith("-tokens")  # not the process's own folder
        if len(written) == 2:
            raise OSError(errno.ENOSPC, "No space left on device", path)
        written.append(path)
        return original(self, start, end, path)

    monkeypatch.setattr(TrainingWhileTokenizing, "_write_block", fills_the_disk)
    batches = stream(read, key, tokenizer, tmp_path / "cache", 0)
    with pytest.raises(OutputError) as raised:
        list(itertools.islice(iter(batches), 1000))
    assert "\n" not in str(raised.value) and "No space left" in str(raised.value)
    with pytest.raises(OutputError):
        batches.finish()
    assert not list((tmp_path / "cache").glob("pairs-*/tokens-*")) and not list((tmp_path / "cache").glob(".st*"))


@pytest.mark.slow  # training runs
def test_a_run_training_while_tokenizing_resumes_like_an_uninterrupted_one(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(background_tokens, "BLOCK_PAIRS", 40)
    pairs = distinct_pairs(150)
    pairs[10] = pairs[100]
    source, target = write_pairs(tmp_path, pairs)
    common = ["--train_while_tokenizing", "true", "--max_steps", "12", "--save_steps", "4", "--logging_steps", "1",
              "--maxi_batch_pairs", "30"]
    full = tmp_path / "full"
    train_main(run_args(source, target, full, tmp_path / "cache-full", *common))
    out = capsys.readouterr().out
    assert "Training while the 150 training pairs are tokenized" in out and "Tokenized 150 training pairs" in out
    broken = tmp_path / "broken"
    with pytest.raises(Interrupt):
        train_main(run_args(source, target, broken, tmp_path / "cache", *common), callbacks=[crash_at(5)])
    capsys.readouterr()
    train_main(run_args(source, target, broken, tmp_path / "cache", *common, "--resume_from_checkpoint", "true"))
    out = capsys.readouterr().out  # the killed run left the tokens whole: the resumed one reads them
    assert "Training while the 150" in out and "Reusing the tokenized training pairs" in out

    assert_resumed_like_uninterrupted(broken, full, 12)
    results = json.loads((full / "all_results.json").read_text())
    assert results["train_pairs_read"] == 150 and results["train_pairs_used"] == 149
    assert results["cleaning"]["duplicate"] == 1
    assert len(list((tmp_path / "cache").glob("pairs-*/tokens-*.arrow"))) == 4  # 150 pairs in blocks of 40


def test_asking_for_it_where_it_cannot_work_is_one_line(tmp_path):
    from vanilla_transformer.cli.options import UsageError

    source, target = write_pairs(tmp_path, distinct_pairs(30))
    for extra, reason in ((["--max_steps", "-1", "--num_train_epochs", "1"], "--max_steps or --max_train_minutes"),
                          (["--max_steps", "2", "--bpe_dropout", "0.1"], "no --bpe_dropout"),
                          (["--max_steps", "2", "--streaming"], "not --streaming")):
        with pytest.raises(UsageError, match=f"--train_while_tokenizing needs .*{reason}"):
            train_main(run_args(source, target, tmp_path / "out", tmp_path / "cache", "--train_while_tokenizing",
                                "true", *extra))
        assert not (tmp_path / "out").exists()


def test_a_corpus_the_cleaning_empties_is_one_line_before_anything_is_written(tmp_path):
    from vanilla_transformer.training.messages import DataError

    rng = random.Random(0)
    long_sources = [" ".join(f"w{rng.randrange(50)}" for _ in range(150)) for _ in range(90)]
    source, target = write_pairs(tmp_path, [(text, "kurz") for text in long_sources])
    with pytest.raises(DataError, match=r"^No training pair is left after cleaning \(empty_side 0, too_long 90"):
        train_main(run_args(source, target, tmp_path / "out", tmp_path / "cache", "--train_while_tokenizing", "true",
                            "--max_steps", "2"))
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # training runs
def test_a_resumed_run_trains_as_its_checkpoint_was_trained(tmp_path, monkeypatch, capsys):
    """A checkpoint says whether its run trained while tokenizing; a resume with the option unset follows it (an
    older checkpoint without the record was made by a run that waited), so the corpus's size cannot switch the
    batches of a run half-way; told otherwise, the resumed run says that its batches differ."""
    from vanilla_transformer.training import text_corpus

    monkeypatch.setattr(background_tokens, "BLOCK_PAIRS", 40)
    monkeypatch.setattr(text_corpus, "TRAIN_WHILE_TOKENIZING_PAIRS", 100)  # this corpus trains while tokenizing
    source, target = write_pairs(tmp_path, distinct_pairs(150))
    common = ["--max_steps", "12", "--save_steps", "4", "--logging_steps", "1", "--maxi_batch_pairs", "30"]
    full = tmp_path / "full"
    train_main(run_args(source, target, full, tmp_path / "cache", *common, "--train_while_tokenizing", "false"))
    broken = tmp_path / "broken"
    with pytest.raises(Interrupt):
        train_main(run_args(source, target, broken, tmp_path / "cache", *common, "--train_while_tokenizing", "false"),
                   callbacks=[crash_at(5)])
    record = broken / "checkpoint-4" / background_tokens.BATCHES_RECORD
    assert json.loads(record.read_text()) == {"train_while_tokenizing": False}
    record.unlink()  # as a checkpoint made before the record existed
    capsys.readouterr()
    train_main(run_args(source, target, broken, tmp_path / "cache", *common, "--resume_from_checkpoint", "true"))
    assert "Training while" not in capsys.readouterr().out

    resumed, uninterrupted = step_losses(broken)[1], step_losses(full)[1]
    assert resumed == pytest.approx(uninterrupted, rel=1e-4) and sorted(resumed) == list(range(1, 13))

    fresh = tmp_path / "fresh"  # unset, no checkpoint: the corpus's size decides
    with pytest.raises(Interrupt):
        train_main(run_args(source, target, fresh, tmp_path / "cache", *common), callbacks=[crash_at(5)])
    assert "Training while the 150 training pairs" in capsys.readouterr().out
    assert json.loads((fresh / "checkpoint-4" / background_tokens.BATCHES_RECORD).read_text()) == {
        "train_while_tokenizing": True}
    train_main(run_args(source, target, fresh, tmp_path / "cache", *common, "--resume_from_checkpoint", "true",
                        "--train_while_tokenizing", "false"))
    assert "was trained with --train_while_tokenizing true: resumed with false" in capsys.readouterr().out


def test_max_samples_below_one_are_one_usage_line():
    from vanilla_transformer.training.arguments import DataArguments

    for name in ("max_train_samples", "max_eval_samples", "max_test_samples"):
        with pytest.raises(ValueError, match=f"^--{name} must be at least 1, got 0$"):
            DataArguments(**{name: 0})


def test_a_tokenizer_saved_with_truncation_set_names_the_same_tokenized_copy(tmp_path):
    """A checkpoint's tokenizer.json can carry the truncation a call set (a resumed run loads it): the tokenized
    copy's key ignores it, since the encoders set their own; the vocabulary still counts."""
    from transformers import AutoTokenizer

    from vanilla_transformer.training.corpus_cache import tokens_fingerprint

    texts = [side for pair in distinct_pairs(200) for side in pair]
    tokenizer = train_tokenizer(texts, vocab_size=150, min_frequency=1, model_max_length=64)
    key = tokens_fingerprint("pairs", tokenizer, 60, 60, True, 200)
    tokenizer(texts[:3], max_length=20, truncation=True, padding="max_length")  # sets both on the backend
    tokenizer.save_pretrained(tmp_path / "checkpoint")
    saved = AutoTokenizer.from_pretrained(tmp_path / "checkpoint")
    assert json.loads((tmp_path / "checkpoint" / "tokenizer.json").read_text())["truncation"] is not None
    assert tokens_fingerprint("pairs", saved, 60, 60, True, 200) == key
    assert saved.backend_tokenizer.truncation is not None  # the tokenizer itself is left as it was
    other = train_tokenizer(texts, vocab_size=140, min_frequency=1, model_max_length=64)
    assert tokens_fingerprint("pairs", other, 60, 60, True, 200) != key
