"""Training on several corpora of text files (`--train_source a.en bt.en --train_target a.de bt.de`, with
`--train_weights` and `--train_tags`): training/text_corpus.py (`Corpora`, `weighted_rows`,
`corpora_training_set`, `check_tags_absent`), training/build.py (`with_tags`), training/arguments.py
(`check_training_corpora`), the card's table of corpora (training/summary.py, `distinct_names`).

Oracles: pairs planted per cleaning rule and counted by construction, the pairs written to the files (decoded back
from the training set's token ids), the tokenizer's own tokenization of a tagged sentence, the cache's files and
their modification times, the tokenizer calls counted while a run tokenizes, the single-corpus code path, the
weights' rows as their definition makes them (copies sorted) and numpy's allocations as tracemalloc counts them.
"""

import json
import os
import random
import tracemalloc
from collections import Counter

import numpy as np
import pytest
from test_corpora import TINY, CountTokenizerCalls, _words, distinct_pairs, write_pairs

from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.training import text_corpus
from vanilla_transformer.training.arguments import parse_arguments
from vanilla_transformer.training.batching import TokenBudgetBatchSampler
from vanilla_transformer.training.summary import distinct_names
from vanilla_transformer.training.text_corpus import (
    Corpora,
    TextCorpus,
    cached_training_set,
    corpora_training_set,
    open_text_corpus,
    open_training_corpora,
    weighted_rows,
)
from vanilla_transformer.training.tokenizer import train_tokenizer
from vanilla_transformer.training.train import main as train_main


def corpora_args(corpora, out, cache, *extra):
    """The train command's options for the corpora [(source, target), ...]."""
    return [*TINY, "--train_source", *(s for s, _ in corpora), "--train_target", *(t for _, t in corpora),
            "--output_dir", str(out), "--data_cache_dir", str(cache), *extra]


def two_corpora(tmp_path, sizes=(60, 40)):
    """Two corpora of distinct pairs in folders of their own (no pair in both): -> (their pairs, their files)."""
    pairs = distinct_pairs(sum(sizes), seed=3)
    first, second = pairs[:sizes[0]], pairs[sizes[0]:]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    return (first, second), [tuple(write_pairs(tmp_path / "a", first)),
                             tuple(write_pairs(tmp_path / "b", second, name="bt"))]


def saved_tokenizer(tmp_path, pairs, tags=()):
    """A demo-sized BPE tokenizer trained on the pairs, with `tags` as special tokens, saved for --tokenizer_name."""
    tokenizer = train_tokenizer([s for pair in pairs for s in pair], vocab_size=120)
    if tags:
        tokenizer.add_special_tokens({"extra_special_tokens": list(tags)})
    folder = tmp_path / "tokenizer"
    tokenizer.save_pretrained(folder)
    return tokenizer, str(folder)


def training_set(argv, tokenizer):
    """The training pairs a run of `argv` would train on: (Corpora or TextCorpus, dataset, lengths)."""
    data_args, _, training_args, _ = parse_arguments(argv)
    corpus = open_training_corpora(data_args, training_args)
    if isinstance(corpus, Corpora):
        return (corpus, *corpora_training_set(corpus, tokenizer, data_args, training_args))
    return (corpus, *cached_training_set(corpus, tokenizer, data_args, training_args, False))


def decoded_pairs(dataset, tokenizer):
    """(source, target) text of every row, the tags and other special tokens dropped."""
    return [(tokenizer.decode(row["input_ids"], skip_special_tokens=True),
             tokenizer.decode(row["labels"], skip_special_tokens=True)) for row in dataset]


# ---------------------------------------------------------------------------------------------------------------
# Weights


@pytest.mark.parametrize("seed", [0, 1, 7])
def test_weights_draw_whole_copies_and_a_seeded_share_without_replacement(seed):
    count = 101
    assert np.array_equal(weighted_rows(count, 1.0, seed, 0), np.arange(count))
    assert Counter(weighted_rows(count, 2.0, seed, 0).tolist()) == Counter({row: 2 for row in range(count)})
    half = weighted_rows(count, 0.5, seed, 0)
    assert len(half) == 51 and len(set(half.tolist())) == 51 and set(half.tolist()) <= set(range(count))
    assert np.array_equal(half, weighted_rows(count, 0.5, seed, 0))  # the same seed: the same half
    assert not np.array_equal(half, weighted_rows(count, 0.5, seed + 100, 0))  # another seed: another half
    assert not np.array_equal(half, weighted_rows(count, 0.5, seed, 1))  # another corpus: another half
    one_and_a_half = Counter(weighted_rows(count, 1.5, seed, 0).tolist())
    assert sorted(one_and_a_half.values()) == [1] * 50 + [2] * 51 and set(one_and_a_half) == set(range(count))
    assert len(weighted_rows(count, 0.001, seed, 0)) == 0  # 0.1 pairs round to none


