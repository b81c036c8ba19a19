"""`--augment` (training/augmentation.py): OpusTrainer's UpperCase, TitleCase, Typos and Noise modifiers applied on
the fly by the training collator.

Oracles: OpusTrainer's own modifiers (the `opustrainer` package: TypoModifier, NoiseModifier, TitleCaseModifier,
UpperCaseModifier) seeded alike, Python's `str.upper`, the tokenizer's own decoder, the binomial distribution of
the draws, the run's collator without the option, the streamed batches read twice, a run's all_results.json and
model card, and the command line's exit status.
"""

import copy
import functools
import json
import math
import random

import numpy as np
import pytest
import torch
from datasets import Dataset
from transformers import DataCollatorForSeq2Seq

from helpers import run_main
from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer
from vanilla_transformer.training.augmentation import (
    AugmentingCollator,
    augmenting_collator,
    noise_words,
    parse_augment,
    title_case,
    typos,
)
from vanilla_transformer.training.streaming import StreamingTokenBatches
from vanilla_transformer.training.tokenized_splits import tokenize_splits
from vanilla_transformer.training.tokenizer import train_tokenizer

pytest.importorskip("typo")  # the train extra


@functools.lru_cache(maxsize=1)
def _cased_tokenizer():
    """The fixture's vocabulary trained on the sentences as written and upper-cased: it has every upper-case letter
    (characters a vocabulary lacks leave a pair as it was, tested below with `tiny_tokenizer`)."""
    texts = GERMAN + ENGLISH
    return train_tokenizer(texts + [t.upper() for t in texts], vocab_size=300, min_frequency=1, model_max_length=64)


def cased_tokenizer():
    return copy.deepcopy(_cased_tokenizer())


def _pairs(tokenizer, repeats: int = 1) -> list[dict]:
    """The fixture's pairs, tokenized as the training split is (with </s>), as the collator's features."""
    splits = {"train": Dataset.from_dict({"source": ENGLISH * repeats, "target": GERMAN * repeats})}
    train = tokenize_splits(splits, tokenizer, 64, 64)[0]["train"]
    return [{"input_ids": row["input_ids"], "attention_mask": row["attention_mask"], "labels": row["labels"]}
            for row in train]


def _batches(pairs: list[dict], count: int, size: int, seed: int) -> list[list[dict]]:
    """`count` batches of `size` pairs drawn at random (each batch a different draw, so a different hash)."""
    rng = np.random.default_rng(seed)
    return [[pairs[i] for i in rng.choice(len(pairs), size=size)] for _ in range(count)]


def _collator(tokenizer, spec: str, seed: int = 0, max_length: int = 64) -> AugmentingCollator:
    base = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)
    return AugmentingCollator(base, tokenizer, parse_augment(spec), seed=seed, max_source_length=max_length,
                              max_target_length=max_length)


def _texts(tokenizer, batch) -> list[tuple[str, str]]:
    """(source, target) of every row of a collated batch, decoded by the tokenizer."""
    labels = batch["labels"].masked_fill(batch["labels"] == -100, tokenizer.pad_token_id)
    return list(zip(tokenizer.batch_decode(batch["input_ids"], skip_special_tokens=True),
                    tokenizer.batch_decode(labels, skip_special_tokens=True)))


def _within_binomial_bound(successes: int, trials: int, p: float) -> bool:
    """`successes` lies within 5 standard deviations of Binomial(trials, p)'s mean (a false alarm ~1 in 10^6)."""
    return abs(successes - trials * p) <= 5 * math.sqrt(trials * p * (1 - p)) + 1


# ---------------------------------------------------------------------------------------------------------------
# The modifiers are OpusTrainer's


@pytest.mark.parametrize("seed", range(6))
def test_typos_are_opustrainers_typo_modifier_on_the_source_only(seed):
    typo_modifier = pytest.importorskip("opustrainer.modifiers.typos")
    for k, (source, target) in enumerate(zip(ENGLISH, GERMAN)):
        random.seed(1000 * seed + k)
        expected_source, expected_target = typo_modifier.TypoModifier(1.0).apply(f"{source}\t{target}").split("\t")
        state = random.getstate()
        assert typos(source, random.Random(1000 * seed + k)) == expected_source
        assert random.getstate() == state  # the global generator is as it was
        assert expected_target == target  # OpusTrainer leaves the target as it is, and so do we (below)


