"""The corpus cache: parallel text files of any size, out of core, read once into a memory-mapped Arrow file and
tokenized once.

A training pair of text files (plain, or gzip'd as corpora are usually shipped: `train.en.gz`) goes through three
steps, the first two cached in the corpus cache (`--data_cache_dir`, by default
`$HF_DATASETS_CACHE/vanilla-transformer-corpora`):

1. `read_corpus`: both files are read side by side, line by line (`vanilla_transformer.files.text_lines`: as `wc -l`
   counts them, a "\\r\\n" ending and a leading byte-order mark removed), into `pairs-KEY/pairs.arrow` (columns
   `source`, `target`), KEY being a fingerprint of the files' paths, sizes and modification times; reading both
   files in one pass finds mismatched line counts without holding either file in memory. A missing, unreadable,
   non-UTF-8 or truncated gzip file is one `files.TextFileError` line naming the file, an empty file or files of
   different lengths one `DataError` line, and nothing is left in the cache.
2. `tokenize_corpus`: `datasets.Dataset.map` over the Arrow file with the fast tokenizer's batched calls into
   `tokens-KEY.arrow` (KEY: the pairs' fingerprint, the tokenizer's JSON, the length limits and the options), with
   the token counts of each side and a 64-bit hash of each pair as columns. A second run, a resume or a second
   process reads the cached file and says so.
3. `cleaning.clean_corpus`: the rules of Moses' `clean-corpus-n.perl` on the cached length and hash columns.

Every file is written under a temporary name and renamed into place once whole, so processes sharing the cache
never read half a file; the cache holds only what these functions wrote, and deleting it only costs a re-read.
"""

import copy
import hashlib
import itertools
import json
import os
from collections.abc import Iterator

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa

from vanilla_transformer.files import open_text_file, text_lines
from vanilla_transformer.training.messages import DataError

CACHE_FOLDER = "vanilla-transformer-corpora"
FORMAT_VERSION = 1  # part of every fingerprint: a new layout of the cached files never reads an old one
PAIRS_PER_BATCH = 50_000


def default_cache_dir() -> str:
    """`$HF_DATASETS_CACHE/vanilla-transformer-corpora` (`datasets`' own cache, ~/.cache/huggingface/datasets)."""
    return os.path.join(str(datasets.config.HF_DATASETS_CACHE), CACHE_FOLDER)


def files_fingerprint(*paths: str) -> str:
    """A key that changes when any file is replaced, grows, shrinks or is touched (path, size, mtime)."""
    described = []
    for path in paths:
        status = os.stat(path)
        described.append([os.path.abspath(path), status.st_size, status.st_mtime_ns])
    return hashlib.sha256(json.dumps([FORMAT_VERSION, described]).encode()).hexdigest()[:20]


def _walk_pairs(source: str, target: str, split: str, writer=None) -> int:
    """Both files side by side, checked (the same number of lines, text on each side), into the Arrow stream
    `writer` if one is given; -> the number of pairs. Memory: one batch of lines."""
    schema = pa.schema([("source", pa.large_string()), ("target", pa.large_string())])
    sources, targets = text_lines(source, f"{split} source file"), text_lines(target, f"{split} target file")
    count, has_text = 0, [False, False]
    while True:
        columns = list(itertools.islice(sources, PAIRS_PER_BATCH)), list(itertools.islice(targets, PAIRS_PER_BATCH))
        if len(columns[0]) != len(columns[1]):  # one file ended first: count the rest of the other, line by line
            lines = [count + len(columns[0]) + sum(1 for _ in sources),
                     count + len(columns[1]) + sum(1 for _ in targets)]
            raise DataError(f"The {split} files do not pair up: {source} has {lines[0]:,} lines but {target} "
                            f"has {lines[1]:,}; line i of one must translate line i of the other.")
        if not columns[0]:
            break
        for side in (0, 1):
            has_text[side] = has_text[side] or any(line.strip() for line in columns[side])
        if writer is not None:
            writer.write_batch(pa.record_batch([pa.array(columns[0], pa.large_string()),
                                                pa.array(columns[1], pa.large_string())], schema=schema))
        count += len(columns[0])
    for side, (path_of_side, name) in enumerate(((source, "source"), (target, "target"))):
        if not has_text[side]:
            raise DataError(f"The {split} {name} file {path_of_side} is empty.")
    return count