def _tiled_rows(count, weight, seed, corpus_index):
    """The rows of `weighted_rows` as its definition says them: every row int(weight) times and the seeded extra
    ones, sorted (copies of every row, then a sort: several times the memory of the result)."""
    whole = int(weight)
    rows = [np.tile(np.arange(count, dtype=np.int64), whole)]
    extra = int((weight - whole) * count + 0.5)
    if extra:
        rows.append(np.sort(np.random.default_rng([seed, corpus_index]).choice(count, size=extra, replace=False)))
    return np.sort(np.concatenate(rows), kind="stable")


def test_weights_draw_the_defined_rows_in_the_memory_of_the_rows_alone():
    rng = np.random.default_rng(4)
    for count, weight in [(0, 2.5), (1, 0.5), (101, 1.0), (101, 3.25), *[(int(rng.integers(1, 500)),
                                                                      float(rng.uniform(0.01, 9))) for _ in range(20)]]:
        for seed, corpus_index in ((0, 0), (7, 2)):
            rows = weighted_rows(count, weight, seed, corpus_index)
            assert rows.dtype == np.int64 and np.array_equal(rows, _tiled_rows(count, weight, seed, corpus_index))
    tracemalloc.start()  # numpy reports its allocations to tracemalloc
    try:
        rows = weighted_rows(1000, 2000.5, 0, 0)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(rows) == 2_000_500 and peak < 1.1 * rows.nbytes  # no copy of the rows beside them


def test_the_run_trains_on_the_exact_multiset_the_weights_give(tmp_path):
    (first, second), files = two_corpora(tmp_path)
    tokenizer, folder = saved_tokenizer(tmp_path, first + second)

    def multiset(seed):
        argv = corpora_args(files, tmp_path / "out", tmp_path / "cache", "--tokenizer_name", folder,
                            "--train_weights", "2", "0.5", "--seed", str(seed))
        corpora, dataset, (source_lengths, target_lengths) = training_set(argv, tokenizer)
        assert [c.pairs_drawn for c in corpora.parts] == [120, 20] and corpora.pairs_used == 140
        assert np.array_equal(source_lengths, [len(row) for row in dataset["input_ids"]])
        assert np.array_equal(target_lengths, [len(row) for row in dataset["labels"]])
        return Counter(decoded_pairs(dataset, tokenizer))

    drawn = multiset(42)
    assert all(drawn[pair] == 2 for pair in first)  # weight 2: every pair of the first corpus twice
    from_second = {pair: n for pair, n in drawn.items() if pair not in set(first)}
    assert len(from_second) == 20 and set(from_second) <= set(second) and set(from_second.values()) == {1}
    assert sum(drawn.values()) == 140
    assert multiset(42) == drawn  # the same seed: the same half
    assert multiset(43) != drawn  # another seed: another half (of 40 choose 20 halves)


# ---------------------------------------------------------------------------------------------------------------
# Tags


def test_a_tag_is_one_token_at_the_start_of_the_tagged_corpus_sources_and_nowhere_else(tmp_path):
    (first, second), files = two_corpora(tmp_path)
    tokenizer, folder = saved_tokenizer(tmp_path, first + second, tags=["<BT>"])
    tag = tokenizer.convert_tokens_to_ids("<BT>")
    assert "<BT>" in tokenizer.all_special_tokens and tokenizer.tokenize("<BT>") == ["<BT>"]
    argv = corpora_args(files, tmp_path / "out", tmp_path / "cache", "--tokenizer_name", folder,
                        "--train_tags", "none", "<BT>")
    _, dataset, (source_lengths, _) = training_set(argv, tokenizer)
    rows = list(dataset)
    assert len(rows) == 100
    for row, (source, target) in zip(rows, first + second):  # weight 1 each: every pair once, in file order
        tagged = (source, target) in set(second)
        assert row["input_ids"][0] == tag if tagged else tag not in row["input_ids"]
        assert row["input_ids"].count(tag) == int(tagged) and tag not in row["labels"]
        # the tokenizer's own reading of the tag written before the sentence
        assert row["input_ids"] == tokenizer(f"<BT> {source}" if tagged else source)["input_ids"]
    assert np.array_equal(source_lengths, [len(row["input_ids"]) for row in rows])


