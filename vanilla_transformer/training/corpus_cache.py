"""The corpus cache: parallel text files of any size, out of core, read once into a memory-mapped Arrow file and
tokenized once; a cache that checks itself before it is used.

A training pair of text files (plain, or compressed as corpora are usually shipped: `train.en.gz`, `.bz2`, `.xz`; or
pipes: `<(zcat a.gz)`) goes through three steps, the first two cached in the corpus cache (`--data_cache_dir`, by
default `$HF_DATASETS_CACHE/vanilla-transformer-corpora`):

1. `read_corpus`: both files are opened once and read side by side, line by line (`files.text_lines`: as `wc -l`
   counts them, a "\\r\\n" ending and a leading byte-order mark removed), into `pairs-KEY/pairs.arrow` (columns
   `source`, `target`). KEY is a fingerprint of the files' identity (`file_identity`: path, device, inode, size,
   modification and status-change times, which an edit in place cannot all restore), or, for an input that can be
   read only once (a pipe), of the content read. Reading both files in one pass finds mismatched line counts without
   holding either file in memory. A missing, unreadable, non-UTF-8 or truncated compressed file is one
   `files.TextFileError` line naming the file, an empty file or files of different lengths one `DataError` line,
   and nothing is left in the cache. With `verify` (`--verify_corpus`) a cached copy is used only if the SHA-256 of
   the files' content, recorded when they were read, still matches.
2. `tokenize_corpus`: `datasets.Dataset.map` over the Arrow file with the fast tokenizer's batched calls into
   `tokens-KEY.arrow` (KEY: the pairs' fingerprint, how many of them, the tokenizer's JSON, the length limits and the
   options), with the token counts of each side and a 64-bit hash of each pair as columns; or, by a run that trains
   while it tokenizes, block by block into a file per block (training/background_tokens.py: the same rows under the
   same KEY). A second run, a resume or a second process reads the cached files and says so.
3. `cleaning.clean_corpus`: the rules of Moses' `clean-corpus-n.perl` on the cached length and hash columns.

Every cached Arrow file has a record (`files.json`, `tokens-KEY.json`) of its rows and of its size and a SHA-256 of
sampled blocks (`file_checksum`: 17 blocks of 64 KiB, the whole of a small file), written with it and checked,
with its row count, before it is used: a truncated, emptied or replaced file is read or tokenized again after a
one-line notice, never used. Every file is written in this process's staging folder of the cache
(`.staging-HOST-PID`, removed when the step ends, whatever happens) and renamed into place once whole, the record
last, so processes sharing the cache never read half a file; the staging folder of a killed run is removed by the
next run on the same machine (only folders of that name, with our marker inside, of a process that no longer runs).
The cache holds only what these functions wrote, and deleting it only costs a re-read.
"""

import contextlib
import copy
import hashlib
import itertools
import json
import os
import re
import shutil
import socket
import stat
from collections.abc import Iterator

import datasets
import numpy as np
import pandas as pd
import pyarrow as pa

from vanilla_transformer.files import (
    OutputError,
    check_output_folder,
    one_line,
    open_text,
    text_lines,
    writing_errors,
)
from vanilla_transformer.files.staging import pid_alive
from vanilla_transformer.training.messages import DataError

CACHE_FOLDER = "vanilla-transformer-corpora"
FORMAT_VERSION = 2  # part of every fingerprint: a new layout of the cached files never reads an old one
PAIRS_PER_BATCH = 50_000
PAIRS_FILE, PAIRS_RECORD = "pairs.arrow", "files.json"
STAGING_MARKER = ".vanilla-transformer-staging"  # inside every staging folder this module makes
SAMPLED_BLOCKS, SAMPLED_BLOCK_BYTES = 16, 1 << 16


def default_cache_dir() -> str:
    """`$HF_DATASETS_CACHE/vanilla-transformer-corpora` (`datasets`' own cache, ~/.cache/huggingface/datasets)."""
    return os.path.join(str(datasets.config.HF_DATASETS_CACHE), CACHE_FOLDER)


# ---------------------------------------------------------------------------------------------------------------
# Which files: their identity, and the fingerprint that names their cache entry


def file_identity(path: str, status: os.stat_result) -> list:
    """What tells the file `path` (with the `os.stat` / `os.fstat` result `status`) from an edited or replaced one:
    its path, device, inode, size, and modification and status-change times. An edit in place can set the
    modification time back; the status-change time it cannot (only the clock can), and a replacement has a new
    inode."""
    return [os.path.abspath(path), status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns,
            status.st_ctime_ns]


