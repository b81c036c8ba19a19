"""A tokenized dataset's Arrow columns as numpy arrays, and selections of its rows, at a few bytes a row: what the
cleaning, the token-budget sampler and the trainer read of a training set of millions of pairs
(benchmarks/data_scale.py measures the whole run)."""

import hashlib

import numpy as np
import pyarrow as pa


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