def test_the_recipe_trains_the_tag_into_its_vocabulary_and_a_checkpoint_without_it_is_refused(tmp_path):
    (first, second), files = two_corpora(tmp_path)
    out = tmp_path / "out"
    metrics = train_main(corpora_args(files, out, tmp_path / "cache", "--max_steps", "1", "--train_tags", "", "<BT>"))
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(out)
    assert "<BT>" in tokenizer.all_special_tokens and tokenizer.tokenize("<BT> " + second[0][0])[0] == "<BT>"
    assert [c["tag"] for c in metrics["corpora"]] == [None, "<BT>"]
    # a model whose vocabulary lacks the tag cannot take it: one line
    with pytest.raises(UsageError, match=r"--train_tags <NEW>: the tokenizer of .* has no token <NEW>"):
        train_main(corpora_args(files, tmp_path / "two", tmp_path / "cache", "--max_steps", "1",
                                "--model_name_or_path", str(out), "--train_tags", "<NEW>", "none",
                                "--d_model", "32"))
    assert not (tmp_path / "two").exists()


def test_a_given_tokenizer_without_the_tag_takes_it_as_a_special_token(tmp_path, capsys):
    (first, second), files = two_corpora(tmp_path)
    tokenizer, folder = saved_tokenizer(tmp_path, first + second)
    out = tmp_path / "out"
    train_main(corpora_args(files, out, tmp_path / "cache", "--max_steps", "1", "--tokenizer_name", folder,
                            "--train_tags", "none", "<BT>"))
    assert "Added the tags <BT> to the tokenizer" in capsys.readouterr().out
    from transformers import AutoTokenizer

    saved = AutoTokenizer.from_pretrained(out)
    assert len(saved) == len(tokenizer) + 1 and "<BT>" in saved.all_special_tokens


# ---------------------------------------------------------------------------------------------------------------
# Counts, the card, the cache


def test_counts_per_corpus_with_planted_bad_pairs_in_the_results_and_the_card(tmp_path):
    rng = random.Random(9)
    good = distinct_pairs(130, seed=11)
    first_good, second_good = good[:80], good[80:]
    first = first_good + [("", first_good[0][1]), (_words(rng, 120), first_good[1][1]), first_good[2]]
    second = second_good + [("a", " ".join(["abcd"] * 25)), (second_good[0][0], "  "), ("\t", ""),
                            second_good[3], second_good[4]]
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    files = [tuple(write_pairs(tmp_path / "a", first)), tuple(write_pairs(tmp_path / "b", second, name="bt"))]
    out = tmp_path / "out"
    metrics = train_main(corpora_args(files, out, tmp_path / "cache", "--max_steps", "1",
                                      "--train_weights", "1", "2", "--train_tags", "none", "<BT>"))
    expected = [
        {"source": files[0][0], "target": files[0][1], "pairs_read": 83,
         "cleaning": {"empty_side": 1, "too_long": 1, "length_ratio": 0, "duplicate": 1}, "pairs_used": 80,
         "weight": 1.0, "pairs_per_epoch": 80, "tag": None},
        {"source": files[1][0], "target": files[1][1], "pairs_read": 55,
         "cleaning": {"empty_side": 2, "too_long": 0, "length_ratio": 1, "duplicate": 2}, "pairs_used": 50,
         "weight": 2.0, "pairs_per_epoch": 100, "tag": "<BT>"},
    ]
    assert metrics["corpora"] == expected
    saved = json.loads((out / "all_results.json").read_text())
    assert saved["corpora"] == expected
    assert saved["train_pairs_read"] == 138 and saved["train_pairs_used"] == 180
    assert saved["cleaning"] == {"empty_side": 3, "too_long": 1, "length_ratio": 1, "duplicate": 3}
    card = (out / "README.md").read_text()
    assert "| corpus | pairs read | cleaned away | pairs used | weight | pairs per epoch | tag |" in card
    assert "| train.en / train.de | 83 | empty side 1, too long 1, duplicate 1 | 80 | 1 | 80 |  |" in card
    assert "| bt.en / bt.de | 55 | empty side 2, length ratio 1, duplicate 2 | 50 | 2 | 100 | `<BT>` |" in card
    assert "**training pairs**: 180" in card and "**data**: text files train.en / train.de, bt.en / bt.de" in card