def _fingerprint(described) -> str:
    return hashlib.sha256(json.dumps([FORMAT_VERSION, described]).encode()).hexdigest()[:20]


def files_fingerprint(*paths: str) -> str:
    """A key that changes when any file is replaced, grows, shrinks, is touched or edited in place
    (`file_identity`)."""
    return _fingerprint([file_identity(path, os.stat(path)) for path in paths])


# ---------------------------------------------------------------------------------------------------------------
# The cache folder: checked before the work; this process's staging folder in it


def _host() -> str:
    return re.sub(r"[^A-Za-z0-9.]", "_", socket.gethostname()) or "host"


STAGING_USERS = ("tokens",)  # a process's second staging folder, for a thread's work beside its own
STAGING_PATTERN = re.compile(r"^\.staging-(?P<host>[A-Za-z0-9._]+)-(?P<pid>\d+)(?:-(?:" + "|".join(STAGING_USERS)
                             + r"))?$")


def staging_folder_name(pid: int | None = None, user: str = "") -> str:
    """The name of the staging folder of process `pid` (default: this one) on this machine; `user` (one of
    `STAGING_USERS`) names a second one of the same process, for a thread's work beside the process's own."""
    if user and user not in STAGING_USERS:
        raise ValueError(f"staging folder user {user!r} is not one of {STAGING_USERS}")
    return f".staging-{_host()}-{os.getpid() if pid is None else pid}" + (f"-{user}" if user else "")


def check_cache_dir(cache_dir: str, option: str = "--data-cache-dir") -> None:
    """Before any work: the cache folder must be (or become) a writable folder, or one `OutputError` line naming it
    (a file, a place under a file, read-only)."""
    try:
        check_output_folder(cache_dir, allow_existing=True)
    except OutputError as error:
        raise OutputError(f"{option} {cache_dir}: {str(error).replace('for the output', 'for the cache')}") from None


def remove_stale_staging(cache_dir: str, log=print) -> None:
    """Remove the staging folders that killed runs on this machine left in `cache_dir`: named by
    `staging_folder_name`, holding our marker (or nothing), of a process that no longer runs. Anything else stays."""
    try:
        entries = sorted(os.listdir(cache_dir))
    except OSError:
        return
    for entry in entries:
        match = STAGING_PATTERN.match(entry)
        if not match or match["host"] != _host() or pid_alive(int(match["pid"])):
            continue
        path = os.path.join(cache_dir, entry)
        if os.path.islink(path) or not os.path.isdir(path):
            continue
        contents = os.listdir(path)
        if contents and STAGING_MARKER not in contents:
            continue  # not a folder this module made
        shutil.rmtree(path, ignore_errors=True)
        log(f"Removed {path}, left by a run that was killed (process {match['pid']}).")


@contextlib.contextmanager
def staging(cache_dir: str, log=print, user: str = ""):
    """This process's staging folder in the cache (`staging_folder_name`, with our marker; `user` for a thread's),
    removed when the block ends, whatever happens; a full disk or an unwritable folder is one `OutputError` line
    naming the cache."""
    folder = os.path.join(cache_dir, staging_folder_name(user=user))
    try:
        with writing_errors(cache_dir):
            os.makedirs(cache_dir, exist_ok=True)
            remove_stale_staging(cache_dir, log)
            os.makedirs(folder, exist_ok=True)
            open(os.path.join(folder, STAGING_MARKER), "w").close()
            yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


# ---------------------------------------------------------------------------------------------------------------
# Records: what was written, checked before use


