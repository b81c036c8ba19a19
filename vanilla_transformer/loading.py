"""One loader for saved folders: every command (translate, plot, export, ...) opens a model folder through it.

    loaded = load_checkpoint("outputs/multi30k", kinds=("seq2seq", "ctranslate2"))
    loaded.model, loaded.tokenizer, loaded.kind, loaded.device

A folder holds one of `KINDS`: a PyTorch checkpoint written by `save_pretrained` (the class it was saved from is
the first name in config.json's `architectures`, which says which Auto class builds it), or a CTranslate2 folder
written by `vanilla-transformer export ctranslate2` (model.bin beside config.json). `load_checkpoint` checks the
folder once (`checkpoint.check_checkpoint` for a PyTorch folder: whole, readable, the weights of its config), picks
the class from the folder and the device once, and returns the model in eval mode with its tokenizer. A folder of
another kind than the caller takes (`kinds`) is refused with one line naming what it holds and what is needed.
"""

import json
import os
from dataclasses import dataclass
from typing import Any

import torch

from .checkpoint import CheckpointError, check_checkpoint
from .ctranslate2_engine import is_ctranslate2_folder

KINDS = ("seq2seq", "causal-lm", "sequence-classification", "masked-lm", "ctranslate2")
PYTORCH_KINDS = KINDS[:4]
ENGINES = ("auto", "pytorch", "ctranslate2")

# Which class is in a folder: each PyTorch kind and the transformers Auto class that builds it (from config.json's
# `architectures`). Our classes register with the same Auto classes (`registration.AUTO_CLASSES`), and
# `architecture_kind` reads our classes' kinds from there, so the two tables cannot disagree.
AUTO_CLASS_OF_KIND = {
    "seq2seq": "AutoModelForSeq2SeqLM",
    "causal-lm": "AutoModelForCausalLM",
    "sequence-classification": "AutoModelForSequenceClassification",
    "masked-lm": "AutoModelForMaskedLM",
}
# transformers' own table of the classes each Auto class builds (model_type -> class name), for folders of other models
_MAPPING_NAMES_OF_KIND = {
    "seq2seq": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "causal-lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "sequence-classification": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "masked-lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
}
DESCRIPTIONS = {
    "seq2seq": "a translation model (seq2seq)",
    "causal-lm": "a decoder-only language model",
    "sequence-classification": "an encoder-only sequence classifier",
    "masked-lm": "an encoder-only masked language model",
    "ctranslate2": "a CTranslate2 folder",
}


@dataclass
class LoadedCheckpoint:
    """A loaded folder: `model` in eval mode (ours, transformers' or a `CTranslate2Translator`), its tokenizer (None
    when not asked for), the folder's kind (one of `KINDS`) and the device the model is on."""

    path: str
    kind: str
    model: Any
    tokenizer: Any
    device: str


def architecture_kind(name: str) -> str | None:
    """The kind (one of `PYTORCH_KINDS`) of the model class called `name`, ours or transformers'; None if none."""
    from transformers.models.auto import modeling_auto

    from .registration import AUTO_CLASSES

    ours = {model_class.__name__: auto_class.__name__ for auto_class, model_class in AUTO_CLASSES}
    for kind, auto_class in AUTO_CLASS_OF_KIND.items():
        if ours.get(name) == auto_class or name in getattr(modeling_auto, _MAPPING_NAMES_OF_KIND[kind]).values():
            return kind
    return None


def model_class(config):
    """The model class named first in `config.architectures` (ours or transformers'), or None when it names none."""
    import transformers

    import vanilla_transformer

    for name in getattr(config, "architectures", None) or []:
        for module in (vanilla_transformer, transformers):
            cls = getattr(module, name, None)
            if isinstance(cls, type) and issubclass(cls, transformers.PreTrainedModel):
                return cls
    return None


def _read_architectures(path: str) -> list[str]:
    config_path = os.path.join(path, "config.json")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise CheckpointError(f"{config_path} cannot be read: {' '.join(str(error).split())}") from None
    if not isinstance(config, dict):
        raise CheckpointError(f"{config_path} holds a JSON {type(config).__name__}, not an object")
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


def pick_device(device: str | torch.device | None = None) -> str:
    """`device` checked (a torch device this machine has), or CUDA when available, else the CPU."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(f"device {str(device)!r} is not a torch device (cpu, cuda, cuda:1, mps, ...)") from None
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r}: CUDA is not available on this machine")
    return str(parsed)


def load_checkpoint(
    path: str | os.PathLike,
    *,
    kinds=None,
    device: str | torch.device | None = None,
    engine: str = "auto",
    compute_type: str = "default",
    need_tokenizer: bool = True,
    purpose: str | None = None,
) -> LoadedCheckpoint:
    """Load the saved folder at `path` (see the module's docstring) after checking it once.

    `kinds`: the kinds the caller takes (default: all of `KINDS`); another is refused with a `CheckpointError`
    naming what the folder holds and what `purpose` (e.g. "translate") needs. `device`: "cpu", "cuda", "cuda:1", ...
    (default: CUDA when available). `engine` ("auto", "pytorch" or "ctranslate2") insists on a PyTorch or a
    CTranslate2 folder; `compute_type` ("int8", "float32", ...) applies to CTranslate2 folders only.
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
    if kind == "ctranslate2":
        return _load_ctranslate2(path, device, compute_type, need_tokenizer)
    if compute_type != "default":
        raise ValueError(f"--compute-type applies to CTranslate2 folders (vanilla-transformer export ctranslate2); "
                         f"{path} holds a PyTorch model")
    device = pick_device(device)
    check_checkpoint(path, need_tokenizer=need_tokenizer)
    import transformers

    import vanilla_transformer  # noqa: F401  (registers our classes with the Auto classes)

    auto_class = getattr(transformers, AUTO_CLASS_OF_KIND[kind])
    model = auto_class.from_pretrained(path).to(device).eval()
    tokenizer = transformers.AutoTokenizer.from_pretrained(path) if need_tokenizer else None
    return LoadedCheckpoint(path=path, kind=kind, model=model, tokenizer=tokenizer, device=device)


def _load_ctranslate2(path: str, device, compute_type: str, need_tokenizer: bool) -> LoadedCheckpoint:
    from .ctranslate2_engine import CTranslate2Translator, check_tokenizer_fingerprint

    tokenizer = None
    if need_tokenizer:
        if not any(os.path.isfile(os.path.join(path, name)) for name in ("tokenizer.json", "tokenizer_config.json")):
            raise CheckpointError(f"{path} has no tokenizer (tokenizer.json); save it there with "
                                  f"tokenizer.save_pretrained({path!r})")
        check_tokenizer_fingerprint(path)  # the tokenizer files are those the vocabularies were exported from
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path)
    # CTranslate2 finds its own devices ("auto": CUDA when it has one); the translator checks the device
    model = CTranslate2Translator(path, device=str(device or "auto"), compute_type=compute_type)
    return LoadedCheckpoint(path=path, kind="ctranslate2", model=model, tokenizer=tokenizer,
                            device=str(model.translator.device))


__all__ = ["KINDS", "CheckpointError", "LoadedCheckpoint", "check_folder_kind", "folder_kind", "load_checkpoint",
           "model_class", "pick_device"]
