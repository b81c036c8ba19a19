"""Training while the corpus is tokenized: the first training step of a large corpus comes after its first block of
pairs is tokenized, not after all of them.

Tokenizing is most of a first run's start on a large corpus (4M pairs: about two thirds of the time before the first
step, benchmarks/RESULTS.md "Large corpora"), and the token-budget batches of the cached path
(batching.TokenBudgetBatchSampler) need every pair's length before the first one. `TrainingWhileTokenizing` instead
makes the run's batches as an endless stream (the Trainer's path for `--streaming`: `--max_steps` or a time budget):

- Pass 0 visits the corpus in blocks of `block_pairs` consecutive pairs, in a random order seeded by `--seed`. A
  background thread tokenizes the blocks in that order, each into its own Arrow file of the corpus cache's staging
  folder (the fast tokenizer's batched calls release the GIL; the training's steps run meanwhile), and the stream
  takes each block as soon as it is written: its pairs cleaned by the rules that need only the pair
  (`cleaning.pair_rules`) and by their hashes against every pair kept earlier in the pass (so each distinct pair once,
  as the cleaning's "exact duplicates after the first", counting first in the pass's order), shuffled, then in
  maxi-batches of `maxi_batch_pairs` sorted by length, cut by the token budget, their batches shuffled (Marian's
  scheme, as `--streaming`).
- Once every block is tokenized, the files are installed in the cache as one tokenized copy (rows in the corpus's
  order, the record last: `corpus_cache.install_tokens`), the same copy `corpus_cache.tokenize_corpus` makes, which
  later runs reuse; the whole corpus is cleaned as every cached run cleans it (`cleaning.clean_corpus`).
- Passes 1, 2, ... are the cached path's epochs: `batching.TokenBudgetBatchSampler` over the kept pairs, epoch k in
  its order k.

Where the cache already holds the tokenized copy, the blocks are read from it: the batches are the same whether the
run tokenized or not, so a resumed run (whose Trainer reads and drops the batches the killed one consumed) sees
exactly the stream the killed one would have. A killed run's staging folder is removed by the next run
(`corpus_cache.staging`), which tokenizes again. An error of the thread (a full disk) is raised in the training loop
where it next waits for a block, or by `finish`.
"""

import itertools
import os
import threading
from collections.abc import Iterator

import datasets
import numpy as np
import pyarrow as pa
import torch

from vanilla_transformer.training.arrow_columns import length_columns, numpy_columns, select_rows
from vanilla_transformer.training.batching import TokenBudgetBatchSampler, maxi_batch
from vanilla_transformer.training.cleaning import (
    clean_corpus,
    drop_empty_sides,
    empty_side,
    pair_rules,
    passing,
)
from vanilla_transformer.training.corpus_cache import (
    TOKEN_FEATURES,
    cached_tokens,
    install_tokens,
    staging,
    token_encoder,
    tokens_fingerprint,
)
from vanilla_transformer.training.messages import DataError

BLOCK_PAIRS = 100_000  # pairs of a block: the first step waits for one (a few seconds), the cache holds N / this files
ENCODE_PAIRS = 10_000  # pairs tokenized (and written as one Arrow record batch) at a time
# in every checkpoint of the recipe (trainer.TranslationTrainer): whether its run trained while tokenizing, which a
# resumed run follows, since its batches depend on it (text_corpus.trains_while_tokenizing)
BATCHES_RECORD = "training_batches.json"


def block_bounds(pairs: int, block_pairs: int) -> list[tuple[int, int]]:
    """[start, end) of every block of `block_pairs` consecutive pairs, in the corpus's order."""
    return [(start, min(start + block_pairs, pairs)) for start in range(0, pairs, block_pairs)]


def block_order(blocks: int, seed: int) -> list[int]:
    """The order in which pass 0 visits the blocks (and the thread tokenizes them): seeded by the run's seed."""
    return np.random.default_rng([seed, 0xB10C]).permutation(blocks).tolist()