def file_checksum(path: str) -> dict:
    """{"bytes": size, "sampled_sha256": ...}: the SHA-256 of the size and of `SAMPLED_BLOCKS` + 1 blocks of 64 KiB
    spread over the file (the first, the last, and evenly between; the whole of a file under 1 MiB). Constant time
    whatever the size: it finds a truncated, emptied, extended or replaced file, not a changed byte between the
    blocks."""
    size = os.path.getsize(path)
    digest = hashlib.sha256(str(size).encode())
    step = max(size // SAMPLED_BLOCKS, 1)
    last = max(size - SAMPLED_BLOCK_BYTES, 0)
    with open(path, "rb") as f:
        for offset in sorted({min(i * step, last) for i in range(SAMPLED_BLOCKS)} | {last}):
            f.seek(offset)
            digest.update(f.read(SAMPLED_BLOCK_BYTES))
    return {"bytes": size, "sampled_sha256": digest.hexdigest()}


def _describe_files(folder: str, names: list[str]) -> dict:
    """{name: {"rows": ..., "checksum": ...}} of Arrow files in `folder`, for a record."""
    return {name: {"rows": len(datasets.Dataset.from_file(os.path.join(folder, name))),
                   "checksum": file_checksum(os.path.join(folder, name))} for name in names}


def _load_record(path: str) -> dict | None:
    """A record this module wrote (of this format), else None."""
    try:
        with open(path, encoding="utf-8") as f:
            record = json.load(f)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("format") == FORMAT_VERSION else None


def _write_record(record: dict, path: str) -> None:
    with open(path, "w", encoding="utf-8") as f:
        json.dump({"format": FORMAT_VERSION, **record}, f)


def _checked_files(folder: str, record: dict, what: str, log, redo: str):
    """The Arrow files `record` names in `folder`, memory-mapped as one dataset, if each still has the size,
    sampled checksum and rows the record gives; else None after one line saying what is damaged and that the cache
    is made again (`redo`)."""
    parts = []
    for name, written in record.get("files", {}).items():
        path = os.path.join(folder, name)
        try:
            if not os.path.isfile(path):
                problem = "missing"
            elif (checksum := file_checksum(path)) != written["checksum"]:
                problem = (f"{checksum['bytes']:,} bytes where {written['checksum']['bytes']:,} were written"
                           if checksum["bytes"] != written["checksum"]["bytes"] else
                           "its bytes differ from those written")
            else:
                part = datasets.Dataset.from_file(path)
                problem = (None if len(part) == written["rows"] else
                           f"{len(part):,} rows where {written['rows']:,} were written")
        except (pa.ArrowException, OSError, ValueError, KeyError, TypeError) as error:
            problem = one_line(error)
        if problem is not None:
            log(f"The cached {what} {path} is damaged ({problem}); {redo}.")
            return None
        parts.append(part)
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def _install(staged: str, final: str) -> None:
    """Move a whole file or folder from the staging folder into its place in the cache (a folder another process
    put there first stays: the same inputs make the same files)."""
    os.makedirs(os.path.dirname(final), exist_ok=True)
    if os.path.isdir(staged):
        with contextlib.suppress(OSError):
            os.rename(staged, final)
    else:
        os.replace(staged, final)


# ---------------------------------------------------------------------------------------------------------------
# Reading the pair of files


def _open_pair(source: str, target: str, split: str) -> list:
    """Both files opened once (`files.open_text`), or the one-line error of the first that cannot be."""
    opened = [open_text(source, f"{split} source file")]
    try:
        opened.append(open_text(target, f"{split} target file"))
    except BaseException:
        opened[0].close()
        raise
    return opened


def _walk_pairs(opened: list, split: str, writer=None, digests=None) -> int:
    """Both opened files side by side, checked (the same number of lines, text on each side), into the Arrow stream
    `writer` if one is given, their bytes into the hashlib objects `digests` if given; -> the number of pairs.
    Memory: one batch of lines."""
    schema = pa.schema([("source", pa.large_string()), ("target", pa.large_string())])
    source, target = opened[0].name, opened[1].name
    digests = digests or (None, None)
    sources = text_lines(opened[0], f"{split} source file", digest=digests[0])
    targets = text_lines(opened[1], f"{split} target file", digest=digests[1])
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


def check_pairs(source: str, target: str, split: str) -> int:
    """Read both files through once, writing nothing: -> the number of pairs, or the one-line error of a bad file
    (`files.TextFileError`, `DataError`)."""
    opened = _open_pair(source, target, split)
    try:
        return _walk_pairs(opened, split)
    finally:
        for stream in opened:
            stream.close()


def _write_pairs(opened: list, split: str, path: str) -> tuple[int, dict]:
    """Both opened files side by side into the Arrow stream file `path`; -> (the number of pairs, the SHA-256 of
    each file's content)."""
    schema = pa.schema([("source", pa.large_string()), ("target", pa.large_string())])
    digests = hashlib.sha256(), hashlib.sha256()
    with pa.OSFile(path, "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
        count = _walk_pairs(opened, split, writer, digests)
    return count, {"source": digests[0].hexdigest(), "target": digests[1].hexdigest()}


def _content_hashes(opened: list, split: str) -> dict:
    """The SHA-256 of each opened file's content (decompressed), read through once."""
    digests = hashlib.sha256(), hashlib.sha256()
    for stream, side, digest in zip(opened, ("source", "target"), digests):
        for _ in text_lines(stream, f"{split} {side} file", digest=digest):
            pass
    return {"source": digests[0].hexdigest(), "target": digests[1].hexdigest()}


def _cached_pairs(cache_dir: str, key: str, split: str, log):
    """-> (the cached pairs of `key`, their record) if the cache holds them whole, else None."""
    folder = os.path.join(cache_dir, f"pairs-{key}")
    record = _load_record(os.path.join(folder, PAIRS_RECORD))
    if record is None:
        return None
    pairs = _checked_files(folder, record, f"{split} pairs", log, "reading the files again")
    return None if pairs is None else (pairs, record)


def read_corpus(source: str, target: str, split: str, cache_dir: str, log=print, verify: bool = False):
    """-> (`datasets.Dataset` of the pairs, memory-mapped from the cache, its fingerprint). Each file is opened once
    per pass; the files are read only when the cache has no whole copy of them as they are now (`verify`: their
    content hashed and compared with the copy's record, one more pass). A pipe is read once, into the cache."""
    opened = _open_pair(source, target, split)
    try:
        once = any(not stat.S_ISREG(stream.status.st_mode) for stream in opened)
        if not once:
            key = _fingerprint([file_identity(path, stream.status) for path, stream in zip((source, target), opened)])
            found = _cached_pairs(cache_dir, key, split, log)
            final = os.path.join(cache_dir, f"pairs-{key}", PAIRS_FILE)
            if found is not None and not verify:
                log(f"Reusing the {split} pairs read into {final}")
                return found[0], key
            if found is not None:
                if _content_hashes(opened, split) == found[1].get("content_sha256"):
                    log(f"Reusing the {split} pairs read into {final} (their content checked: --verify-corpus)")
                    return found[0], key
                log(f"The {split} files changed since they were read into {final} (their content differs, which "
                    "their sizes, times and inodes did not show: --verify-corpus); reading them again.")
                for stream in opened:
                    stream.close()
                opened = _open_pair(source, target, split)
        with staging(cache_dir, log) as stage:
            count, content = _write_pairs(opened, split, os.path.join(stage, PAIRS_FILE))
            if once:  # a pipe: the entry is named by what was read
                key = _fingerprint([["content", content["source"], content["target"]]])
                if (found := _cached_pairs(cache_dir, key, split, log)) is not None:
                    log(f"Reusing the {split} pairs read into {os.path.join(cache_dir, f'pairs-{key}', PAIRS_FILE)} "
                        "(the same content)")
                    return found[0], key
            folder = os.path.join(cache_dir, f"pairs-{key}")
            _write_record({"source": os.path.abspath(source), "target": os.path.abspath(target), "pairs": count,
                           "content_sha256": content, "files": _describe_files(stage, [PAIRS_FILE])},
                          os.path.join(stage, PAIRS_RECORD))
            _install(os.path.join(stage, PAIRS_FILE), os.path.join(folder, PAIRS_FILE))
            _install(os.path.join(stage, PAIRS_RECORD), os.path.join(folder, PAIRS_RECORD))  # the record last
    finally:
        for stream in opened:
            stream.close()
    final = os.path.join(folder, PAIRS_FILE)
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
                       clean: bool, rows: int | None = None, source_tag: str | None = None) -> str:
    """The key of a tokenized copy: the pairs' fingerprint and how many of them (`--max_train_samples` tokenizes the
    first N), the tokenizer's JSON, the limits, the cleaning and the tag put before the sources (if any). The JSON
    without the tokenizer's truncation and padding settings, which the encoders set for themselves
    (`batch_encoder`): a tokenizer saved while a call had them set (a checkpoint's, read by a resumed run) names the
    same copy."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None and (backend.truncation is not None or backend.padding is not None):
        backend = copy.deepcopy(backend)
        backend.no_truncation()
        backend.no_padding()
    description = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    options = [FORMAT_VERSION, pairs_key, rows, max_source_length, max_target_length, clean, type(tokenizer).__name__]
    if source_tag is not None:
        options.append(["source_tag", source_tag])
    return hashlib.sha256(json.dumps(options).encode() + description.encode()).hexdigest()[:20]


def token_encoder(tokenizer, max_source_length: int, max_target_length: int, clean: bool,
                  source_tag: str | None = None):
    """{"source": [...], "target": [...]} -> the columns of `TOKEN_FEATURES` for those pairs. With `clean`, each side
    is cut one token above its limit, so that a pair longer than the limit is seen to be (and dropped by the
    cleaning); without, at the limit, as `tokenized_splits.tokenize_splits` truncates. `source_tag`: a token of the
    tokenizer put before every source (tagged back-translation); it counts towards `max_source_length` and the
    `source_length` column."""
    extra = int(clean)
    tagged = int(source_tag is not None)
    encode_sources = batch_encoder(tokenizer, max_source_length + extra - tagged)
    encode_targets = batch_encoder(tokenizer, max_target_length + extra, target=True)
    tag_id = [tokenizer.convert_tokens_to_ids(source_tag)] if tagged else []

    def encode(batch):
        sources, targets = encode_sources(batch["source"]), encode_targets(batch["target"])
        if tagged:
            sources = [tag_id + ids for ids in sources]
        return {"input_ids": sources, "labels": targets, "source_length": [len(ids) for ids in sources],
                "target_length": [len(ids) for ids in targets],
                "pair_hash": pair_hashes(batch["source"], batch["target"])}

    return encode


def cached_tokens(pairs, key: str, pairs_key: str, cache_dir: str, log=print):
    """The tokenized copy `key` (`tokens_fingerprint`) of the pairs `pairs_key`, memory-mapped, if the cache holds
    it whole (its files as their record says, one row per pair); else None (after a line if it is damaged)."""
    folder = os.path.join(cache_dir, f"pairs-{pairs_key}")
    record = _load_record(os.path.join(folder, f"tokens-{key}.json"))
    if record is None:
        return None
    found = _checked_files(folder, record, "tokenized training pairs", log, "tokenizing them again")
    if found is None or len(found) != len(pairs):
        return None
    log(f"Reusing the tokenized training pairs in {os.path.join(folder, next(iter(record['files'])))}")
    return found


def install_tokens(stage: str, names: list[str], pairs, key: str, pairs_key: str, cache_dir: str):
    """Install the tokenized copy `key` written in `stage` as the Arrow files `names` (in row order, one row per
    pair of `pairs`) into the cache, the record last; -> the installed files as one memory-mapped dataset."""
    folder = os.path.join(cache_dir, f"pairs-{pairs_key}")
    record_name = f"tokens-{key}.json"
    _write_record({"pairs": len(pairs), "files": _describe_files(stage, names)}, os.path.join(stage, record_name))
    for name in names:
        _install(os.path.join(stage, name), os.path.join(folder, name))
    _install(os.path.join(stage, record_name), os.path.join(folder, record_name))  # the record last
    parts = [datasets.Dataset.from_file(os.path.join(folder, name)) for name in names]
    return parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)


def tokenize_corpus(pairs, pairs_key: str, tokenizer, max_source_length: int, max_target_length: int, *,
                    clean: bool, cache_dir: str, num_proc: int | None = None, log=print,
                    source_tag: str | None = None):
    """The pairs tokenized (`input_ids`, `labels`, `source_length`, `target_length`, `pair_hash`: `token_encoder`),
    from the cache when this tokenizer with these limits already tokenized these pairs (and the cached files are
    whole), else with `datasets.Dataset.map` into the cache."""
    key = tokens_fingerprint(pairs_key, tokenizer, max_source_length, max_target_length, clean, len(pairs),
                             source_tag)
    if (found := cached_tokens(pairs, key, pairs_key, cache_dir, log)) is not None:
        return found
    encode = token_encoder(tokenizer, max_source_length, max_target_length, clean, source_tag)
    with staging(cache_dir, log) as stage:
        tokenized = pairs.map(encode, batched=True, batch_size=10_000, remove_columns=pairs.column_names,
                              features=TOKEN_FEATURES, cache_file_name=os.path.join(stage, f"tokens-{key}.arrow"),
                              new_fingerprint=key, load_from_cache_file=False, num_proc=num_proc,
                              desc="Tokenizing the training pairs")
        names = [os.path.basename(f["filename"]) for f in tokenized.cache_files]
        del tokenized
        tokenized = install_tokens(stage, names, pairs, key, pairs_key, cache_dir)
    log(f"Tokenized {len(tokenized):,} training pairs into {os.path.join(cache_dir, f'pairs-{pairs_key}', names[0])}")
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
