"""Checkpoint averaging (section 6.1 of the paper): the final model is the element-wise mean of the weights of the
last N checkpoints (N = 5 for the base model, 20 for the big one), which smooths out the noise of the last updates.

    python -m training.average_checkpoints --checkpoint-dir outputs/multi30k --last 5 --output-dir outputs/avg
    python -m training.average_checkpoints --checkpoints ckpt-a ckpt-b ckpt-c --output-dir outputs/avg

The checkpoints must be of one run (same config and tokenizer files). The output folder is written whole or not at
all (staging folder + rename); an existing one is replaced only with --overwrite, and never when it is, contains or
lies inside one of the checkpoints.

The output folder is a normal checkpoint (config, weights, generation config, tokenizer) that `from_pretrained`,
`pipeline("translation")` and `push_to_hub` take like any other.
"""

import argparse
import json
import os
import re
import sys

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

from vanilla_transformer.checkpoints.kinds import tokenizer_errors
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.files import check_output_folder, staged_folder

CHECKPOINT_PATTERN = re.compile(r"^checkpoint-(\d+)$")


def last_checkpoints(checkpoint_dir: str, n: int) -> list[str]:
    """The `n` Trainer checkpoints (`checkpoint-STEP` folders) of `checkpoint_dir` with the highest steps, oldest first."""
    if not os.path.isdir(checkpoint_dir):
        raise ValueError(f"The checkpoint folder {checkpoint_dir} does not exist.")
    found = sorted(
        (int(m.group(1)), os.path.join(checkpoint_dir, name))
        for name in os.listdir(checkpoint_dir)
        if (m := CHECKPOINT_PATTERN.match(name)) and os.path.isdir(os.path.join(checkpoint_dir, name))
    )
    if not found:
        raise ValueError(f"{checkpoint_dir} holds no checkpoint-STEP folders to average.")
    if n > len(found):
        raise ValueError(f"Asked to average the last {n} checkpoints, but {checkpoint_dir} holds only {len(found)}: "
                         f"{', '.join(os.path.basename(p) for _, p in found)}.")
    return [path for _, path in found[-n:]]


def saved_weights(checkpoint: str) -> dict:
    """The weights (and buffers) of the model saved in `checkpoint`, as `from_pretrained` loads them: any layout of
    its weight files, tied weights included. `model.load_state_dict(saved_weights(folder))` gives a model of that
    architecture the saved weights, as the Trainer does when it resumes."""
    return AutoModelForSeq2SeqLM.from_pretrained(checkpoint).state_dict()


def average_state_dicts(checkpoints: list[str]) -> dict:
    """Mean of the floating-point weights (and buffers) of the models saved in `checkpoints`; other tensors are
    taken from the last checkpoint. Checkpoints of different architectures are refused."""
    if not checkpoints:
        raise ValueError("No checkpoints to average.")
    total, reference_shapes = None, None
    for path in checkpoints:
        if not os.path.isdir(path):
            raise ValueError(f"The checkpoint {path} does not exist.")
        state = saved_weights(path)
        shapes = {name: tuple(t.shape) for name, t in state.items()}
        if total is None:
            total, reference_shapes = {name: t.detach().clone().double() if t.is_floating_point() else t
                                       for name, t in state.items()}, shapes
            dtypes = {name: t.dtype for name, t in state.items()}
            continue
        if shapes != reference_shapes:
            different = sorted(set(shapes.items()) ^ set(reference_shapes.items()))[:3]
            raise ValueError(f"{path} does not have the architecture of {checkpoints[0]} (differs in {different}).")
        for name, tensor in state.items():
            total[name] = total[name] + tensor.double() if tensor.is_floating_point() else tensor
    with torch.no_grad():
        return {name: (t / len(checkpoints)).to(dtypes[name]) if t.is_floating_point() else t
                for name, t in total.items()}


def average_checkpoints(checkpoints: list[str], output_dir: str | None = None, overwrite: bool = False):
    """Load the last of `checkpoints`, give it the averaged weights, and (if `output_dir`) save it there with the
    tokenizer of that checkpoint: written to a staging folder and renamed into place when whole (`output_dir` may
    not be, contain or lie inside a checkpoint; an existing non-empty folder only with `overwrite`). Returns the
    averaged model."""
    if output_dir is not None:  # before the work
        check_output_folder(output_dir, overwrite=overwrite, inputs=checkpoints)
    averaged = average_state_dicts(checkpoints)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoints[-1])
    model.load_state_dict(averaged)
    if output_dir is not None:
        with staged_folder(output_dir, overwrite=overwrite, inputs=checkpoints) as folder:
            model.save_pretrained(folder)
            if os.path.isfile(os.path.join(checkpoints[-1], "tokenizer_config.json")):
                with tokenizer_errors(checkpoints[-1]):  # a damaged tokenizer file: one line naming it
                    tokenizer = AutoTokenizer.from_pretrained(checkpoints[-1])
                tokenizer.save_pretrained(folder)
    return model