def _check_readable(source: str, target: str, split: str) -> None:
    """Missing or unreadable: one line before anything is read or written."""
    for path, side in ((source, "source"), (target, "target")):
        open_text_file(path, f"{split} {side} file").close()


def check_pairs(source: str, target: str, split: str) -> int:
    """Read both files through once, writing nothing: -> the number of pairs, or the one-line error of a bad file
    (`files.TextFileError`, `DataError`)."""
    _check_readable(source, target, split)
    return _walk_pairs(source, target, split)


def _write_pairs(source: str, target: str, split: str, path: str) -> int:
    """Both files side by side into the Arrow stream file `path`; -> the number of pairs."""
    schema = pa.schema([("source", pa.large_string()), ("target", pa.large_string())])
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        return _walk_pairs(source, target, split, writer)


def read_corpus(source: str, target: str, split: str, cache_dir: str, log=print):
    """-> (`datasets.Dataset` of the pairs, memory-mapped from the cache, its fingerprint). Reads the files only when
    the cache has no copy of them as they are now."""
    _check_readable(source, target, split)
    key = files_fingerprint(source, target)
    folder = os.path.join(cache_dir, f"pairs-{key}")
    final = os.path.join(folder, "pairs.arrow")
    if os.path.isfile(final):
        log(f"Reusing the {split} pairs read into {final}")
        return datasets.Dataset.from_file(final), key
    created = not os.path.isdir(folder)
    os.makedirs(folder, exist_ok=True)
    temporary = f"{final}.tmp-{os.getpid()}"
    try:
        count = _write_pairs(source, target, split, temporary)
    except BaseException:
        if os.path.exists(temporary):
            os.remove(temporary)
        if created and not os.listdir(folder):
            os.rmdir(folder)
        raise
    os.replace(temporary, final)
    with open(os.path.join(folder, "files.json"), "w", encoding="utf-8") as f:
        json.dump({"source": os.path.abspath(source), "target": os.path.abspath(target), "pairs": count}, f)
    log(f"Read {count:,} {split} pairs into {final}")
    return datasets.Dataset.from_file(final), key


def pair_hashes(sources: list[str], targets: list[str]) -> np.ndarray:
    """A 64-bit hash of every (source, target) pair (pandas' vectorised string hash of each side, combined)."""
    source = pd.util.hash_array(np.asarray(sources, dtype=object), categorize=False)
    target = pd.util.hash_array(np.asarray(targets, dtype=object), categorize=False)
    return source ^ (target * np.uint64(0x9E3779B97F4A7C15) + np.uint64(0x632BE59BD9B4E019))


TOKEN_FEATURES = datasets.Features({
    "input_ids": datasets.List(datasets.Value("int32")),
    "labels": datasets.List(datasets.Value("int32")),
    "source_length": datasets.Value("int32"),
    "target_length": datasets.Value("int32"),
    "pair_hash": datasets.Value("uint64"),
})


