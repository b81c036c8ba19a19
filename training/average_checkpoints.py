"""Checkpoint averaging (section 6.1 of the paper): the final model is the element-wise mean of the weights of the
last N checkpoints (N = 5 for the base model, 20 for the big one), which smooths out the noise of the last updates.

    python -m training.average_checkpoints --checkpoint_dir outputs/multi30k --last 5 --output_dir outputs/avg
    python -m training.average_checkpoints --checkpoints ckpt-a ckpt-b ckpt-c --output_dir outputs/avg

The output folder is a normal checkpoint (config, weights, generation config, tokenizer) that `from_pretrained`,
`pipeline("translation")` and `push_to_hub` take like any other.
"""

import argparse
import os
import re
import sys

from vanilla_transformer.checkpoint import check_checkpoint

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


def average_state_dicts(checkpoints: list[str]) -> dict:
    """Mean of the floating-point weights (and buffers) of the models saved in `checkpoints`; other tensors are
    taken from the last checkpoint. Checkpoints of different architectures are refused."""
    import torch
    from transformers import AutoModelForSeq2SeqLM

    import vanilla_transformer  # noqa: F401  (registers the model type with the Auto classes)

    if not checkpoints:
        raise ValueError("No checkpoints to average.")
    total, reference_shapes = None, None
    for path in checkpoints:
        if not os.path.isdir(path):
            raise ValueError(f"The checkpoint {path} does not exist.")
        model = AutoModelForSeq2SeqLM.from_pretrained(path)
        state = model.state_dict()
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


def average_checkpoints(checkpoints: list[str], output_dir: str | None = None):
    """Load the last of `checkpoints`, give it the averaged weights, and (if `output_dir`) save it there with the
    tokenizer of that checkpoint. Returns the averaged model."""
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    averaged = average_state_dicts(checkpoints)
    model = AutoModelForSeq2SeqLM.from_pretrained(checkpoints[-1])
    model.load_state_dict(averaged)
    if output_dir is not None:
        model.save_pretrained(output_dir)
        if os.path.isfile(os.path.join(checkpoints[-1], "tokenizer_config.json")):
            AutoTokenizer.from_pretrained(checkpoints[-1]).save_pretrained(output_dir)
    return model


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    which = parser.add_mutually_exclusive_group(required=True)
    which.add_argument("--checkpoint_dir", help="a training output folder holding checkpoint-STEP folders")
    which.add_argument("--checkpoints", nargs="+", help="checkpoint folders to average, in any order")
    parser.add_argument("--last", type=int, default=5, help="with --checkpoint_dir: how many of the latest to average")
    parser.add_argument("--output_dir", required=True)
    args = parser.parse_args(argv)
    if args.last < 1:
        parser.error(f"--last must be at least 1, got {args.last}.")
    try:
        checkpoints = last_checkpoints(args.checkpoint_dir, args.last) if args.checkpoint_dir else args.checkpoints
        for checkpoint in checkpoints:  # whole (and the tokenizer that is copied), before anything is written
            check_checkpoint(checkpoint, need_tokenizer=checkpoint == checkpoints[-1] and os.path.isfile(
                os.path.join(checkpoint, "tokenizer_config.json")))
        average_checkpoints(checkpoints, args.output_dir)
    except (OSError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(f"Averaged {len(checkpoints)} checkpoints ({', '.join(os.path.basename(c) for c in checkpoints)}) "
          f"into {args.output_dir}", file=sys.stderr)


if __name__ == "__main__":
    main()