@pytest.mark.parametrize("seed", range(4))
def test_noise_is_opustrainers_noise_modifier(seed):
    noise = pytest.importorskip("opustrainer.modifiers.noise")
    for k in range(50):
        random.seed(100 * seed + k)
        # NoiseModifier draws whether to add a pair, then its words; a pair of noise comes before the original line
        lines = list(noise.NoiseModifier(1.0)(["a cat\teine Katze"]))
        ours = random.Random(100 * seed + k)
        assert ours.random() < 1.0
        words = noise_words(ours)
        assert lines == [" ".join(words) + "\t" + " ".join(words), "a cat\teine Katze"]
        assert 1 <= len(words) <= 6 and len({len(w) for w in words}) == 1 and 2 <= len(words[0]) <= 5


def test_title_and_upper_case_are_opustrainers():
    surface = pytest.importorskip("opustrainer.modifiers.surface")
    lines = [f"{s}\t{t}" for s, t in zip(ENGLISH, GERMAN)] + ["  éclair  über\tßtraße ǆungla"]
    titled = list(surface.TitleCaseModifier(1.0)(lines))
    upper = list(surface.UpperCaseModifier(1.0)(lines))
    for line, title_line, upper_line in zip(lines, titled, upper):
        source, target = line.split("\t")
        assert title_line == f"{title_case(source)}\t{title_case(target)}"
        assert upper_line == f"{source.upper()}\t{target.upper()}"


# ---------------------------------------------------------------------------------------------------------------
# The collator: shares, consistency, determinism


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shares_of_changed_batches_and_pairs_lie_within_the_binomial_bound(seed):
    tokenizer = cased_tokenizer()
    probabilities = {"upper": 0.1, "title": 0.2, "typos": 0.15, "noise": 0.05}
    collator = _collator(tokenizer, ",".join(f"{k}={v}" for k, v in probabilities.items()), seed=seed,
                         max_length=256)  # room for every upper-cased sentence
    batches = _batches(_pairs(tokenizer), count=400, size=8, seed=seed)
    draws = [collator.draws(batch) for batch in batches]
    assert _within_binomial_bound(sum(d.upper for d in draws), len(draws), probabilities["upper"])
    assert _within_binomial_bound(sum(d.title for d in draws), len(draws), probabilities["title"])
    pairs = sum(len(batch) for batch in batches)
    assert _within_binomial_bound(int(sum(d.typos.sum() for d in draws)), pairs, probabilities["typos"])
    assert _within_binomial_bound(int(sum(d.noise.sum() for d in draws)), pairs, probabilities["noise"])
    # what the draws say is what the batches hold: the targets of upper-cased batches read upper-case (their sources
    # may have typos too)
    upper_rows = 0
    for batch, drawn in zip(batches[:80], draws[:80]):
        texts = _texts(tokenizer, collator(batch))
        plain = [(s, t) for s, t in _texts(tokenizer, collator.collator(batch))]
        upper_rows += sum(t == q.upper() and t != q for (_, t), (_, q) in zip(texts, plain))
        assert len(texts) == len(batch) + drawn.noise.sum()
    assert upper_rows == 8 * sum(d.upper for d in draws[:80])


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_modifier_changes_the_sides_opustrainer_changes(seed):
    tokenizer = cased_tokenizer()
    pairs = _pairs(tokenizer)
    originals = [(tokenizer.decode(p["input_ids"], skip_special_tokens=True),
                  tokenizer.decode(p["labels"], skip_special_tokens=True)) for p in pairs]
    assert originals == list(zip(ENGLISH, GERMAN))  # the vocabulary decodes the fixture exactly
    for spec, changed in (("upper=1", lambda s, t: (s.upper(), t.upper())),
                          ("title=1", lambda s, t: (title_case(s), title_case(t)))):
        collator = _collator(tokenizer, spec, seed=seed)
        assert _texts(tokenizer, collator(pairs)) == [changed(s, t) for s, t in originals]

    collator = _collator(tokenizer, "typos=1", seed=seed)
    drawn = collator.draws(pairs)
    texts = _texts(tokenizer, collator(pairs))
    assert [t for _, t in texts] == GERMAN  # typos: the target is kept
    for i, (source, _) in enumerate(texts):  # the source is OpusTrainer's typos of it, drawn with the pair's seed
        expected = typos(ENGLISH[i], random.Random(int(drawn.seeds[i, 0])))
        if tokenizer.unk_token_id in tokenizer(expected)["input_ids"]:  # a character the vocabulary lacks: kept
            expected = ENGLISH[i]
        assert source == expected
    assert sum(s != e for (s, _), e in zip(texts, ENGLISH)) >= 2

    collator = _collator(tokenizer, "noise=1", seed=seed)
    plain = collator.collator(pairs)
    batch = collator(pairs)
    texts = _texts(tokenizer, batch)
    assert texts[:len(pairs)] == originals and len(texts) == 2 * len(pairs)  # a noise pair added beside each pair
    for source_ids, target_ids in zip(batch["input_ids"][len(pairs):], batch["labels"][len(pairs):]):
        words = source_ids[source_ids != tokenizer.pad_token_id]  # the same tokens on both sides
        assert len(words) > 1 and torch.equal(words, target_ids[target_ids != -100])
    # a noise pair is cut to the batch's longest sentences: the padded tensors are as long as without it
    assert batch["input_ids"].shape[1] == plain["input_ids"].shape[1]
    assert batch["labels"].shape[1] == plain["labels"].shape[1]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_the_same_seed_gives_the_same_batches_in_any_order_and_another_seed_others(seed):
    tokenizer = cased_tokenizer()
    spec = "upper=0.2,title=0.2,typos=0.3,noise=0.1"
    batches = _batches(_pairs(tokenizer, repeats=2), count=40, size=6, seed=seed)
    first = [_collator(tokenizer, spec, seed=seed)(b) for b in batches]
    again = _collator(tokenizer, spec, seed=seed)
    # resumed after skipping batches (a resumed run collates only those it has not trained on), in another order
    for i in reversed(range(10, 40)):
        assert all(torch.equal(first[i][k], v) for k, v in again(batches[i]).items())
    other = _collator(tokenizer, spec, seed=seed + 100)
    assert any(other.draws(b).upper != again.draws(b).upper or (other.draws(b).typos != again.draws(b).typos).any()
               for b in batches)
    # another epoch draws anew for the same batch
    epoch = _collator(tokenizer, spec, seed=seed)
    epoch.set_epoch(1)
    assert any(epoch.draws(b).upper != d.upper or (epoch.draws(b).typos != d.typos).any()
               for b, d in zip(batches, [again.draws(b) for b in batches]))


