"""BPE-dropout (`--bpe_dropout`, training.tokenized_splits.SubwordDropout): training pairs segmented anew for every epoch.

Oracles: the tokenizer's own plain segmentation and decoder (`tokenizers`), the vocabulary's characters (a merge
dropped every time leaves single characters), the Trainer's batches as the model received them, the padded size of
the batches cut by the plain lengths, a second process (torch.distributed, gloo).
"""

import json

import pytest
import torch
from datasets import Dataset

from translation_fixtures import ENGLISH, GERMAN, tiny_tokenizer
from vanilla_transformer.training.batching import TokenBudgetBatchSampler
from vanilla_transformer.training.tokenized_splits import SubwordDropout, tokenize_splits
from vanilla_transformer.training.train import main as train_main


def _training_split(tokenizer, repeats: int = 4):
    splits = {"train": Dataset.from_dict({"source": ENGLISH * repeats, "target": GERMAN * repeats})}
    return tokenize_splits(splits, tokenizer, 64, 64, keep_train_text=True)[0]["train"]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_epoch_is_a_new_segmentation_of_the_same_text(seed):
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    train = _training_split(tokenizer)
    data = SubwordDropout(train, tokenizer, 0.3, 64, 64)
    assert (data.source_lengths, data.target_lengths) == (train["source_length"], train["target_length"])
    indices = torch.randperm(len(data))[:12].tolist()
    vocabulary = tokenizer.get_vocab()
    seen, plain_length, dropped_length = {}, 0, 0
    for epoch in range(5):
        data.set_epoch(epoch)
        assert data.__getitems__(indices) == data.__getitems__(indices)  # one segmentation per epoch
        for i, item in zip(indices, data.__getitems__(indices)):
            for ids, plain, mask in ((item["input_ids"], train[i]["input_ids"], item["attention_mask"]),
                                     (item["labels"], train[i]["labels"], None)):
                # the same text in other pieces: every piece is in the vocabulary, the sequence ends with </s>
                assert tokenizer.decode(ids, skip_special_tokens=True) == tokenizer.decode(plain,
                                                                                           skip_special_tokens=True)
                assert ids[-1] == tokenizer.eos_token_id and all(0 <= t < len(vocabulary) for t in ids)
                assert mask is None or mask == [1] * len(ids)
                plain_length, dropped_length = plain_length + len(plain), dropped_length + len(ids)
                seen.setdefault((i, mask is None), set()).add(tuple(ids))
    assert dropped_length > plain_length  # fewer merges, more pieces
    assert sum(len(segmentations) > 1 for segmentations in seen.values()) > len(seen) / 2
    # the tokenizer that is saved with the model still segments as before
    assert tokenizer(ENGLISH)["input_ids"] == tiny_tokenizer()(ENGLISH)["input_ids"]
    assert tokenizer.backend_tokenizer.model.dropout is None


def test_a_merge_dropped_every_time_leaves_single_characters():
    tokenizer = tiny_tokenizer()
    data = SubwordDropout(_training_split(tokenizer, repeats=1), tokenizer, 0.99999, 64, 64)
    pieces = [piece for item in data.__getitems__(list(range(len(data))))
              for piece in tokenizer.convert_ids_to_tokens(item["input_ids"][:-1] + item["labels"][:-1])]
    assert len(pieces) > 300
    assert sum(len(piece) == 1 for piece in pieces) / len(pieces) > 0.99


def test_dropped_merges_are_truncated_like_the_plain_segmentation():
    tokenizer = tiny_tokenizer()
    splits = {"train": Dataset.from_dict({"source": ENGLISH, "target": GERMAN})}
    train = tokenize_splits(splits, tokenizer, 7, 5, keep_train_text=True)[0]["train"]
    for item in SubwordDropout(train, tokenizer, 0.5, 7, 5).__getitems__(list(range(len(ENGLISH)))):
        assert len(item["input_ids"]) == 7 and len(item["labels"]) == 5  # every caption is longer
        assert item["input_ids"][-1] == item["labels"][-1] == tokenizer.eos_token_id


def test_a_tokenizer_without_bpe_merges_is_refused_in_one_line():
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from vanilla_transformer.training.messages import DataError

    word_level = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel({"<unk>": 0, "a": 1}, unk_token="<unk>")), unk_token="<unk>")
    train = _training_split(tiny_tokenizer(), repeats=1)
    with pytest.raises(DataError, match=r"^BPE-dropout needs a fast BPE tokenizer; this tokenizer is a WordLevel one\.$"):
        SubwordDropout(train, word_level, 0.1, 64, 64)
    with pytest.raises(ValueError, match="lacks source, target"):
        SubwordDropout(train.remove_columns(["source", "target"]), tiny_tokenizer(), 0.1, 64, 64)


