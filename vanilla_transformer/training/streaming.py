"""`--streaming`: training batches read, tokenized and cleaned on the fly from the text files, nothing cached.

For a corpus one does not want copied into a cache (the cached path, training/corpus_cache.py, keeps a tokenized
copy about the size of the text). The files are read line by line (`files.text_lines`) into a
`datasets.IterableDataset`; pairs are shuffled through a seeded buffer of `--shuffle_buffer_pairs`
(`IterableDataset.shuffle`, reseeded every pass over the files), each process keeps its share
(`datasets.distributed.split_dataset_by_node`) and tokenizes it with batched fast-tokenizer calls; the cleaning
rules that need only the pair itself are applied (`cleaning.pair_rules`: an empty side, longer than the limits, a
length ratio above 9; duplicates need the whole corpus and are kept). Token batches are made as Marian's
maxi-batches: `--maxi_batch_pairs` pairs are sorted by length, cut by the token budget (`batching.cut_points`) and
their batches shuffled. The stream passes over the files again and again: the run's length is `--max_steps` or the
time budget's plan, and a resumed run skips the batches the interrupted one consumed (the Trainer reads and drops
them: the same seed gives the same stream).
"""

import itertools
from collections.abc import Iterator

import numpy as np
import torch
from datasets import IterableDataset
from datasets.distributed import split_dataset_by_node

from vanilla_transformer.files import text_lines
from vanilla_transformer.training.batching import maxi_batch
from vanilla_transformer.training.cleaning import CLEANING_RULES, pair_rules, passing
from vanilla_transformer.training.corpus_cache import batch_encoder
from vanilla_transformer.training.messages import DataError


def _pairs(source: str, target: str) -> Iterator[dict]:
    for source_line, target_line in zip(text_lines(source, "train source file"),
                                        text_lines(target, "train target file")):
        yield {"source": source_line, "target": target_line}


class StreamingTokenBatches(torch.utils.data.IterableDataset):
    """An endless stream of token-budget batches (lists of {input_ids, labels}) for one process of the run."""

    def __init__(self, source: str, target: str, tokenizer, *, max_source_length: int, max_target_length: int,
                 max_tokens: int, clean: bool = True, seed: int = 0, rank: int = 0, world_size: int = 1,
                 shuffle_buffer_pairs: int = 100_000, maxi_batch_pairs: int = 20_000):
        self.source, self.target, self.tokenizer = source, target, tokenizer
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.max_tokens, self.clean, self.seed = max_tokens, clean, seed
        self.rank, self.world_size = rank, world_size
        self.shuffle_buffer_pairs, self.maxi_batch_pairs = shuffle_buffer_pairs, maxi_batch_pairs

    def examples(self, epoch: int) -> IterableDataset:
        """This process's tokenized, cleaned pairs of one pass over the files."""
        stream = IterableDataset.from_generator(_pairs, gen_kwargs={"source": self.source, "target": self.target})
        stream = stream.shuffle(seed=self.seed, buffer_size=self.shuffle_buffer_pairs)
        stream.set_epoch(epoch)
        stream = split_dataset_by_node(stream, rank=self.rank, world_size=self.world_size)
        extra = int(self.clean)  # one token above the limit: a longer pair is seen to be, and dropped
        encode_sources = batch_encoder(self.tokenizer, self.max_source_length + extra)
        encode_targets = batch_encoder(self.tokenizer, self.max_target_length + extra, target=True)

        def encode(batch):
            return {"input_ids": encode_sources(batch["source"]), "labels": encode_targets(batch["target"])}

        stream = stream.map(encode, batched=True, batch_size=1_000, remove_columns=["source", "target"])
        if self.clean:
            stream = stream.filter(self.keep, batched=True, batch_size=1_000)
        return stream

    def check_some_pair_is_kept(self, batch_pairs: int = 1_000) -> None:
        """Raise `DataError` (one line naming the files and the pairs each rule dropped) when the cleaning drops
        every pair of the files: the endless stream would never make a batch. Reads the files in order until a pair
        is kept: the first batch of pairs, unless nearly all of them go."""
        if not self.clean:
            return
        encode_sources = batch_encoder(self.tokenizer, self.max_source_length + 1)
        encode_targets = batch_encoder(self.tokenizer, self.max_target_length + 1, target=True)
        counts = dict.fromkeys(CLEANING_RULES[:3], 0)
        pairs = _pairs(self.source, self.target)
        while chunk := list(itertools.islice(pairs, batch_pairs)):
            batch = {"input_ids": encode_sources([p["source"] for p in chunk]),
                     "labels": encode_targets([p["target"] for p in chunk])}
            if any(self.keep(batch)):
                return
            source, target = (np.fromiter(map(len, batch[name]), dtype=np.int64, count=len(chunk))
                              for name in ("input_ids", "labels"))
            for rule, mask in pair_rules(source, target, self.max_source_length, self.max_target_length).items():
                counts[rule] += int(mask.sum())
        raise DataError(f"No training pair of {self.source} / {self.target} is left after cleaning "
                        f"({', '.join(f'{rule} {count:,}' for rule, count in counts.items())}); check the files, or "
                        "keep them with --no_clean.")

    def keep(self, batch) -> list[bool]:
        """The pairs of `batch` that break none of the cleaning rules that need only the pair itself."""
        source, target = (np.fromiter(map(len, batch[name]), dtype=np.int64, count=len(batch[name]))
                          for name in ("input_ids", "labels"))
        return passing(pair_rules(source, target, self.max_source_length, self.max_target_length)).tolist()

    def batches(self, examples, rng: np.random.Generator) -> Iterator[list[dict]]:
        """Maxi-batches: `maxi_batch_pairs` examples sorted by length, cut by the token budget, batches shuffled."""
        iterator = iter(examples)
        while chunk := list(itertools.islice(iterator, self.maxi_batch_pairs)):
            lengths = np.asarray([max(len(e["input_ids"]), len(e["labels"])) for e in chunk])
            for positions in maxi_batch(lengths, self.max_tokens, rng):
                yield [chunk[i] for i in positions.tolist()]

    def __iter__(self) -> Iterator[list[dict]]:
        for epoch in itertools.count():
            rng = np.random.default_rng((self.seed, self.rank, epoch))
            yield from self.batches(self.examples(epoch), rng)
