"""Parallel data for `training.train`: a Hugging Face dataset, local text files, or the generated demo corpus.

Every source ends up as `datasets.Dataset` splits with two string columns, `source` and `target`. Problems with the
user's data raise `DataError` with a message naming the file or dataset; `training.train` prints it without a
traceback.
"""

import copy
import hashlib
import os

import numpy as np
import pyarrow as pa
import torch.distributed as dist
from tokenizers import models

from vanilla_transformer.files import TextFileError, read_text_lines
from vanilla_transformer.training.numbers import number_translation_splits

SPLITS = ("train", "validation", "test")


class DataError(ValueError):
    """The data the user pointed at cannot be used; the message says what and where."""


def _read_lines(path: str, what: str) -> list[str]:
    """Lines as `wc -l` counts them (`vanilla_transformer.files.read_text_lines`: split on "\\n" only, so a \\x0c,
    U+2028 or U+0085 inside a sentence of a crawled corpus stays in it; \\r\\n endings and a BOM removed)."""
    try:
        lines = read_text_lines(path, f"{what} file")
    except TextFileError as error:
        raise DataError(str(error)) from None
    if not any(line.strip() for line in lines):
        raise DataError(f"The {what} file {path} is empty.")
    return lines


def read_parallel_files(source_path: str, target_path: str, split: str) -> dict[str, list[str]]:
    """Two files with one sentence per line, line i of one translating line i of the other."""
    sources = _read_lines(source_path, f"{split} source")
    targets = _read_lines(target_path, f"{split} target")
    if len(sources) != len(targets):
        raise DataError(
            f"The {split} files do not pair up: {source_path} has {len(sources)} lines but {target_path} has "
            f"{len(targets)}; line i of one must translate line i of the other."
        )
    return {"source": sources, "target": targets}


def numpy_columns(dataset, names: list[str]) -> list[np.ndarray]:
    """Columns of `dataset` as numpy arrays of their Arrow type, copied chunk by chunk from its Arrow table (each
    chunk a view of the memory-mapped file) into one numpy array. Not through `with_format("numpy")`: that formatter
    builds a Python list of every row (a Python object each) before it stacks them. Nor through Arrow's own
    concatenation: its memory pool keeps what it freed for Arrow's later use, where the training that follows cannot
    reuse it (benchmarks/experiments/large-corpora.md; benchmarks/data_scale.py measures the whole run).
    On a dataset with an indices mapping (`select` of scattered rows) `datasets` still goes through one Python int
    per row to gather them: pass lengths known beforehand instead (`TranslationTrainer(train_lengths=...)`)."""
    table = dataset.with_format("arrow", columns=list(names))[:]
    columns = []
    for name in names:
        column = table.column(name)
        chunks = [chunk.to_numpy(zero_copy_only=False) for chunk in column.chunks if len(chunk)]
        columns.append(np.concatenate(chunks) if chunks else np.zeros(0, dtype=column.type.to_pandas_dtype()))
    return columns


def select_rows(dataset, rows: np.ndarray):
    """`dataset.select(rows)` for millions of scattered rows, at 8 bytes a row: the same dataset (an indices mapping
    of `rows` over its Arrow table, as `select` makes one), built straight from the numpy array. `Dataset.select`
    first turns its indices into a Python list (a Python object per row, several times the 8 bytes of the index:
    benchmarks/experiments/large-corpora.md). A dataset that already has an indices mapping goes through `select`,
    which composes the two."""
    from datasets import Dataset
    from datasets.table import InMemoryTable

    rows = np.asarray(rows)
    if getattr(dataset, "_indices", None) is not None:
        return dataset.select(rows)
    if rows.ndim != 1 or (len(rows) and (rows.min() < 0 or rows.max() >= len(dataset))):
        raise IndexError(f"rows to select must be a list of indices within the dataset's {len(dataset)} rows")
    rows = np.ascontiguousarray(rows, dtype=np.uint64)
    indices = pa.array(rows, type=pa.uint64())
    fingerprint = hashlib.sha256(getattr(dataset, "_fingerprint", "").encode())
    fingerprint.update(memoryview(rows))
    return Dataset(dataset.data, info=dataset.info, split=dataset.split,
                   indices_table=InMemoryTable(pa.table({"indices": indices})), fingerprint=fingerprint.hexdigest()[:16])