def test_the_collator_goes_to_spawned_workers_and_draws_there_as_here():
    import pickle

    tokenizer = cased_tokenizer()
    collator = _collator(tokenizer, "upper=0.5,typos=0.5,noise=0.5", seed=3)
    collator.set_epoch(2)
    copy_ = pickle.loads(pickle.dumps(collator))
    for batch in _batches(_pairs(tokenizer), count=10, size=4, seed=1):
        ours, theirs = collator(batch), copy_(batch)
        assert all(torch.equal(ours[k], theirs[k]) for k in ours)


def test_without_the_option_the_batches_are_the_plain_collators_byte_for_byte():
    tokenizer = cased_tokenizer()
    base = DataCollatorForSeq2Seq(tokenizer, label_pad_token_id=-100)

    class Options:
        seed, data_seed, dataloader_persistent_workers, dataloader_num_workers = 0, None, False, 0
        max_source_length = max_target_length = 64

    for spec in (None, "", "upper=0", "upper=0,title=0,typos=0,noise=0"):
        Options.augment = spec
        assert augmenting_collator(base, tokenizer, Options, Options) is None  # the Trainer keeps the plain one
    # a batch drawn for nothing goes to the plain collator as it came
    collator = _collator(tokenizer, "upper=0.01,typos=0.01")
    batches = _batches(_pairs(tokenizer, repeats=3), count=30, size=5, seed=3)
    untouched = [b for b in batches if not (d := collator.draws(b)).upper and not d.typos.any()]
    assert len(untouched) > 20
    for batch in untouched:
        ours, plain = collator(batch), base(batch)
        assert ours.keys() == plain.keys()
        assert all(ours[k].dtype == plain[k].dtype and torch.equal(ours[k], plain[k]) for k in plain)


