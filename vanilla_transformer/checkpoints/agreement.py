"""Whether the files of a translation folder still belong together: checked by `load.load_checkpoint`, so that
`translate`, `serve` and every other command that opens a folder refuse (or warn about) the same folders.

Refused, one line naming the file (`CheckpointError`): a tokenizer that cannot be the model's, because it makes ids
past the model's embeddings, or its end and padding tokens are other ids than the model's configuration says (our
model), or its tokens are not those of a CTranslate2 folder's vocabulary (the export's tokenizer replaced: the ids
would mean other tokens). Each would translate into empty or wrong text without a word.

Warned about, one log line naming the file: a folder whose manifest (what the command that wrote it recorded,
`files.manifest`) gives another SHA-256 for a file the model is read from (weights, configuration, tokenizer,
vocabularies) than the file has now: it was replaced or changed after the folder was written. That may be on
purpose, so it is loaded; the line says which file to look at when the translations are not what they were.
generation_config.json is not checked: its decoding settings are there to be edited (docs/train.md).
"""

import fnmatch
import logging
import os

from vanilla_transformer.checkpoints.kinds import CheckpointError
from vanilla_transformer.files.hashing import sha256_of_file
from vanilla_transformer.files.manifest import MANIFEST_NAME, read_manifest

logger = logging.getLogger("vanilla_transformer.checkpoints")
# the files a model and its tokenizer are read from: those the manifest check looks at
MODEL_FILES = ("config.json", "*.safetensors", "*.safetensors.index.json", "*.bin",
               "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
               "vocab.json", "merges.txt", "*.model", "*.spm", "*_vocabulary.json", "*_vocabulary.txt")


def _model_file(name: str) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in MODEL_FILES)


def changed_files(folder: str | os.PathLike) -> list[str]:
    """The model files of `folder` (top level) whose SHA-256 is not what its manifest records for them, or that it
    does not list; [] for a folder without a manifest."""
    folder = os.fspath(folder)
    recorded = read_manifest(folder)
    if recorded is None:
        return []
    changed = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if not _model_file(name) or not os.path.isfile(path) or os.path.islink(path):
            continue
        if name not in recorded or sha256_of_file(path) not in recorded[name].split(" "):
            changed.append(name)
    return changed


def warn_changed_files(folder: str | os.PathLike) -> list[str]:
    """Log one warning per file of `changed_files(folder)`; returns them."""
    changed = changed_files(folder)
    for name in changed:
        logger.warning("%s is not the file this folder was written with (%s records another SHA-256, or none): it "
                       "was replaced or changed since; if the translations are wrong, put the written file back",
                       os.path.join(os.fspath(folder), name), MANIFEST_NAME)
    return changed


def tokenizer_file(folder: str | os.PathLike) -> str:
    """The tokenizer's file to name in a message: tokenizer.json, else tokenizer_config.json."""
    for name in ("tokenizer.json", "tokenizer_config.json"):
        if os.path.isfile(os.path.join(folder, name)):
            return os.path.join(os.fspath(folder), name)
    return os.fspath(folder)


def _ids(value) -> set:
    return set(value) if isinstance(value, (list, tuple)) else {value}


def check_pytorch_tokenizer(folder: str | os.PathLike, model, tokenizer) -> None:
    """A `CheckpointError` when `tokenizer` cannot be `model`'s (see the module's docstring)."""
    embeddings = model.get_input_embeddings()
    rows = getattr(embeddings, "num_embeddings", None)
    if rows is not None and len(tokenizer) > rows:
        raise CheckpointError(f"{tokenizer_file(folder)} has {len(tokenizer)} tokens, more than the {rows} the model "
                              "reads (config.json): it is not the tokenizer this model was trained with; put that "
                              "tokenizer back")
    if getattr(model.config, "model_type", None) != "vanilla_transformer":
        return
    for name in ("eos_token_id", "pad_token_id"):
        configured, tokenized = getattr(model.config, name, None), getattr(tokenizer, name, None)
        if configured is not None and tokenized is not None and tokenized not in _ids(configured):
            raise CheckpointError(f"{tokenizer_file(folder)} has {name.removesuffix('_id').replace('_', ' ')} id "
                                  f"{tokenized}, but the model's config.json says {configured}: it is not the "
                                  "tokenizer this model was trained with; put that tokenizer back")


def check_ctranslate2_tokenizer(folder: str | os.PathLike, source_tokens: list[str], tokenizer) -> None:
    """A `CheckpointError` when a token of `tokenizer` is another one in the CTranslate2 folder's source vocabulary
    (`source_tokens`, by id): the export was made with another tokenizer."""
    vocabulary = "shared_vocabulary.json" if os.path.isfile(os.path.join(folder, "shared_vocabulary.json")) \
        else "source_vocabulary.json"
    for token, token_id in sorted(tokenizer.get_vocab().items(), key=lambda item: item[1]):
        known = source_tokens[token_id] if 0 <= token_id < len(source_tokens) else None
        if known != token:
            found = f"{known!r}" if known is not None else "past its end"
            raise CheckpointError(f"{tokenizer_file(folder)} is not the tokenizer {folder} was exported with: its "
                                  f"token {token_id} is {token!r}, {vocabulary}'s is {found}; put the exported "
                                  "tokenizer back or export again with: vanilla-transformer export ctranslate2 "
                                  "CHECKPOINT OUT --overwrite")


__all__ = ["MODEL_FILES", "changed_files", "check_ctranslate2_tokenizer", "check_pytorch_tokenizer",
           "tokenizer_file", "warn_changed_files"]