def select_kept(dataset, kept: np.ndarray, lengths: tuple[np.ndarray, np.ndarray]):
    """-> (the rows `kept` of `dataset` (`select_rows`), their entries of the `lengths` columns); `dataset` and
    `lengths` themselves when every row is kept."""
    if len(kept) == len(dataset):
        return dataset, lengths
    return select_rows(dataset, kept), tuple(column[kept] for column in lengths)


def length_columns(dataset) -> tuple[np.ndarray, np.ndarray]:
    """The `source_length` and `target_length` columns as numpy arrays (`numpy_columns`)."""
    source, target = numpy_columns(dataset, ["source_length", "target_length"])
    return source, target


def language_from_extension(path: str | None) -> str | None:
    """'data/train.de' -> 'de' (the usual naming of parallel corpora), else None."""
    if not path:
        return None
    extension = os.path.splitext(path)[1].lstrip(".")
    return extension if extension.isalpha() and 2 <= len(extension) <= 3 else None


def load_text_files(files: dict[str, tuple[str | None, str | None]]):
    """{split: (source_path, target_path)} -> {split: Dataset(source, target)} for the splits given."""
    from datasets import Dataset

    splits = {}
    for split, (source_path, target_path) in files.items():
        if source_path is None and target_path is None:
            continue
        if source_path is None or target_path is None:
            given, missing = ("source", "target") if source_path else ("target", "source")
            raise DataError(f"--{split}_{given} is given but --{split}_{missing} is not; give both files of the pair.")
        splits[split] = Dataset.from_dict(read_parallel_files(source_path, target_path, split))
    return splits


def load_hub_dataset(name: str, config_name: str | None, source_lang: str, target_lang: str,
                     cache_dir: str | None = None):
    """A dataset in the format of transformers' translation example: a `translation` column of
    {source_lang: ..., target_lang: ...} dicts (e.g. wmt16/de-en), or one column per language."""
    import datasets

    try:
        raw = datasets.load_dataset(name, config_name, cache_dir=cache_dir)
    except Exception as error:  # the datasets library raises many kinds; all mean "cannot load this"
        raise DataError(f"Could not load the dataset {name!r}"
                        f"{f' ({config_name})' if config_name else ''}: {error}") from None
    aliases = {"train": ("train",), "validation": ("validation", "valid", "dev"), "test": ("test",)}
    splits = {}
    for split, names in aliases.items():
        found = next((raw[n] for n in names if n in raw), None)
        if found is None:
            continue
        if "translation" in found.column_names:
            example = found[0]["translation"]
            missing = [lang for lang in (source_lang, target_lang) if lang not in example]
            if missing:
                raise DataError(f"The {split} split of {name!r} has no {', '.join(missing)} text: its translation "
                                f"column holds the languages {sorted(example)}.")
            found = found.map(
                lambda batch: {"source": [t[source_lang] for t in batch["translation"]],
                               "target": [t[target_lang] for t in batch["translation"]]},
                batched=True, remove_columns=found.column_names, desc=f"Reading {split}",
            )
        elif source_lang in found.column_names and target_lang in found.column_names:
            found = found.select_columns([source_lang, target_lang]).rename_columns(
                {source_lang: "source", target_lang: "target"})
        else:
            raise DataError(f"The {split} split of {name!r} has neither a 'translation' column nor columns named "
                            f"{source_lang!r} and {target_lang!r}; its columns are {found.column_names}.")
        splits[split] = found
    if "train" not in splits:
        raise DataError(f"The dataset {name!r} has no train split (it has {list(raw)}).")
    return splits


def demo_splits(train_size: int, seed: int, source_lang: str = "en", target_lang: str = "de"):
    """The generated number-words corpus, English -> German by default (see vanilla_transformer.training.numbers)."""
    from datasets import Dataset

    raw = number_translation_splits(train_size=train_size, seed=seed, source_lang=source_lang, target_lang=target_lang)
    return {split: Dataset.from_dict(columns) for split, columns in raw.items()}


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