# config.json keys that differ between checkpoints of one run without changing what the weights mean
BOOKKEEPING_KEYS = {"transformers_version", "_name_or_path", "torch_dtype", "dtype", "auto_map", "architectures"}
SEQ2SEQ_CLASS = "VanillaTransformerForConditionalGeneration"


def _config(path: str) -> dict:
    with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
        return json.load(f)


def check_kind(checkpoint: str) -> None:
    """Raise ValueError (one line) unless `checkpoint` holds the encoder-decoder translation model."""
    architectures = _config(checkpoint).get("architectures") or [SEQ2SEQ_CLASS]
    if SEQ2SEQ_CLASS not in architectures:
        kind = {"VanillaTransformerForCausalLM": "a decoder-only language model",
                "VanillaTransformerForMaskedLM": "an encoder-only masked language model",
                "VanillaTransformerForSequenceClassification": "an encoder-only classifier",
                "VanillaTransformerModel": "the bare encoder-decoder without its language-model head"}.get(
                    architectures[0], architectures[0])
        raise ValueError(f"{checkpoint} holds {kind} ({architectures[0]}); averaging needs checkpoints of the "
                         f"translation model ({SEQ2SEQ_CLASS}).")


def _tokenizer_files(path: str) -> dict[str, bytes]:
    names = ("tokenizer.json", "vocab.json", "merges.txt", "source.spm", "target.spm", "vocab.txt",
             "special_tokens_map.json")
    found = {}
    for name in names:
        file = os.path.join(path, name)
        if os.path.isfile(file):
            with open(file, "rb") as f:
                found[name] = f.read()
    return found


def check_same_run(checkpoints: list[str]) -> None:
    """Raise ValueError (one line) unless every checkpoint has the config and tokenizer files of the first: the
    mean of two runs' weights (or of weights whose token ids mean different words) translates to garbage even when
    the shapes agree."""
    first = checkpoints[0]
    reference = {k: v for k, v in _config(first).items() if k not in BOOKKEEPING_KEYS}
    tokenizer = _tokenizer_files(first)
    for path in checkpoints[1:]:
        config = {k: v for k, v in _config(path).items() if k not in BOOKKEEPING_KEYS}
        differing = sorted(k for k in set(config) | set(reference) if config.get(k) != reference.get(k))
        if differing:
            key = differing[0]
            raise ValueError(f"{path} and {first} are not checkpoints of one run: their config.json differs in "
                             f"{key} ({config.get(key)!r} vs {reference.get(key)!r})"
                             + (f" and {len(differing) - 1} more" if len(differing) > 1 else "") + ".")
        files = _tokenizer_files(path)
        differing = sorted(n for n in set(files) | set(tokenizer) if files.get(n) != tokenizer.get(n))
        if differing:
            raise ValueError(f"{path} and {first} are not checkpoints of one run: their tokenizers differ "
                             f"({', '.join(differing)}); averaged weights would mix the meanings of token ids.")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint-dir", "--checkpoint_dir",
                       help="a training output folder holding checkpoint-STEP folders")
    which.add_argument("--checkpoints", nargs="+", help="checkpoint folders to average, in any order")
    parser.add_argument("--last", type=int, default=5, help="with --checkpoint-dir: how many of the latest to average")
    parser.add_argument("--output-dir", "--output_dir", required=True)
    parser.add_argument("--overwrite", action="store_true",
                        help="replace --output-dir if it exists (never one of the checkpoints or a folder holding one)")
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}.")
    try:
        checkpoints = last_checkpoints(args.checkpoint_dir, args.last) if args.checkpoint_dir else args.checkpoints
        check_output_folder(args.output_dir, overwrite=args.overwrite, inputs=checkpoints)
        for checkpoint in checkpoints:  # whole (and the tokenizer that is copied), before anything is written
            check_checkpoint(checkpoint, need_tokenizer=checkpoint == checkpoints[-1] and os.path.isfile(
                os.path.join(checkpoint, "tokenizer_config.json")))
            check_kind(checkpoint)
        check_same_run(checkpoints)
        average_checkpoints(checkpoints, args.output_dir, overwrite=args.overwrite)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(f"Averaged {len(checkpoints)} checkpoints ({', '.join(os.path.basename(c) for c in checkpoints)}) "
          f"into {args.output_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
