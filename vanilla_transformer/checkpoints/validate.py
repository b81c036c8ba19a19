"""Is a saved checkpoint folder whole? The check our commands run before they load or write anything.

`from_pretrained` is lenient by design: a weight missing from the file is initialised afresh with a note on stderr,
and a truncated file or a config that disagrees with the weights ends in a traceback from deep inside. Our commands
(`translate`, `convert`, `plot`, `export`, training from `--model_name_or_path` or a resumed checkpoint,
`average_checkpoints`) call `check_checkpoint` first and stop with its one-line message instead. The weight files
are read with safetensors' own reader (the header only: names, shapes and the file's length), and the expected
names and shapes come from the model of `config.json` built on the meta device (no memory, no initialisation).
"""

import inspect
import os
import re

import torch
import transformers
from safetensors import safe_open
from transformers import AutoConfig, AutoModelForSeq2SeqLM

from vanilla_transformer.checkpoints.classes import model_class
from vanilla_transformer.checkpoints.kinds import CheckpointError, read_json_object
from vanilla_transformer.files.errors import one_line


def check_checkpoint(folder: str | os.PathLike, need_tokenizer: bool = True) -> None:
    """Raise `CheckpointError` unless `folder` holds a whole checkpoint: a readable `config.json` that builds a model,
    weight files that can be read in full and hold exactly that model's weights with its shapes, a readable
    `generation_config.json` if there is one, and (with `need_tokenizer`) the tokenizer's files."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        raise CheckpointError(f"model folder not found: {folder}" if not os.path.exists(folder)
                              else f"{folder} is a file; give the folder written by save_pretrained")
    config = _read_config(folder)
    if os.path.isfile(os.path.join(folder, "generation_config.json")):
        read_json_object(os.path.join(folder, "generation_config.json"))
    _check_weights(folder, _expected_weights(folder, config))
    if need_tokenizer:
        _check_tokenizer(folder)


def _read_config(folder: str):
    path = os.path.join(folder, "config.json")
    if not os.path.isfile(path):
        raise CheckpointError(f"{folder} is not a saved model folder: it has no config.json")
    read_json_object(path)
    try:
        return AutoConfig.from_pretrained(folder)
    except Exception as error:  # noqa: BLE001  (invalid values: ValueError, TypeError, strict dataclass errors, ...)
        raise CheckpointError(f"{path} does not describe a model: {one_line(error)}") from None


def _expected_weights(folder: str, config) -> tuple[dict, list[set], list, list, set]:
    """Names and shapes of the weights `config`'s model saves, the groups of names that share one tensor (any one
    of them suffices), and the name patterns the model class lets `from_pretrained` skip or ignore."""
    try:
        with torch.device("meta"):
            cls = model_class(config)
            model = cls(config) if cls is not None else AutoModelForSeq2SeqLM.from_config(config)
    except Exception as error:  # noqa: BLE001
        raise CheckpointError(f"{os.path.join(folder, 'config.json')} does not build a model: "
                              f"{one_line(error)}") from None
    # Private API (underscore class attributes that `from_pretrained` / `save_pretrained` read; the same in
    # transformers 5.18 - 5.24, no public equivalent): weights never saved, weights allowed to be missing (recomputed,
    # e.g. sinusoid tables), and old names to ignore.
    never_saved = set(getattr(model, "_keys_to_ignore_on_save", None) or [])
    may_miss = list(getattr(model, "_keys_to_ignore_on_load_missing", None) or [])
    may_have = list(getattr(model, "_keys_to_ignore_on_load_unexpected", None) or [])
    shapes, groups = {}, {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if name in never_saved:
            continue
        shapes[name] = tuple(tensor.shape)
        groups.setdefault(id(tensor), set()).add(name)  # tied weights are one tensor under several names
    return shapes, list(groups.values()), may_miss, may_have, never_saved


def _weight_files(folder: str) -> list[str]:
    """The weight files of `folder`: one file, or the shards its index names."""
    for single, index in (("model.safetensors", "model.safetensors.index.json"),
                          ("pytorch_model.bin", "pytorch_model.bin.index.json")):
        if os.path.isfile(os.path.join(folder, single)):
            return [os.path.join(folder, single)]
        index_path = os.path.join(folder, index)
        if os.path.isfile(index_path):
            weight_map = read_json_object(index_path).get("weight_map")
            if not isinstance(weight_map, dict) or not weight_map:
                raise CheckpointError(f"{index_path} has no weight_map")
            shards = sorted(set(weight_map.values()))
            missing = [shard for shard in shards if not os.path.isfile(os.path.join(folder, shard))]
            if missing:
                raise CheckpointError(f"{os.path.join(folder, missing[0])} is missing (named by {index})")
            return [os.path.join(folder, shard) for shard in shards]
    raise CheckpointError(f"{folder} holds no weights: model.safetensors is missing")


def _read_shapes(path: str) -> dict[str, tuple]:
    """Names and shapes of the tensors in one weight file, reading no more than its header."""
    try:
        if path.endswith(".safetensors"):
            with safe_open(path, framework="pt") as f:  # checks that the file is as long as its header says
                return {name: tuple(f.get_slice(name).get_shape()) for name in f.keys()}

        state = torch.load(path, map_location="cpu", mmap=True, weights_only=True)
        return {name: tuple(tensor.shape) for name, tensor in state.items()}
    except Exception as error:  # noqa: BLE001  (SafetensorError, pickle and zip errors, OSError)
        raise CheckpointError(f"{path} cannot be read (truncated or not a weight file?): {one_line(error)}") from None


def _check_weights(folder: str, expected) -> None:
    shapes, groups, may_miss, may_have, never_saved = expected
    found: dict[str, tuple] = {}
    where: dict[str, str] = {}
    files = _weight_files(folder)
    for path in files:
        for name, shape in _read_shapes(path).items():
            found[name], where[name] = shape, path
    allowed_missing = re.compile("|".join(f"({p})" for p in may_miss)) if may_miss else None
    allowed_extra = re.compile("|".join(f"({p})" for p in may_have)) if may_have else None

    unexpected = sorted(name for name in found if name not in shapes and name not in never_saved
                        and not (allowed_extra and allowed_extra.search(name)))
    if unexpected:
        raise CheckpointError(f"{where[unexpected[0]]} holds {len(unexpected)} weight(s) that config.json's model "
                              f"does not have, e.g. {unexpected[0]}")
    missing = sorted(min(group) for group in groups if not group & found.keys()
                     and not (allowed_missing and all(allowed_missing.search(name) for name in group)))
    if missing:
        named = files[0] if len(files) == 1 else f"{folder} (its {len(files)} weight files)"
        raise CheckpointError(f"{named} lacks {len(missing)} weight(s) of config.json's model, e.g. {missing[0]}")
    for name, shape in sorted(found.items()):
        if name in shapes and shape != shapes[name]:
            raise CheckpointError(f"{where[name]}: {name} has shape {list(shape)}, but config.json's model needs "
                                  f"{list(shapes[name])} (the weights and config.json disagree)")


def _check_tokenizer(folder: str) -> None:
    """`tokenizer_config.json` and the files its tokenizer class cannot do without."""
    config_path = os.path.join(folder, "tokenizer_config.json")
    if not os.path.isfile(config_path):
        raise CheckpointError(f"{folder} has no tokenizer: tokenizer_config.json is missing")
    tokenizer_config = read_json_object(config_path)
    tokenizer_json = os.path.join(folder, "tokenizer.json")
    if os.path.isfile(tokenizer_json):
        read_json_object(tokenizer_json)
        return

    name = tokenizer_config.get("tokenizer_class") or ""
    cls = getattr(transformers, name, None) or getattr(transformers, name.removesuffix("Fast"), None)
    vocab_files = getattr(cls, "vocab_files_names", None) or {}
    fast = transformers.PreTrainedTokenizerFast  # the tokenizers-library tokenizers (TokenizersBackend in 5.x)
    if cls is None or issubclass(cls, fast):
        # it can also be built from another file it names (e.g. a sentencepiece tokenizer.model), if that is there
        if not any(os.path.isfile(os.path.join(folder, file_name)) for file_name in vocab_files.values()):
            raise CheckpointError(f"{tokenizer_json} is missing (the tokenizer {name or 'of this folder'} needs it)")
        return
    # slow tokenizers (sentencepiece, BPE files): the vocabulary files their __init__ cannot do without
    parameters = inspect.signature(cls.__init__).parameters
    for argument, file_name in vocab_files.items():
        parameter = parameters.get(argument)
        if (parameter is not None and parameter.default is inspect.Parameter.empty
                and not os.path.isfile(os.path.join(folder, file_name))):
            raise CheckpointError(f"{os.path.join(folder, file_name)} is missing (the tokenizer {name} needs it)")


__all__ = ["CheckpointError", "check_checkpoint"]