def test_a_pair_too_long_once_changed_or_with_an_unknown_character_stays_as_it_was():
    tokenizer = cased_tokenizer()
    pairs = _pairs(tokenizer)
    upper = [(len(s), len(t)) for s, t in zip(tokenizer([s.upper() for s in ENGLISH])["input_ids"],
                                               tokenizer(text_target=[t.upper() for t in GERMAN])["input_ids"])]
    limit = sorted(max(lengths) for lengths in upper)[len(upper) // 2]
    texts = _texts(tokenizer, _collator(tokenizer, "upper=1", max_length=limit)(pairs))
    for (source, target), english, german, lengths in zip(texts, ENGLISH, GERMAN, upper):
        if max(lengths) > limit:  # upper-cased, longer than the limit: kept
            assert (source, target) == (english, german)
        else:
            assert (source, target) == (english.upper(), german.upper())
    assert any(max(lengths) > limit for lengths in upper)
    unknown = tokenizer("Ωmega zebra", text_target="Ωmega")  # characters the vocabulary has never seen
    assert tokenizer.unk_token_id in unknown["input_ids"]
    feature = {"input_ids": unknown["input_ids"], "attention_mask": unknown["attention_mask"],
               "labels": unknown["labels"]}
    collator = _collator(tokenizer, "upper=1")
    assert torch.equal(collator([feature])["input_ids"], collator.collator([feature])["input_ids"])
    # a vocabulary trained on lower-case text only: upper-cased sentences would hold <unk>, so they stay as written
    lower = tiny_tokenizer()
    assert tokenizer.unk_token_id in lower(ENGLISH[0].upper())["input_ids"]
    lower_pairs = _pairs(lower)
    assert _texts(lower, _collator(lower, "upper=1", max_length=256)(lower_pairs)) == list(zip(ENGLISH, GERMAN))


@pytest.mark.parametrize("spec", ["upper=1", "title=1", "typos=1"])
def test_a_tagged_source_keeps_its_tag_first_and_unchanged(spec):
    """--train_tags puts the tag before a tagged corpus's sources as a special token of its own; a changed pair keeps
    it as its first token, and its text (lower-case here, which upper- or title-casing would change) as it is."""
    tokenizer = cased_tokenizer()
    tokenizer.add_special_tokens({"extra_special_tokens": ["<bt>"]})
    tag = tokenizer.convert_tokens_to_ids("<bt>")
    tagged = [{**pair, "input_ids": [tag] + pair["input_ids"], "attention_mask": [1] + pair["attention_mask"]}
              for pair in _pairs(tokenizer)]
    case = {"upper=1": str.upper, "title=1": title_case, "typos=1": None}[spec]
    changed = 0
    for seed in range(3):
        batch = _collator(tokenizer, spec, seed=seed)(tagged)
        rows = [row[row != tokenizer.pad_token_id].tolist() for row in batch["input_ids"]]
        for row, pair, english in zip(rows, tagged, ENGLISH):
            assert row[0] == tag and row.count(tag) == 1
            text = tokenizer.decode(row[1:], skip_special_tokens=True)
            assert row == [tag] + tokenizer(text)["input_ids"]  # the changed sentence tokenized alone, after the tag
            if case is not None:
                assert text == case(english)
            changed += row != pair["input_ids"]
    assert changed >= len(tagged)  # the pairs were changed, not kept as they were


def test_streamed_batches_are_augmented_alike_when_the_stream_is_read_again(tmp_path):
    tokenizer = cased_tokenizer()
    (tmp_path / "train.en").write_text("\n".join(ENGLISH * 20) + "\n", encoding="utf-8")
    (tmp_path / "train.de").write_text("\n".join(GERMAN * 20) + "\n", encoding="utf-8")
    stream = StreamingTokenBatches(str(tmp_path / "train.en"), str(tmp_path / "train.de"), tokenizer,
                                   max_source_length=64, max_target_length=64, max_tokens=200, seed=5,
                                   shuffle_buffer_pairs=50, maxi_batch_pairs=40)
    collator = _collator(tokenizer, "upper=0.3,title=0.3,typos=0.3,noise=0.1", seed=5)

    def read(count):
        loader = torch.utils.data.DataLoader(stream, batch_size=None, collate_fn=collator)
        return [batch for _, batch in zip(range(count), loader)]

    first, second = read(12), read(12)
    assert all(a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a) for a, b in zip(first, second))
    texts = [text for batch in first for text in _texts(tokenizer, batch)]
    assert any(s == s.upper() and s != s.lower() for s, _ in texts)  # some batch upper-cased
    assert any((s, t) in set(zip(ENGLISH, GERMAN)) for s, t in texts)  # and some pairs as they were


# ---------------------------------------------------------------------------------------------------------------
# The option


@pytest.mark.parametrize("spec", ["bogus=0.1", "upper=1.5", "upper=-0.1", "upper=nan", "upper", "upper=0.1,,",
                                  "upper=x", "upper=0.1,upper=0.2", "=0.1", ""])
def test_a_bad_augment_value_is_one_usage_line_with_exit_status_2(tmp_path, capsys, spec):
    from vanilla_transformer.cli.main import main

    code, out, err = run_main(main, ["train", "--augment", spec, "--output_dir", str(tmp_path / "out")], capsys)
    assert code == 2 and out == "", err
    lines = err.strip().splitlines()
    assert lines[0].startswith("usage: vanilla-transformer train") and len(lines) == 2, err
    assert lines[1].startswith("vanilla-transformer train: error: --augment") and "Traceback" not in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("max_tokens", [0, 60])