@pytest.mark.parametrize("value", ["1", "-0.1", "nan"])
def test_a_bpe_dropout_outside_zero_to_one_stops_the_run_with_one_line(tmp_path, capsys, value):
    with pytest.raises(SystemExit):
        train_main(["--bpe_dropout", value, "--output_dir", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith(f"--bpe_dropout must be at least 0 and below 1, got {float(value)}")
    assert not (tmp_path / "out").exists()


def test_a_run_with_bpe_dropout_trains_on_new_segmentations_and_saves_the_plain_tokenizer(tmp_path, monkeypatch,
                                                                                        capsys):
    from test_training import tiny
    from transformers import AutoTokenizer

    read = []
    original = SubwordDropout.__getitems__

    def recording(self, indices):
        items = original(self, indices)
        read.extend((i, tuple(item["input_ids"]), tuple(item["labels"])) for i, item in zip(indices, items))
        return items

    monkeypatch.setattr(SubwordDropout, "__getitems__", recording)
    out = tmp_path / "run"
    train_main(["--output_dir", str(out), "--max_steps", "12", "--save_steps", "12", "--bpe_dropout", "0.25",
                *tiny(demo_train_size=60, max_tokens=120)])
    assert "(BPE-dropout 0.25);" in capsys.readouterr().out  # the Model line
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert json.loads((out / "tokenizer.json").read_text())["model"]["dropout"] is None
    assert "**BPE-dropout**: 0.25" in (out / "README.md").read_text()

    # the model was fed the pairs of the demo corpus, split otherwise than the saved tokenizer splits them
    from vanilla_transformer.training.data_sources import demo_splits

    train = demo_splits(60, 42)["train"]
    assert len(read) >= 12 and len({i for i, _, _ in read}) > 30
    differ = 0
    for i, source, labels in read:
        plain = tokenizer(train[i]["source"], text_target=train[i]["target"])
        assert tokenizer.decode(source, skip_special_tokens=True) == tokenizer.decode(plain["input_ids"],
                                                                                      skip_special_tokens=True)
        assert tokenizer.decode(labels, skip_special_tokens=True) == tokenizer.decode(plain["labels"],
                                                                                      skip_special_tokens=True)
        differ += (list(source), list(labels)) != (plain["input_ids"], plain["labels"])
    assert differ > len(read) / 4


def _padded(batches, source_lengths, target_lengths):
    return sum(len(b) * (max(source_lengths[i] for i in b) + max(target_lengths[i] for i in b)) for b in batches)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_batches_of_an_epoch_hold_neighbouring_pairs_sorted_by_its_segmentation(seed):
    torch.manual_seed(seed)
    tokenizer = tiny_tokenizer()
    train = _training_split(tokenizer, repeats=20)
    data = SubwordDropout(train, tokenizer, 0.3, 64, 64)
    plain = TokenBudgetBatchSampler(data.source_lengths, data.target_lengths, max_tokens=150, seed=seed)
    sampler = TokenBudgetBatchSampler(data.source_lengths, data.target_lengths, max_tokens=150, seed=seed,
                                      epoch_lengths=data.epoch_lengths, regroup=4)
    assert len(plain.batches) >= 12
    for epoch in range(3):
        plain.set_epoch(epoch)
        sampler.set_epoch(epoch)
        batches = list(sampler)
        source_lengths, target_lengths = data.epoch_lengths(epoch)
        assert len(batches) == len(sampler) == len(plain)
        assert sorted(i for b in batches for i in b) == list(range(len(data)))  # every pair once
        cut = sampler.batches_of_epoch()
        for start in range(0, len(plain.batches), 4):  # the same pairs in each run of 4 batches, the same sizes
            group, regrouped = plain.batches[start:start + 4], cut[start:start + 4]
            assert [len(b) for b in group] == [len(b) for b in regrouped]
            assert sorted(i for b in group for i in b) == sorted(i for b in regrouped for i in b)
        # in the epoch's segmentation they pad less than the batches cut by the plain lengths
        assert _padded(batches, source_lengths, target_lengths) < _padded(list(plain), source_lengths, target_lengths)
        # and the model reads the epoch's pieces
        read = data.__getitems__(batches[0])
        assert [len(item["input_ids"]) for item in read] == [source_lengths[i] for i in batches[0]]


def _segment_in_process(rank, folder):
    import torch.distributed as dist

    dist.init_process_group("gloo", init_method=f"file://{folder}/rendezvous", rank=rank, world_size=2)
    try:
        tokenizer = tiny_tokenizer()
        data = SubwordDropout(_training_split(tokenizer), tokenizer, 0.5, 64, 64)
        data.set_epoch(0)
        (folder / f"rank{rank}.json").write_text(json.dumps([data.input_ids, data.labels]))
    finally:
        dist.destroy_process_group()


@pytest.mark.slow  # two spawned processes
def test_several_processes_batch_the_segmentation_of_the_first(tmp_path):
    import torch.multiprocessing as mp

    mp.spawn(_segment_in_process, args=(tmp_path,), nprocs=2)
    first, second = (json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1))
    assert first == second
    # without the broadcast two segmentations at 0.5 would differ: the oracle is a fresh one here
    tokenizer = tiny_tokenizer()
    alone = SubwordDropout(_training_split(tokenizer), tokenizer, 0.5, 64, 64)
    alone.set_epoch(0)
    assert [alone.input_ids, alone.labels] != first
