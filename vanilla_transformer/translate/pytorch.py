"""A batch translated by a PyTorch model (ours or any `generate`-capable seq2seq model): padded into tensors on the
model's device and handed to its `generate`, which bounds each row by its source's length (ours does by default).
`translate` imports this module for models that are not a CTranslate2 folder's, so that translating with CTranslate2
needs no torch."""

import torch


def generate_batch(model, tokenizer, rows: list[list[int]], generate_kwargs: dict):
    """The generated ids of each row of source ids (`generate_kwargs` go to `model.generate`)."""
    inputs = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
    inputs = {name: inputs[name].to(model.device) for name in ("input_ids", "attention_mask")}
    with torch.inference_mode():
        return model.generate(**inputs, **generate_kwargs)


def seed(value: int) -> None:
    torch.manual_seed(value)


__all__ = ["generate_batch", "seed"]