def batch_encoder(tokenizer, max_length: int, target: bool = False):
    """sentences -> token ids, truncated to `max_length` (special tokens included) as `tokenizer(...,
    truncation=True)` makes them. A fast tokenizer whose target side is its source side is called through its
    `tokenizers` backend (`encode_batch_fast`, a copy set to truncate): the same ids, without building the
    BatchEncoding (benchmarks/data_scale.py times tokenization)."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is None or not hasattr(backend, "encode_batch_fast") or type(tokenizer).__name__ not in (
            "PreTrainedTokenizerFast", "TokenizersBackend"):
        if target:
            return lambda texts: tokenizer(text_target=texts, max_length=max_length, truncation=True)["input_ids"]
        return lambda texts: tokenizer(texts, max_length=max_length, truncation=True)["input_ids"]
    backend = copy.deepcopy(backend)
    backend.enable_truncation(max_length)
    backend.no_padding()
    return lambda texts: [encoding.ids for encoding in backend.encode_batch_fast(texts)]


def tokens_fingerprint(pairs_key: str, tokenizer, max_source_length: int, max_target_length: int,
                       clean: bool) -> str:
    backend = getattr(tokenizer, "backend_tokenizer", None)
    description = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    options = [FORMAT_VERSION, pairs_key, max_source_length, max_target_length, clean, type(tokenizer).__name__]
    return hashlib.sha256(json.dumps(options).encode() + description.encode()).hexdigest()[:20]


def tokenize_corpus(pairs, pairs_key: str, tokenizer, max_source_length: int, max_target_length: int, *,
                    clean: bool, cache_dir: str, num_proc: int | None = None, log=print):
    """The pairs tokenized (`input_ids`, `labels`, `source_length`, `target_length`, `pair_hash`), from the cache
    when this tokenizer with these limits already tokenized them. With `clean`, each side is cut one token above its
    limit, so that a pair longer than the limit is seen to be (and dropped by `cleaning.clean_corpus`); without, at the limit,
    as `tokenized_splits.tokenize_splits` truncates."""
    key = tokens_fingerprint(pairs_key, tokenizer, max_source_length, max_target_length, clean)
    folder = os.path.join(cache_dir, f"pairs-{pairs_key}")
    record = os.path.join(folder, f"tokens-{key}.json")
    if os.path.isfile(record):
        with open(record, encoding="utf-8") as f:
            files = json.load(f)["files"]
        if all(os.path.isfile(os.path.join(folder, name)) for name in files):
            log(f"Reusing the tokenized training pairs in {os.path.join(folder, files[0])}")
            parts = [datasets.Dataset.from_file(os.path.join(folder, name)) for name in files]
            return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    extra = int(clean)
    encode_sources = batch_encoder(tokenizer, max_source_length + extra)
    encode_targets = batch_encoder(tokenizer, max_target_length + extra, target=True)

    def encode(batch):
        sources, targets = encode_sources(batch["source"]), encode_targets(batch["target"])
        return {"input_ids": sources, "labels": targets, "source_length": [len(ids) for ids in sources],
                "target_length": [len(ids) for ids in targets],
                "pair_hash": pair_hashes(batch["source"], batch["target"])}

    cache_file = os.path.join(folder, f"tokens-{key}.arrow")
    tokenized = pairs.map(encode, batched=True, batch_size=10_000, remove_columns=pairs.column_names,
                          features=TOKEN_FEATURES, cache_file_name=cache_file, new_fingerprint=key,
                          load_from_cache_file=False, num_proc=num_proc, desc="Tokenizing the training pairs")
    files = [os.path.basename(f["filename"]) for f in tokenized.cache_files]
    temporary = f"{record}.tmp-{os.getpid()}"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump({"files": files, "pairs": len(tokenized)}, f)
    os.replace(temporary, record)
    log(f"Tokenized {len(tokenized):,} training pairs into {cache_file}")
    return tokenized


def sample_pairs(total_pairs: int, sample_lines: int) -> int:
    """How many pairs a sample of `sample_lines` sentences holds (both sides of each pair are sentences)."""
    return min(total_pairs, max(1, sample_lines // 2))


def _chosen_pairs(total_pairs: int, sample_lines: int, seed: int) -> np.ndarray | None:
    """The line numbers of the pairs in the sample, ascending (seeded); None where every pair fits."""
    if 2 * total_pairs <= sample_lines:
        return None
    wanted = sample_pairs(total_pairs, sample_lines)
    return np.sort(np.random.default_rng(seed).choice(total_pairs, size=wanted, replace=False))


def sample_texts(pairs, sample_lines: int, seed: int) -> tuple[Iterator[str], int]:
    """The sentences to train the BPE vocabulary on: both sides of every pair, or, where the corpus has more than
    `sample_lines` sentences, both sides of `sample_lines // 2` pairs drawn at random (seeded).
    -> (iterator over the sentences, pairs in the sample)."""
    total = len(pairs)
    chosen = _chosen_pairs(total, sample_lines, seed)
    if chosen is not None:
        pairs = pairs.select(chosen)

    def texts():
        for start in range(0, len(pairs), 10_000):
            batch = pairs[start:start + 10_000]
            yield from batch["source"]
            yield from batch["target"]

    return texts(), len(pairs)


def sample_file_texts(source: str, target: str, total: int, sample_lines: int, seed: int) -> Iterator[str]:
    """As `sample_texts`, read from the files (for `--streaming`): the same seeded choice of pairs, picked in one
    pass."""
    chosen = _chosen_pairs(total, sample_lines, seed)
    lines = zip(text_lines(source, "train source file"), text_lines(target, "train target file"))
    if chosen is None:
        for source_line, target_line in lines:
            yield source_line
            yield target_line
        return
    position = 0
    for wanted in chosen.tolist():
        for source_line, target_line in lines:
            position += 1
            if position - 1 == wanted:
                yield source_line
                yield target_line
                break
