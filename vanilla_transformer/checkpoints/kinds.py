"""What a saved folder holds: one of `KINDS`, read from its files without loading anything.

A PyTorch checkpoint written by `save_pretrained` names the class it was saved from first in config.json's
`architectures`, which says which Auto class builds it (`checkpoints.classes`, which imports transformers' model
tables, and is imported only for such a folder); a CTranslate2 folder (ours or any other converter's) has model.bin
beside config.json, and is told without torch or transformers. A folder of another kind than a command takes is
refused with one line naming what it holds and what is needed.
"""

import contextlib
import json
import os

from vanilla_transformer.checkpoints import AUTO_CLASS_OF_KIND
from vanilla_transformer.files.errors import one_line

CTRANSLATE2_FILES = ("model.bin", "config.json")


class CheckpointError(ValueError):
    """A checkpoint folder that is not whole or not of the kind needed; the message names the file and the problem,
    in one line."""


def is_ctranslate2_folder(path: str | os.PathLike) -> bool:
    """A folder written by CTranslate2 (ours or any other converter): model.bin beside config.json."""
    return all(os.path.isfile(os.path.join(path, name)) for name in CTRANSLATE2_FILES)


KINDS = ("seq2seq", "causal-lm", "sequence-classification", "masked-lm", "ctranslate2")
PYTORCH_KINDS = KINDS[:4]

DESCRIPTIONS = {
    "seq2seq": "a translation model (seq2seq)",
    "causal-lm": "a decoder-only language model",
    "sequence-classification": "an encoder-only sequence classifier",
    "masked-lm": "an encoder-only masked language model",
    "ctranslate2": "a CTranslate2 folder",
}


def read_json_object(path: str) -> dict:
    """The JSON object in the file at `path`; CheckpointError (one line) if it cannot be read or is not an object."""
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{path} cannot be read: {one_line(error)}") from None
    if not isinstance(value, dict):
        raise CheckpointError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return value


def _read_architectures(path: str) -> list[str]:
    config = read_json_object(os.path.join(path, "config.json"))
    architectures = config.get("architectures") or []
    return architectures if isinstance(architectures, list) else [architectures]


def folder_kind(path: str | os.PathLike) -> str:
    """What the folder at `path` holds, one of `KINDS`; `CheckpointError` (one line) when it is not a model folder.

    A folder without `architectures` in its config.json (older saves) counts as seq2seq, as `AutoModelForSeq2SeqLM`
    would load it."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise CheckpointError(f"model folder not found: {path}")
    if not os.path.isdir(path):
        raise CheckpointError(f"{path} is a file; give the folder written by save_pretrained")
    if is_ctranslate2_folder(path):
        return "ctranslate2"
    if not os.path.isfile(os.path.join(path, "config.json")):
        raise CheckpointError(f"{path} is not a saved model folder: it has no config.json (save_pretrained) and no "
                              "model.bin (CTranslate2)")
    architectures = _read_architectures(path)
    if not architectures:
        return "seq2seq"
    from vanilla_transformer.checkpoints.classes import architecture_kind  # transformers' model tables: torch

    kind = architecture_kind(str(architectures[0]))
    if kind is None:
        raise CheckpointError(f"{path} holds a {architectures[0]}, which is none of {describe(PYTORCH_KINDS)}")
    return kind


def check_folder_kind(path: str | os.PathLike, kinds, purpose: str | None = None, *, kind: str | None = None) -> str:
    """The kind of the folder at `path` (`folder_kind`, or `kind` when already known); `CheckpointError` (one line)
    when it is none of `kinds`, naming what the folder holds and what `purpose` (e.g. "translate") needs:
    "M holds a decoder-only language model (VanillaTransformerForCausalLM); translate needs a translation model"."""
    path = os.fspath(path)
    kind = kind or folder_kind(path)
    if kind not in kinds:
        holds = DESCRIPTIONS[kind]
        if kind != "ctranslate2":  # name the class: "a decoder-only language model (VanillaTransformerForCausalLM)"
            architecture = (_read_architectures(path) or [AUTO_CLASS_OF_KIND[kind]])[0]
            holds = f"{holds[:-1]}, {architecture})" if holds.endswith(")") else f"{holds} ({architecture})"
        raise CheckpointError(f"{path} holds {holds}; {purpose or 'this'} needs {describe(kinds)}")
    return kind


def describe(kinds) -> str:
    """`kinds` in words: "a translation model (seq2seq) or a CTranslate2 folder"."""
    words = [DESCRIPTIONS[kind] for kind in kinds]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} or {words[-1]}"


# The files a saved tokenizer is read from, in the order a damaged one is looked for
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json")


def _unreadable_json(path: str) -> str | None:
    """The first of the folder's `TOKENIZER_FILES` that is there and is not JSON, or None."""
    for name in TOKENIZER_FILES:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            try:
                with open(file, encoding="utf-8") as f:
                    json.load(f)
            except (OSError, UnicodeDecodeError, ValueError):
                return file
    return None


@contextlib.contextmanager
def tokenizer_errors(path: str):
    """Whatever a tokenizer library raises while loading the tokenizer of the folder `path` (tokenizers' plain
    `Exception` for a token missing from the vocabulary, a JSON error, transformers' OSError for a missing file, a
    sentencepiece error) becomes a `CheckpointError`: one line naming the file that is damaged (the first tokenizer
    file that is not JSON, else tokenizer.json, which holds the vocabulary and merges) and what is wrong with it."""
    try:
        yield
    except CheckpointError:
        raise
    except Exception as error:  # re-raised as one line: the libraries' errors have no common type
        file = _unreadable_json(path)
        if file is None and os.path.isfile(os.path.join(path, "tokenizer.json")):
            file = os.path.join(path, "tokenizer.json")
        where = file or f"the tokenizer of {path}"
        raise CheckpointError(f"{where} cannot be loaded as a tokenizer ({one_line(error)}): the file is damaged; "
                              f"copy the tokenizer files back from where {path} was saved or exported "
                              "(tokenizer.save_pretrained).") from None
