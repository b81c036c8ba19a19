"""The splits tokenized for the Trainer (`tokenize_splits`: input ids, labels and the token counts the sampler
batches by), and the training split segmented anew for every epoch (`SubwordDropout`, BPE-dropout)."""

import copy

import numpy as np
import torch.distributed as dist
from tokenizers import models

from vanilla_transformer.training.messages import DataError


def tokenize_splits(splits, tokenizer, max_source_length: int, max_target_length: int, keep_train_text: bool = False):
    """Tokenize every split: input_ids/attention_mask from `source`, labels from `target` (truncated, with </s>).

    Training pairs with an empty side are dropped; the training split keeps `source_length` and `target_length`
    (tokens) for batching by length, and with `keep_train_text` its `source` and `target` strings too (for
    `SubwordDropout`, which segments them anew for every epoch). The validation and test splits are sorted by source
    length, longest first, so that generation pads little. Returns ({split: tokenized dataset}, {split: texts}), where the
    texts of an evaluation split are its raw `source` and `target` strings (the BLEU references) in the sorted
    order, and `index`, each pair's line number in the original order.
    """
    def encode(batch):
        encoded = tokenizer(batch["source"], max_length=max_source_length, truncation=True)
        encoded["labels"] = tokenizer(text_target=batch["target"], max_length=max_target_length,
                                      truncation=True)["input_ids"]
        encoded["source_length"] = [len(ids) for ids in encoded["input_ids"]]
        encoded["target_length"] = [len(ids) for ids in encoded["labels"]]
        return encoded

    tokenized, texts = {}, {}
    for split, dataset in splits.items():
        if split == "train":
            before = len(dataset)
            dataset = dataset.filter(lambda b: [bool(s.strip()) and bool(t.strip())
                                                for s, t in zip(b["source"], b["target"])],
                                     batched=True, desc="Dropping empty pairs")
            if len(dataset) == 0:
                raise DataError("Every training pair has an empty source or target sentence.")
            if len(dataset) < before:
                print(f"Dropped {before - len(dataset)} training pairs with an empty side.")
        else:
            dataset = dataset.add_column("index", list(range(len(dataset))))
        dataset = dataset.map(encode, batched=True, desc=f"Tokenizing {split}")
        if split == "train":  # the lengths stay for the token-budget sampler (the Trainer drops them from batches)
            tokenized[split] = dataset if keep_train_text else dataset.remove_columns(["source", "target"])
        else:
            longest_first = np.argsort(-np.asarray(dataset["source_length"]), kind="stable")
            dataset = dataset.select(longest_first)
            texts[split] = {column: list(dataset[column]) for column in ("source", "target", "index")}
            tokenized[split] = dataset.select_columns(["input_ids", "attention_mask", "labels"])
    return tokenized, texts


class SubwordDropout:
    """BPE-dropout (Provilkov et al., ACL 2020): the training pairs, segmented anew for every epoch.

    Each merge of the BPE vocabulary is skipped with probability `dropout` while a word is segmented, so a word is
    seen split in many ways over the epochs ("▁bush es." one time, "▁bus h es." another) and the model cannot learn
    the training sentences by heart as sequences of fixed tokens; decoding and evaluation use the plain segmentation.
    Provilkov et al. use 0.1 on both sides. A map-style dataset for the training DataLoader: `dataset` is the
    training split of `tokenize_splits(..., keep_train_text=True)`; item i is {input_ids, attention_mask, labels}
    of pair i in the segmentation of the current epoch, truncated as the plain ones.

    `set_epoch(epoch)` segments the whole split for that epoch (one call of the tokenizer); `epoch_lengths(epoch)`
    gives its token counts, with which the token-budget sampler sorts the pairs of neighbouring batches so that a
    batch pads to its own pieces, not to the longest of a random split (batched by the plain lengths alone, the padded
    batches grow much more than the tokens: benchmarks/experiments/bpe-dropout.md#batching). `source_lengths` and
    `target_lengths` are the plain segmentation's: they fix which pairs lie near each other, the same in every epoch
    and every process.

    The segmentation is drawn by the `tokenizers` library's own random generator, which cannot be seeded: runs with
    BPE-dropout are not repeatable token for token. With several processes the first one segments and sends its
    segmentation to the others (torch.distributed), so all of them batch the same pieces.
    """

    def __init__(self, dataset, tokenizer, dropout: float, max_source_length: int, max_target_length: int):
        if not 0 < dropout < 1:
            raise ValueError(f"BPE-dropout must lie between 0 and 1 (exclusive), got {dropout}.")
        backend = getattr(tokenizer, "backend_tokenizer", None)
        if backend is None or not isinstance(backend.model, models.BPE):
            kind = type(backend.model).__name__ if backend is not None else f"slow {type(tokenizer).__name__}"
            raise DataError(f"BPE-dropout needs a fast BPE tokenizer; this tokenizer is a {kind} one.")
        missing = {"source", "target", "source_length", "target_length"} - set(dataset.column_names)
        if missing:
            raise ValueError(f"SubwordDropout needs the training split with its texts (tokenize_splits(..., "
                             f"keep_train_text=True)); it lacks {', '.join(sorted(missing))}.")
        self.sources, self.targets = list(dataset["source"]), list(dataset["target"])
        self.source_lengths, self.target_lengths = list(dataset["source_length"]), list(dataset["target_length"])
        self.tokenizer = copy.deepcopy(tokenizer)  # the saved tokenizer keeps segmenting deterministically
        self.tokenizer.backend_tokenizer.model.dropout = dropout
        self.dropout = dropout
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.epoch = None
        self.input_ids = self.labels = None  # the current epoch's segmentation

    def __len__(self) -> int:
        return len(self.sources)

    def set_epoch(self, epoch: int) -> None:
        """Segment every pair for `epoch` (nothing to do if it is the current one)."""
        if epoch == self.epoch:
            return

        shared = dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1
        segmentation = [None]
        if not shared or dist.get_rank() == 0:
            segmentation = [(
                self.tokenizer(self.sources, max_length=self.max_source_length, truncation=True)["input_ids"],
                self.tokenizer(text_target=self.targets, max_length=self.max_target_length,
                               truncation=True)["input_ids"],
            )]
        if shared:
            dist.broadcast_object_list(segmentation, src=0)
        (self.input_ids, self.labels), self.epoch = segmentation[0], epoch

    def epoch_lengths(self, epoch: int) -> tuple[list[int], list[int]]:
        """Token counts of every pair's source and target in the segmentation of `epoch`."""
        self.set_epoch(epoch)
        return [len(ids) for ids in self.input_ids], [len(ids) for ids in self.labels]

    def __getitems__(self, indices: list[int]) -> list[dict]:
        """A whole batch (the DataLoader uses this when the dataset has it); epoch 0 unless an epoch was set."""
        if self.epoch is None:
            self.set_epoch(0)
        return [{"input_ids": self.input_ids[i], "attention_mask": [1] * len(self.input_ids[i]),
                 "labels": self.labels[i]} for i in indices]

    def __getitem__(self, index: int) -> dict:
        return self.__getitems__([index])[0]
