"""One loader for saved folders: every command (translate, plot, export, ...) opens a model folder through it.

    loaded = load_checkpoint("outputs/multi30k", kinds=("seq2seq", "ctranslate2"))
    loaded.model, loaded.tokenizer, loaded.kind, loaded.device

A folder holds one of `KINDS`: a PyTorch checkpoint written by `save_pretrained` (the class it was saved from is
the first name in config.json's `architectures`, which says which Auto class builds it), or a CTranslate2 folder
written by `vanilla-transformer export ctranslate2` (model.bin beside config.json). `load_checkpoint` checks the
folder once (`validate.check_checkpoint` for a PyTorch folder: whole, readable, the weights of its config), picks
the class from the folder and the device once, and returns the model in eval mode with its tokenizer, after checking
that the two belong together and warning about files changed since the folder was written (`agreement`). A folder of
another kind than the caller takes (`kinds`) is refused with one line naming what it holds and what is needed.

A CTranslate2 folder is loaded without torch and without transformers' model code (CTranslate2, the tokenizer and
the generation config need neither); the PyTorch loader (`checkpoints.pytorch`, which also registers our model with
transformers) is imported for PyTorch folders only.
"""

import json
import os
from dataclasses import dataclass
from typing import Any

import transformers

from vanilla_transformer.checkpoints import ENGINES
from vanilla_transformer.checkpoints.agreement import (
    check_ctranslate2_tokenizer,
    check_pytorch_tokenizer,
    warn_changed_files,
)
from vanilla_transformer.checkpoints.kinds import CheckpointError, check_folder_kind, folder_kind, tokenizer_errors
from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator, check_tokenizer_fingerprint

# The tokenizer class transformers writes into tokenizer_config.json for every fast tokenizer it saves
FAST_TOKENIZER_CLASS = "TokenizersBackend"


@dataclass
class LoadedCheckpoint:
    """A loaded folder: `model` in eval mode (ours, transformers' or a `CTranslate2Translator`), its tokenizer (None
    when not asked for), the folder's kind (one of `KINDS`) and the device the model is on."""

    path: str
    kind: str
    model: Any
    tokenizer: Any
    device: str


def load_checkpoint(
    path: str | os.PathLike,
    *,
    kinds=None,
    device=None,
    engine: str = "auto",
    compute_type: str = "default",
    need_tokenizer: bool = True,
    purpose: str | None = None,
) -> LoadedCheckpoint:
    """Load the saved folder at `path` (see the module's docstring) after checking it once.

    `kinds`: the kinds the caller takes (default: all of `KINDS`); another is refused with a `CheckpointError`
    naming what the folder holds and what `purpose` (e.g. "translate") needs. `device`: "cpu", "cuda", "cuda:1", ...
    or a torch.device (default: CUDA when available). `engine` ("auto", "pytorch" or "ctranslate2") insists on a
    PyTorch or a CTranslate2 folder; `compute_type` ("int8", "float32", ...) applies to CTranslate2 folders only.
    `need_tokenizer=False` neither checks nor loads the tokenizer. Raises `CheckpointError` (a ValueError) for a
    folder that is not whole or of the wrong kind, ValueError for a bad argument.
    """
    if engine not in ENGINES:
        raise ValueError(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    path = os.fspath(path)
    kind = folder_kind(path)
    if engine == "ctranslate2" and kind != "ctranslate2":
        raise CheckpointError(f"{path} is not a CTranslate2 folder (it has no model.bin); make one with "
                              f"`vanilla-transformer export ctranslate2 {path} OUT`")
    if engine == "pytorch" and kind == "ctranslate2":
        raise CheckpointError(f"{path} is a CTranslate2 folder: translate it with the ctranslate2 engine")
    if kinds is not None:
        check_folder_kind(path, kinds, purpose, kind=kind)
    warn_changed_files(path)  # files replaced since the folder was written: one line each
    if kind == "ctranslate2":
        return _load_ctranslate2(path, device, compute_type, need_tokenizer)
    if compute_type != "default":
        raise ValueError(f"--compute-type applies to CTranslate2 folders (vanilla-transformer export ctranslate2); "
                         f"{path} holds a PyTorch model")
    from vanilla_transformer.checkpoints.pytorch import load_pytorch_folder  # torch, for PyTorch folders only

    model, tokenizer, device = load_pytorch_folder(path, kind, device, need_tokenizer)
    if tokenizer is not None and kind == "seq2seq":
        check_pytorch_tokenizer(path, model, tokenizer)
    return LoadedCheckpoint(path=path, kind=kind, model=model, tokenizer=tokenizer, device=device)


def _load_ctranslate2(path: str, device, compute_type: str, need_tokenizer: bool) -> LoadedCheckpoint:
    tokenizer = None
    if need_tokenizer:
        if not any(os.path.isfile(os.path.join(path, name)) for name in ("tokenizer.json", "tokenizer_config.json")):
            raise CheckpointError(f"{path} has no tokenizer (tokenizer.json); save it there with "
                                  f"tokenizer.save_pretrained({path!r})")
        check_tokenizer_fingerprint(path)  # the tokenizer files are those the vocabularies were exported from

        tokenizer = load_tokenizer(path)
    # CTranslate2 finds its own devices ("auto": CUDA when it has one); the translator checks the device
    model = CTranslate2Translator(path, device=str(device or "auto"), compute_type=compute_type)
    if tokenizer is not None:
        check_ctranslate2_tokenizer(path, model.source_tokens, tokenizer)
    return LoadedCheckpoint(path=path, kind="ctranslate2", model=model, tokenizer=tokenizer,
                            device=str(model.translator.device))


def load_tokenizer(path: str):
    """The tokenizer of a CTranslate2 folder. One saved by transformers' fast tokenizer class
    (`FAST_TOKENIZER_CLASS` in tokenizer_config.json, no remote code) is loaded by that class, which is where
    `AutoTokenizer` ends for such a folder (its config.json is CTranslate2's, of no model type); `AutoTokenizer`
    would first read that config with transformers' model configuration classes, which import torch. Any other
    tokenizer is loaded by `AutoTokenizer`. One that cannot be loaded is one `CheckpointError` line
    (`tokenizer_errors`)."""
    try:
        with open(os.path.join(path, "tokenizer_config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError):
        config = None
    with tokenizer_errors(path):
        if (isinstance(config, dict) and config.get("tokenizer_class") == FAST_TOKENIZER_CLASS
                and "auto_map" not in config):
            return getattr(transformers, FAST_TOKENIZER_CLASS).from_pretrained(path)
        return transformers.AutoTokenizer.from_pretrained(path)


__all__ = ["ENGINES", "LoadedCheckpoint", "load_checkpoint", "load_tokenizer"]