def test_distinct_names_are_the_shortest_endings_no_other_path_has(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    cases = [
        (["data/train.en", "bt/bt.en"], ["train.en", "bt.en"]),  # names that differ: the names alone
        (["d/x/a.en", "d/y/a.en"], ["x/a.en", "y/a.en"]),
        (["p/a/t.en", "q/a/t.en", "q/b/t.en"], ["p/a/t.en", "q/a/t.en", "b/t.en"]),
        (["d/a.en", "./d/a.en", "e/a.en"], ["d/a.en", "d/a.en", "e/a.en"]),  # one file serving two corpora
        (["a.en", str(tmp_path / "d" / "a.en")], [f"{tmp_path.name}/a.en", "d/a.en"]),  # relative or absolute
    ]
    for paths, names in cases:
        assert distinct_names(paths) == names


def test_the_card_tells_apart_corpora_whose_files_have_the_same_names(tmp_path):
    pairs = distinct_pairs(100, seed=12)
    (tmp_path / "d" / "x").mkdir(parents=True)
    (tmp_path / "d" / "y").mkdir()
    files = [tuple(write_pairs(tmp_path / "d" / "x", pairs[:60])), tuple(write_pairs(tmp_path / "d" / "y",
                                                                                        pairs[60:]))]
    out = tmp_path / "out"
    train_main(corpora_args(files, out, tmp_path / "cache", "--max_steps", "1", "--train_weights", "1", "2"))
    card = (out / "README.md").read_text()
    assert "| x/train.en / x/train.de | 60 | none | 60 | 1 | 60 |  |" in card
    assert "| y/train.en / y/train.de | 40 | none | 40 | 2 | 80 |  |" in card
    assert "**data**: text files x/train.en / x/train.de, y/train.en / y/train.de" in card
    assert str(tmp_path) not in card


def test_adding_a_corpus_reuses_the_first_corpus_cache(tmp_path, monkeypatch, capsys):
    (first, second), files = two_corpora(tmp_path)
    tokenizer, folder = saved_tokenizer(tmp_path, first + second)
    cache = tmp_path / "cache"
    training_set(corpora_args(files[:1], tmp_path / "out", cache, "--tokenizer_name", folder), tokenizer)
    capsys.readouterr()
    cached = {path: path.stat().st_mtime_ns for path in cache.glob("pairs-*/*") if path.is_file()}
    assert len(cached) == 4  # pairs.arrow and files.json; tokens-KEY.arrow and tokens-KEY.json

    counter = CountTokenizerCalls(monkeypatch, [s for s, _ in first + second])
    training_set(corpora_args(files, tmp_path / "out", cache, "--tokenizer_name", folder), tokenizer)
    out = capsys.readouterr().out
    assert counter.seen == len(second)  # only the added corpus's sentences were tokenized
    assert "Reusing the train pairs read into" in out and "Reusing the tokenized training pairs in" in out
    assert f"Read {len(second)} train pairs into" in out and f"Tokenized {len(second)} training pairs" in out
    assert all(path.stat().st_mtime_ns == mtime for path, mtime in cached.items())  # not written again
    assert len(list(cache.glob("pairs-*/tokens-*.arrow"))) == 2


def test_one_corpus_gives_the_batches_of_the_single_corpus_code(tmp_path):
    """One pair of files goes through the single-corpus code unchanged (a `TextCorpus`); the same corpus through the
    code of several (weight 1, no tag) gives the same rows, lengths and token batches, byte for byte."""
    pairs = distinct_pairs(150, seed=5) + [("", "x"), distinct_pairs(1, seed=5)[0]]
    source, target = write_pairs(tmp_path, pairs)
    tokenizer, folder = saved_tokenizer(tmp_path, pairs)
    argv = corpora_args([(source, target)], tmp_path / "out", tmp_path / "cache", "--tokenizer_name", folder)
    single, dataset, lengths = training_set(argv, tokenizer)
    assert isinstance(single, TextCorpus) and single.pairs_used == 150
    data_args, _, training_args, _ = parse_arguments(argv)
    several = Corpora([open_text_corpus(data_args, training_args)])
    combined, combined_lengths = corpora_training_set(several, tokenizer, data_args, training_args)
    assert combined["input_ids"] == dataset["input_ids"] and combined["labels"] == dataset["labels"]
    for seed in (0, 1):
        batches = [list(TokenBudgetBatchSampler(*lengths_, 300, seed=seed)) for lengths_ in (lengths,
                                                                                               combined_lengths)]
        assert batches[0] == batches[1]


# ---------------------------------------------------------------------------------------------------------------
# Bad input: one usage line, exit status 2, nothing written


def _usage_error(argv) -> str:
    with pytest.raises(SystemExit) as raised:
        cli_main(["train", *argv])
    message = str(raised.value.code) if not isinstance(raised.value.code, int) else ""
    return raised.value.code, message


def test_options_that_do_not_go_together_are_one_usage_line(tmp_path, capsys):
    (_, _), files = two_corpora(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    (a_en, a_de), (b_en, b_de) = files
    linked_de = str(tmp_path / "b" / "linked.de")  # a hard link: another name of the same file
    os.link(a_de, linked_de)
    base = [*TINY, "--output_dir", str(out), "--data_cache_dir", str(cache), "--max_steps", "1"]
    cases = [
        (["--train_source", a_en, b_en, "--train_target", a_de], "gives 2 files but --train_target 1"),
        (["--train-source", a_en, b_en, "--train-target", a_de, b_de, "--train-weights", "1"],
         "--train_weights gives 1 values for 2 training corpora"),
        (["--train_source", a_en, b_en, "--train_target", a_de, b_de, "--train_weights", "1", "0"],
         "--train_weights must be positive numbers, got 0"),
        (["--train_source", a_en, b_en, "--train_target", a_de, b_de, "--train_weights", "1", "-2"],
         "--train_weights must be positive numbers, got -2"),
        (["--train_source", a_en, b_en, "--train_target", a_de, b_de, "--train_weights", "nan", "1"],
         "--train_weights must be positive numbers, got nan"),
        (["--train_source", a_en, b_en, "--train_target", a_de, b_de, "--train_tags", "<BT>"],
         "--train_tags gives 1 values for 2 training corpora"),
        (["--train_source", a_en, a_en, "--train_target", a_de, a_de], f"name {a_en} twice"),
        (["--train_source", a_en, b_en, "--train_target", a_de, os.path.relpath(a_de)], f"twice (as {a_de})"),
        (["--train_source", a_en, b_en, "--train_target", a_de, a_en], f"name {a_en} twice"),
        (["--train_source", a_en, b_en, "--train_target", b_en, b_de], f"name {b_en} twice"),
        (["--train_source", a_en, b_en, "--train_target", a_de, linked_de], f"name {linked_de} twice (as {a_de})"),
        (["--train_source", a_en, os.path.join(os.path.dirname(a_en), "..", "a", os.path.basename(a_en)),
          "--train_target", a_de, linked_de], f"twice (as {a_en})"),  # a source twice, with the same target
    ]
    for options, expected in cases:
        code, _ = _usage_error([*base, *options])
        err = capsys.readouterr().err
        assert code == 2, (options, err)
        lines = [line for line in err.splitlines() if line.strip()]
        assert lines[-1].startswith("vanilla-transformer train: error: ") and expected in lines[-1], (expected, err)
        assert "Traceback" not in err and not out.exists() and not cache.exists()
    # streaming takes one pair: one line, exit status 2
    with pytest.raises(SystemExit) as raised:
        cli_main(["train", *base, "--train_source", a_en, b_en, "--train_target", a_de, b_de, "--streaming"])
    assert raised.value.code == 2
    assert "--streaming reads one training pair of files" in capsys.readouterr().err
    assert not out.exists() and not cache.exists()


def test_a_weight_that_would_draw_more_pairs_than_an_epoch_holds_is_one_line(tmp_path):
    (first, second), files = two_corpora(tmp_path)
    out = tmp_path / "out"
    with pytest.raises(UsageError, match=r"--train_weights 1e\+08 draws 4,000,000,000 pairs of .*bt.en per epoch"):
        train_main(corpora_args(files, out, tmp_path / "cache", "--max_steps", "1", "--train_weights", "1", "1e8"))
    assert not out.exists()


def test_a_weight_whose_epoch_exceeds_the_memory_is_one_line(tmp_path, monkeypatch, capsys):
    """The epoch's rows and batches take about BYTES_PER_DRAWN_PAIR a pair: more than the process may hold is one
    usage line once the pairs are counted, never numpy's MemoryError; so is memory that runs out all the same."""
    (first, second), files = two_corpora(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    # 60 + 40 * 1000 pairs: about 1.5 MiB of rows and batches
    monkeypatch.setattr(text_corpus, "memory_limit", lambda: 1 << 20)
    code, _ = _usage_error(corpora_args(files, out, cache, "--max_steps", "1", "--train_weights", "1", "1000"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in "\n".join(lines)
    assert lines[-1].startswith("vanilla-transformer train: error: --train_weights 1000 draws 40,000 pairs of ")
    assert "bt.en per epoch, more than this process's memory holds" in lines[-1]
    assert "for the epoch's 40,060 pairs" in lines[-1]  # the first corpus's pairs count too
    assert not out.exists()
    monkeypatch.setattr(text_corpus, "memory_limit", lambda: None)

    def out_of_memory(*args):
        raise MemoryError("Unable to allocate")

    monkeypatch.setattr(text_corpus, "weighted_rows", out_of_memory)
    code, _ = _usage_error(corpora_args(files, out, cache, "--max_steps", "1", "--train_weights", "1", "1000"))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in "\n".join(lines) and "more than the memory left holds" in lines[-1]
    assert not out.exists()


@pytest.mark.parametrize("tag", ["the", "BT", "<bt", "bt>", "2", "__x1", "ü"])
def test_a_tag_that_could_be_part_of_a_word_is_one_usage_line(tmp_path, capsys, tag):
    (_, _), files = two_corpora(tmp_path)
    out, cache = tmp_path / "out", tmp_path / "cache"
    code, _ = _usage_error(corpora_args(files, out, cache, "--max_steps", "1", "--train_tags", "none", tag))
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert code == 2 and lines[-1] == ("vanilla-transformer train: error: --train_tags: a tag starts and ends with a "
                                       "character other than a letter or digit, so that it is never part of a word "
                                       f"(e.g. <BT> or >>bt<<), got {tag!r}")
    assert not out.exists() and not cache.exists()  # refused before anything is read


@pytest.mark.parametrize("side", [0, 1])
def test_a_tag_that_a_training_line_holds_is_one_usage_line_naming_the_file_and_line(tmp_path, capsys, side):
    """Any corpus, either side, inside a word too: the tokenizer would read the tag there. Checked on cached pairs
    too (the first run read the corpora without the tag), before the tokenizer is trained."""
    pairs = distinct_pairs(100, seed=8)
    first, second = pairs[:60], pairs[60:]
    line = 17
    planted = list(first[line - 1])
    planted[side] = planted[side].replace(" ", " x>>bt<<y ", 1)
    first[line - 1] = tuple(planted)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    files = [tuple(write_pairs(tmp_path / "a", first)), tuple(write_pairs(tmp_path / "b", second, name="bt"))]
    out, cache = tmp_path / "out", tmp_path / "cache"
    tokenizer, folder = saved_tokenizer(tmp_path, pairs)
    training_set(corpora_args(files, out, cache, "--tokenizer_name", folder), tokenizer)  # cached without tags
    capsys.readouterr()
    code, _ = _usage_error(corpora_args(files, out, cache, "--max_steps", "1", "--train_tags", "none", ">>bt<<"))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and "Traceback" not in captured.err
    assert lines[-1] == (f"vanilla-transformer train: error: --train_tags >>bt<<: line {line} of {files[0][side]} "
                         "holds it, and the tokenizer would read it there as the tag; choose a tag that no training "
                         "line holds.")
    assert "Trained the BPE tokenizer" not in captured.out and not out.exists()


@pytest.mark.parametrize("tag", ["</s>", "<pad>"])
def test_a_tag_that_is_a_token_with_a_role_is_one_line(tmp_path, tag):
    (first, second), files = two_corpora(tmp_path)
    with pytest.raises(UsageError, match=f"--train_tags {tag}: that is the tokenizer's (eos|pad) token"):
        train_main(corpora_args(files, tmp_path / "out", tmp_path / "cache", "--max_steps", "1",
                                "--train_tags", "none", tag))
    assert not (tmp_path / "out").exists()