class TrainingWhileTokenizing(torch.utils.data.IterableDataset):
    """An endless stream of token-budget batches (lists of {input_ids, labels}) over a cached corpus's pairs, whose
    pass 0 starts while the pairs are still being tokenized (module docstring).

    Args:
        pairs: the corpus's cached pairs (`corpus_cache.read_corpus`; `source`, `target`), `pairs_key` their
            fingerprint, `cache_dir` the corpus cache.
        tokenizer, max_source_length, max_target_length, clean: as `corpus_cache.tokenize_corpus`.
        max_tokens: the token budget of a batch; `seed`: the blocks' order, the shuffles and the epochs' orders.
        maxi_batch_pairs: pairs sorted by length together in pass 0; `block_pairs`: pairs of a block (default
            `BLOCK_PAIRS`).
        log: where the thread's and the cleaning's lines go.
        on_cleaned: called with (pairs kept, {rule: pairs dropped}) once the whole corpus is cleaned.
    """

    def __init__(self, pairs, pairs_key: str, tokenizer, *, max_source_length: int, max_target_length: int,
                 max_tokens: int, cache_dir: str, clean: bool = True, seed: int = 0, maxi_batch_pairs: int = 20_000,
                 block_pairs: int | None = None, log=print, on_cleaned=None):
        self.pairs, self.pairs_key, self.cache_dir = pairs, pairs_key, cache_dir
        self.max_source_length, self.max_target_length = max_source_length, max_target_length
        self.max_tokens, self.clean, self.seed = max_tokens, clean, seed
        self.maxi_batch_pairs, self.log, self.on_cleaned = maxi_batch_pairs, log, on_cleaned
        self.key = tokens_fingerprint(pairs_key, tokenizer, max_source_length, max_target_length, clean, len(pairs))
        self.encode = token_encoder(tokenizer, max_source_length, max_target_length, clean)
        self.bounds = block_bounds(len(pairs), block_pairs or BLOCK_PAIRS)
        self.order = block_order(len(self.bounds), seed)
        self.blocks: dict[int, datasets.Dataset] = {}  # block -> its tokens, as they are written
        self.tokens = None  # every block's tokens, in the corpus's order, once installed in the cache
        self.kept = self.lengths = None  # the whole corpus's cleaning: kept pairs, their lengths
        self.error: BaseException | None = None
        self.ready = threading.Condition()
        self.thread = None
        found = cached_tokens(pairs, self.key, pairs_key, cache_dir, log)
        if found is not None:
            self.tokens = found
            self.blocks = {b: found.select(range(*bounds)) for b, bounds in enumerate(self.bounds)}
        else:
            self.thread = threading.Thread(target=self._tokenize, name="tokenizing the training pairs", daemon=True)
            self.thread.start()

    # -- the thread -------------------------------------------------------------------------------------------------

    def _tokenize(self) -> None:
        try:
            with staging(self.cache_dir, self.log, user="tokens") as stage:  # beside the process's own
                names = {}
                for b in self.order:
                    names[b] = f"tokens-{self.key}-{b:05d}-of-{len(self.bounds):05d}.arrow"
                    path = os.path.join(stage, names[b])
                    self._write_block(*self.bounds[b], path)
                    with self.ready:
                        self.blocks[b] = datasets.Dataset.from_file(path)
                        self.ready.notify_all()
                tokens = install_tokens(stage, [names[b] for b in range(len(self.bounds))], self.pairs, self.key,
                                        self.pairs_key, self.cache_dir)
            self.log(f"Tokenized {len(tokens):,} training pairs into "
                     f"{os.path.join(self.cache_dir, f'pairs-{self.pairs_key}', names[0])} and the files beside it")
            with self.ready:
                self.tokens = tokens
                self.ready.notify_all()
        except BaseException as error:  # raised again in the training loop (`_wait`)
            with self.ready:
                self.error = error
                self.ready.notify_all()

    def _write_block(self, start: int, end: int, path: str) -> None:
        """The pairs [start, end) tokenized into the Arrow stream file `path` (a record batch per `ENCODE_PAIRS`)."""
        schema = TOKEN_FEATURES.arrow_schema
        with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for first in range(start, end, ENCODE_PAIRS):
                batch = self.pairs[first:min(first + ENCODE_PAIRS, end)]
                writer.write_batch(pa.RecordBatch.from_pydict(self.encode(batch), schema=schema))

    # -- the stream -------------------------------------------------------------------------------------------------

    def _wait(self, ready) -> None:
        with self.ready:
            while not ready() and self.error is None:
                self.ready.wait()
            if self.error is not None:
                raise self.error

    def _block(self, b: int):
        self._wait(lambda: b in self.blocks)
        return self.blocks[b]

    def _first_pass_kept(self, tokens, lengths, seen: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """-> (the rows of a block's `tokens` (with their `lengths`: `length_columns`) pass 0 trains on, the hashes
        seen so far with theirs added)."""
        source, target = lengths
        if not self.clean:
            return np.flatnonzero(~empty_side(source, target)), seen
        usable = passing(pair_rules(source, target, self.max_source_length, self.max_target_length))
        (hashes,) = numpy_columns(tokens, ["pair_hash"])
        candidates = np.flatnonzero(usable)
        _, first = np.unique(hashes[candidates], return_index=True)  # each hash's first pair in the block
        candidates = np.sort(candidates[first])
        candidates = candidates[~np.isin(hashes[candidates], seen, assume_unique=True)]
        return candidates, np.union1d(seen, hashes[candidates])

    def _maxi_batches(self, tokens, lengths, rows: np.ndarray, rng: np.random.Generator) -> Iterator[list[dict]]:
        """`rows` of `tokens` shuffled, in maxi-batches (`batching.maxi_batch`) of `maxi_batch_pairs`."""
        ids = tokens.select_columns(["input_ids", "labels"])
        longer = np.maximum(*lengths)
        rows = rng.permutation(rows)
        for start in range(0, len(rows), self.maxi_batch_pairs):
            chunk = rows[start:start + self.maxi_batch_pairs]
            for positions in maxi_batch(longer[chunk], self.max_tokens, rng):
                yield ids.__getitems__(chunk[positions].tolist())

    def check_some_pair_is_kept(self) -> None:
        """Raise `DataError` (one line with the pairs each rule dropped) when the cleaning drops every pair: the
        endless stream would never make a batch. Waits for the blocks in pass 0's order until one keeps a pair: the
        first block, unless nearly all pairs go (then the whole corpus is tokenized first)."""
        for b in self.order:
            tokens = self._block(b)
            if len(self._first_pass_kept(tokens, length_columns(tokens), np.zeros(0, dtype=np.uint64))[0]):
                return
        self.finish()

    def finish(self):
        """Wait for the thread, clean the whole corpus (once) and report it (`on_cleaned`); -> (its tokens, the rows
        kept). A run calls this after training, so that a run shorter than the tokenizing still leaves the whole
        tokenized copy in the cache and its counts in the card."""
        self._wait(lambda: self.tokens is not None)
        if self.kept is None:
            lengths = length_columns(self.tokens)
            if self.clean:
                self.kept, counts = clean_corpus(self.tokens, self.pairs, self.max_source_length,
                                                 self.max_target_length, lengths=lengths)
            else:
                self.kept, counts = drop_empty_sides(lengths)
            if len(self.kept) == 0:
                dropped = ", ".join(f"{rule} {count:,}" for rule, count in counts.items())
                raise DataError(f"No training pair is left after cleaning ({dropped}); check the files, or keep "
                                "them with --no_clean.")
            self.lengths = tuple(column[self.kept] for column in lengths)
            if self.on_cleaned is not None:
                self.on_cleaned(self.kept, counts)
        return self.tokens, self.kept

    def __iter__(self) -> Iterator[list[dict]]:
        seen = np.zeros(0, dtype=np.uint64)
        for position, b in enumerate(self.order):
            tokens = self._block(b)
            lengths = length_columns(tokens)
            rows, seen = self._first_pass_kept(tokens, lengths, seen)
            yield from self._maxi_batches(tokens, lengths, rows, np.random.default_rng([self.seed, 0, position]))
        del seen
        tokens, kept = self.finish()  # a corpus the cleaning empties: one DataError line here
        training = tokens if len(kept) == len(tokens) else select_rows(tokens, kept)
        training = training.select_columns(["input_ids", "labels"])
        sampler = TokenBudgetBatchSampler(*self.lengths, self.max_tokens, seed=self.seed)
        for epoch in itertools.count(1):
            sampler.set_epoch(epoch)
            for batch in sampler:
                yield training.__getitems__(batch)

