"""Batches by token budget (section 5.1 of the paper): sentence pairs of similar length are put together until the
batch holds about `max_tokens` source and `max_tokens` target tokens.

Why a batch sampler and not Trainer's `train_sampling_strategy="group_by_length"`: that strategy groups sentences of
similar length but keeps a fixed number of sentences per batch, so a batch of long sentences holds many times the
tokens of a batch of short ones. The paper fixes the number of tokens instead (~25,000 source + 25,000 target per
step), which is what `TokenBudgetBatchSampler` does. Together with the Trainer's loss normalisation by the number of
target tokens in the whole step (`num_items_in_batch`, across gradient accumulation and devices), every target token
weighs the same whatever the batch it falls in.

The batches are made once (fairseq's scheme): pairs sorted by length, ties broken at random, cut greedily; each
epoch then visits the batches in a new random order seeded by (seed, epoch). So the number of batches is fixed,
which the Trainer needs for its step counting, and a resumed run sees exactly the batches the interrupted one would
have. Under `accelerate launch`/`torchrun`, accelerate hands out whole batches round-robin to the processes.

Where the pairs are segmented anew for every epoch (BPE-dropout, `tokenized_splits.SubwordDropout`), the lengths of an
epoch differ from the ones the batches were cut by, and a batch would pad to its most finely split pair. The sampler
is then given `epoch_lengths`: in every run of `regroup` neighbouring batches it sorts the pairs by that epoch's
lengths and deals them out again into batches of the same sizes, so the batches stay as many and as large as before,
hold pairs of about the same length, and pad little; which pairs lie near each other never changes.
"""

from collections.abc import Callable, Iterator, Sequence

import numpy as np
from torch.utils.data import Sampler


class TokenBudgetBatchSampler(Sampler[list[int]]):
    """Yields lists of dataset indices; each batch costs at most `max_tokens` padded tokens on either side.

    The cost of a batch is `len(batch) * max(longest source, longest target)`: the size of the padded tensors, as in
    fairseq's `--max-tokens`. A single pair longer than the budget gets a batch of its own.

    Args:
        source_lengths, target_lengths: token counts of each pair (after tokenization, with `</s>`).
        max_tokens: the budget per batch (per device).
        seed: seeds the tie-breaking and the per-epoch order; every process must use the same one.
        epoch_lengths: for pairs segmented anew every epoch, epoch -> (source lengths, target lengths) of that epoch;
            the pairs of every `regroup` neighbouring batches are then sorted by those and dealt out again.
    """

    batch_size = None  # batches vary in size: tells accelerate's BatchSamplerShard to hand out whole batches
    drop_last = False

    def __init__(
        self,
        source_lengths: Sequence[int],
        target_lengths: Sequence[int],
        max_tokens: int,
        *,
        seed: int = 0,
        epoch_lengths: Callable[[int], tuple[Sequence[int], Sequence[int]]] | None = None,
        regroup: int = 16,
    ):
        if len(source_lengths) != len(target_lengths):
            raise ValueError(
                f"Got {len(source_lengths)} source lengths but {len(target_lengths)} target lengths; they must pair up."
            )
        if len(source_lengths) == 0:
            raise ValueError("Cannot make batches from an empty dataset.")
        if max_tokens <= 0:
            raise ValueError(f"max_tokens must be positive, got {max_tokens}.")
        if regroup < 1:
            raise ValueError(f"regroup must be at least 1, got {regroup}.")
        self.max_tokens = max_tokens
        self.seed = seed
        self.epoch_lengths, self.regroup = epoch_lengths, regroup
        self.epoch = 0
        self.batches = self._make_batches(np.asarray(source_lengths), np.asarray(target_lengths))

    def _make_batches(self, source_lengths: np.ndarray, target_lengths: np.ndarray) -> list[np.ndarray]:
        """The batches as arrays of pair indices (a few bytes per pair, whatever the corpus size)."""
        rng = np.random.default_rng(self.seed)
        tie_break = rng.permutation(len(source_lengths))
        # np.lexsort sorts by the last key first: by source length, then target length, then at random
        order = np.lexsort((tie_break, target_lengths, source_lengths))
        del tie_break
        if len(order) < 2**31:  # the batches hold `order`: 4 bytes a pair instead of 8
            order = order.astype(np.int32)
        pair_lengths = np.maximum(source_lengths, target_lengths)[order]
        ends = cut_points(pair_lengths, self.max_tokens)
        return np.split(order, ends[:-1])

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer (through accelerate) at the start of each epoch: picks that epoch's batch order."""
        self.epoch = epoch

    def batches_of_epoch(self) -> list[list[int]]:
        """The batches of the current epoch, in the order they were cut (regrouped by its lengths if it has any)."""
        if self.epoch_lengths is None:
            return self.batches
        source_lengths, target_lengths = self.epoch_lengths(self.epoch)
        pair_lengths = np.maximum(np.asarray(source_lengths), np.asarray(target_lengths))
        batches = []
        for start in range(0, len(self.batches), self.regroup):
            group = self.batches[start:start + self.regroup]
            pairs = np.concatenate(group)
            pairs = pairs[np.argsort(pair_lengths[pairs], kind="stable")].tolist()
            # the batches were cut shortest first, the largest first: the same sizes in the same order
            ends = np.cumsum([len(batch) for batch in group])
            batches.extend(pairs[end - len(batch):end] for batch, end in zip(group, ends.tolist()))
        return batches

    def __iter__(self) -> Iterator[list[int]]:
        batches = self.batches_of_epoch()
        order = np.random.default_rng((self.seed, self.epoch)).permutation(len(batches))
        for i in order.tolist():
            yield np.asarray(batches[i]).tolist()

    def __len__(self) -> int:
        return len(self.batches)


def cut_points(pair_lengths: np.ndarray, max_tokens: int, chunk: int = 1 << 20) -> np.ndarray:
    """Where the greedy cut ends each batch of pairs taken in this order: a batch grows while its size times its
    longest pair stays within `max_tokens` (a pair longer than the budget gets a batch of its own). -> the exclusive
    end of every batch, the last one `len(pair_lengths)`. Walks the lengths in chunks of small Python ints (cached
    by the interpreter), so memory stays a few bytes per pair."""
    ends, size, longest, position = [], 0, 0, 0
    for start in range(0, len(pair_lengths), chunk):
        for length in pair_lengths[start:start + chunk].tolist():
            new_longest = longest if longest > length else length
            if size and (size + 1) * new_longest > max_tokens:
                ends.append(position)
                size, new_longest = 0, length
            size += 1
            longest = new_longest
            position += 1
    ends.append(position)
    return np.asarray(ends, dtype=np.int64)


def maxi_batch(lengths: np.ndarray, max_tokens: int, rng: np.random.Generator) -> Iterator[np.ndarray]:
    """Marian's maxi-batch: the pairs of one chunk (`lengths`: the longer side of each, in tokens) sorted by length,
    cut greedily by the token budget (`cut_points`), the batches in a random order drawn from `rng`. -> the
    positions within the chunk of each batch's pairs."""
    order = np.argsort(lengths, kind="stable")
    ends = cut_points(lengths[order], max_tokens)
    starts = np.concatenate([[0], ends[:-1]])
    for b in rng.permutation(len(ends)).tolist():
        yield order[starts[b]:ends[b]]
