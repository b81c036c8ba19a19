"""The cleaning rules of the training pairs, one set for the cached corpus and the streamed one: those of Moses'
`clean-corpus-n.perl`, which fairseq's and most recipes' preparation scripts use.

A pair is dropped when a side is empty (only `</s>`: nothing but whitespace), longer than the limits (tokens, `</s>`
included), or one side holds more than `MAX_LENGTH_RATIO` times the tokens of the other (`pair_rules`, which need
only the pair itself); then exact duplicate pairs (the same source and target text) after the first, which needs
the whole corpus (`clean_corpus`, on the cached corpus's numpy columns; a stream keeps its duplicates). Each dropped
pair counts under the first rule it breaks. With `--no_clean` only the pairs with an empty side go
(`drop_empty_sides`), as for every other source of data.
"""

import numpy as np

from vanilla_transformer.training.arrow_columns import numpy_columns

MAX_LENGTH_RATIO = 9  # clean-corpus-n.perl's default
CLEANING_RULES = ("empty_side", "too_long", "length_ratio", "duplicate")


def empty_side(source: np.ndarray, target: np.ndarray) -> np.ndarray:
    """The pairs (token counts of each side, numpy arrays) with a side of only `</s>`."""
    return (source <= 1) | (target <= 1)


def pair_rules(source: np.ndarray, target: np.ndarray, max_source_length: int,
               max_target_length: int) -> dict[str, np.ndarray]:
    """{rule: the pairs that break it and no rule before it} for the rules that need only the pair itself
    (`empty_side`, `too_long`, `length_ratio`), from the token counts of each side (numpy arrays)."""
    empty = empty_side(source, target)
    too_long = ~empty & ((source > max_source_length) | (target > max_target_length))
    words_source, words_target = source - 1, target - 1
    ratio = ~empty & ~too_long & ((words_source > MAX_LENGTH_RATIO * words_target)
                                  | (words_target > MAX_LENGTH_RATIO * words_source))
    return {"empty_side": empty, "too_long": too_long, "length_ratio": ratio}


def passing(broken: dict[str, np.ndarray]) -> np.ndarray:
    """The pairs that break none of the rules `broken` (`pair_rules`) marks."""
    return ~(broken["empty_side"] | broken["too_long"] | broken["length_ratio"])


def _duplicates(candidates: np.ndarray, candidate_hashes: np.ndarray, pairs) -> np.ndarray:
    """Among `candidates` (indices, ascending; `candidate_hashes` their pairs' 64-bit hashes), those whose pair
    equals an earlier candidate's, checked on the text where the hashes agree."""
    order = np.argsort(candidate_hashes, kind="stable")
    sorted_hashes = candidate_hashes[order]
    same = np.flatnonzero(sorted_hashes[1:] == sorted_hashes[:-1]) + 1
    if len(same) == 0:
        return np.zeros(0, dtype=np.int64)
    starts = np.unique(np.concatenate([same - 1, same]))
    groups = np.split(starts, np.flatnonzero(np.diff(sorted_hashes[starts]) != 0) + 1)
    del sorted_hashes
    involved = np.unique(candidates[order[starts]])
    rows = pairs.select(involved)
    text = dict(zip(involved.tolist(), zip(rows["source"], rows["target"])))
    dropped = []
    for group in groups:
        seen = set()
        for index in sorted(candidates[order[group]].tolist()):
            if text[index] in seen:
                dropped.append(index)
            seen.add(text[index])
    return np.asarray(sorted(dropped), dtype=np.int64)


def clean_corpus(tokenized, pairs, max_source_length: int, max_target_length: int,
                 lengths: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, dict]:
    """-> (indices of the pairs kept, ascending; {rule: pairs dropped by it}) for `CLEANING_RULES`. `tokenized`: the
    cached corpus's tokens (its `pair_hash` column); `pairs`: its text; `lengths`: the `source_length` and
    `target_length` columns (`arrow_columns.length_columns`), which the caller also gives the sampler."""
    source, target = lengths
    broken = pair_rules(source, target, max_source_length, max_target_length)
    counts = {rule: int(mask.sum()) for rule, mask in broken.items()}
    usable = passing(broken)
    del broken
    (hashes,) = numpy_columns(tokenized, ["pair_hash"])
    # index arrays of 4 bytes a pair where they fit: at tens of millions of pairs these are the cleaning's memory
    index_type = np.int32 if len(usable) < 2**31 else np.int64
    candidates = np.flatnonzero(usable).astype(index_type)
    candidate_hashes = hashes[candidates]
    del hashes
    duplicate = _duplicates(candidates, candidate_hashes, pairs)
    del candidates, candidate_hashes
    usable[duplicate] = False
    counts["duplicate"] = len(duplicate)
    return np.flatnonzero(usable).astype(index_type), counts


def drop_empty_sides(lengths: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, dict]:
    """`--no_clean`: -> (indices of the pairs kept, ascending; {"empty_side": pairs dropped}): only the pairs with an
    empty side go."""
    kept = np.flatnonzero(~empty_side(*lengths))
    return kept, {"empty_side": len(lengths[0]) - len(kept)}


def describe_cleaning(read: int, used: int, counts: dict, max_source_length: int, max_target_length: int) -> str:
    return (f"Cleaning (the rules of Moses' clean-corpus-n.perl; --no_clean keeps every pair): of {read:,} pairs "
            f"dropped {counts['empty_side']:,} with an empty side, {counts['too_long']:,} longer than "
            f"{max_source_length}/{max_target_length} tokens, {counts['length_ratio']:,} with a length ratio above "
            f"{MAX_LENGTH_RATIO}, {counts['duplicate']:,} exact duplicates; training on {used:,} pairs.")
