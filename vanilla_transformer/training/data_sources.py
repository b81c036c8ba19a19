"""Where a run's parallel data comes from: a Hugging Face dataset, local text files held in memory (the validation
and test splits; the training files go through the corpus cache, training/text_corpus.py), or the generated demo
corpus.

Every source ends up as `datasets.Dataset` splits with two string columns, `source` and `target`. Data that cannot
be used raises `DataError`, a text file that cannot be read as UTF-8 lines `files.TextFileError`: one line naming
the file or dataset, which `training.train` prints without a traceback.
"""

import itertools
import os

from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.files import read_text_lines
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.numbers import number_translation_splits

SPLITS = ("train", "validation", "test")


def training_corpora(data_args) -> list[tuple[str, str, float, str | None]]:
    """(source file, target file, weight, tag or None) of each training corpus of text files; [] without any. Takes
    a single path as well as a list (options built in code)."""
    sources, targets = data_args.train_source, data_args.train_target
    sources = [sources] if isinstance(sources, str) else list(sources or ())
    targets = [targets] if isinstance(targets, str) else list(targets or ())
    weights = list(getattr(data_args, "train_weights", None) or ())
    tags = [None if tag in ("", "none") else tag for tag in getattr(data_args, "train_tags", None) or ()]
    sides = list(itertools.zip_longest(sources, targets))  # a side not given is None (check_file_pair says so)
    weights += [1.0] * (len(sides) - len(weights))
    tags += [None] * (len(sides) - len(tags))
    return [(source, target, weight, tag) for (source, target), weight, tag in zip(sides, weights, tags)]


def check_file_pair(split: str, source_path: str | None, target_path: str | None) -> None:
    """A split's text files come in pairs: one without the other is a usage error naming both options."""
    if (source_path is None) != (target_path is None):
        given, missing = ("source", "target") if source_path else ("target", "source")
        raise UsageError(f"--{split}-{given} is given but --{split}-{missing} is not; give both files of the pair.")


def _read_lines(path: str, what: str) -> list[str]:
    """Lines as `wc -l` counts them (`vanilla_transformer.files.read_text_lines`: split on "\\n" only, so a \\x0c,
    U+2028 or U+0085 inside a sentence of a crawled corpus stays in it; \\r\\n endings and a BOM removed)."""
    lines = read_text_lines(path, f"{what} file")
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

# the suffixes of compressed files, never a language: train.en.gz is English
COMPRESSION_SUFFIXES = (".gz", ".bz2", ".xz", ".zst", ".zstd", ".lz4", ".z", ".zip", ".7z", ".bz", ".lzma")


def language_from_extension(path: str | None) -> str | None:
    """'data/train.de' -> 'de' (the usual naming of parallel corpora), 'data/train.de.gz' -> 'de' (a compression
    suffix is skipped), else None."""
    if not path:
        return None
    stem, extension = os.path.splitext(path)
    if extension.lower() in COMPRESSION_SUFFIXES:
        extension = os.path.splitext(stem)[1]
    extension = extension.lstrip(".")
    return extension if extension.isalpha() and 2 <= len(extension) <= 3 else None


def load_text_files(files: dict[str, tuple[str | None, str | None]]):
    """{split: (source_path, target_path)} -> {split: Dataset(source, target)} for the splits given."""
    from datasets import Dataset

    splits = {}
    for split, (source_path, target_path) in files.items():
        if source_path is None and target_path is None:
            continue
        check_file_pair(split, source_path, target_path)
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