def test_the_trainer_trains_with_the_augmenting_collator_and_evaluates_with_the_plain_one(tmp_path, max_tokens):
    from translation_fixtures import tiny_translator
    from vanilla_transformer.training.trainer import EpochForCollator, TranslationTrainer, TranslationTrainingArguments

    tokenizer = cased_tokenizer()
    splits = {"train": Dataset.from_dict({"source": ENGLISH, "target": GERMAN})}
    train = tokenize_splits(splits, tokenizer, 64, 64)[0]["train"]
    collator = _collator(tokenizer, "upper=0.5")
    trainer = TranslationTrainer(
        model=tiny_translator(), args=TranslationTrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3,
                                                                   max_tokens=max_tokens, report_to="none"),
        data_collator=collator.collator, train_collator=collator, train_dataset=train,
        eval_dataset=train.select_columns(["input_ids", "attention_mask", "labels"]))
    assert trainer.get_train_dataloader().collate_fn is collator or trainer.get_train_dataloader().collate_fn.data_collator is collator
    assert trainer.data_collator is collator.collator  # given back after the Trainer's own loader was built
    evaluation = trainer.get_eval_dataloader().collate_fn
    assert evaluation is collator.collator or getattr(evaluation, "data_collator", None) is collator.collator
    assert any(isinstance(c, EpochForCollator) for c in trainer.callback_handler.callbacks)


def test_parse_augment_reads_each_modifier_with_its_probability():
    assert parse_augment("upper=0.05, title=0.05,typos=0.02 ,noise=0.01") == {
        "upper": 0.05, "title": 0.05, "typos": 0.02, "noise": 0.01}
    assert parse_augment("noise=1") == {"noise": 1.0} and parse_augment("upper=0") == {"upper": 0.0}


@pytest.mark.slow
def test_a_run_with_augment_trains_on_changed_pairs_and_records_it(tmp_path, monkeypatch):
    from test_training import tiny

    from vanilla_transformer.training.train import main as train_main

    seen = {"train": []}
    original_call = AugmentingCollator.__call__

    def recording(self, features):
        batch = original_call(self, features)
        plain = self.collator(features)
        seen["train"].append(batch["input_ids"].shape != plain["input_ids"].shape
                             or not torch.equal(batch["input_ids"], plain["input_ids"]))
        return batch

    monkeypatch.setattr(AugmentingCollator, "__call__", recording)
    out = tmp_path / "run"
    train_main(["--output_dir", str(out), "--max_steps", "8", "--save_steps", "8",
                "--augment", "upper=0.5,typos=0.5", *tiny(demo_train_size=60, max_tokens=120)])
    assert len(seen["train"]) >= 8  # every training batch went through it, and some were changed
    assert any(seen["train"])
    results = json.loads((out / "all_results.json").read_text())
    assert results["augmentation"] == {"upper": 0.5, "typos": 0.5}
    card = (out / "README.md").read_text()
    assert "**augmentation**: upper 0.5: both sides upper-cased (per batch); typos 0.5:" in card


@pytest.mark.slow  # three training runs
def test_a_resumed_run_with_augment_trains_on_the_batches_of_an_uninterrupted_one(tmp_path, monkeypatch):
    """Kill a run after its step-4 checkpoint (at step 6), resume: the losses of every step match an uninterrupted
    run's, across epochs (~5 batches each), while batches were changed."""
    from test_training import tiny

    from helpers import Interrupt, assert_resumed_like_uninterrupted, crash_at
    from vanilla_transformer.training.train import main as train_main

    changed = []
    original_augment = AugmentingCollator.augment

    def recording(self, features, draws):
        changed.append(True)
        return original_augment(self, features, draws)

    monkeypatch.setattr(AugmentingCollator, "augment", recording)
    common = ["--max_steps", "12", "--save_steps", "4", "--logging_steps", "1",
              "--augment", "upper=0.3,title=0.3,typos=0.5,noise=0.3", *tiny(demo_train_size=120, max_tokens=250)]
    full = tmp_path / "full"
    train_main(["--output_dir", str(full), *common])
    assert len(changed) >= 6
    broken = tmp_path / "broken"
    with pytest.raises(Interrupt):
        train_main(["--output_dir", str(broken), *common], callbacks=[crash_at(6)])
    train_main(["--output_dir", str(broken), "--resume_from_checkpoint", "true", *common])

    assert_resumed_like_uninterrupted(broken, full, 12)
