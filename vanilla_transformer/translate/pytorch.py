"""A batch translated by a PyTorch model (ours or any `generate`-capable seq2seq model): padded into tensors on the
model's device, each row bounded by `SourceLengthBound`. `translate` imports this module for models that are not a
CTranslate2 folder's, so that translating with CTranslate2 needs no torch."""

import torch
from transformers import LogitsProcessorList

from vanilla_transformer.decoding import MAX_LENGTH_A, MAX_LENGTH_B
from vanilla_transformer.modeling_vanilla_transformer import SourceLengthBound
from vanilla_transformer.translate.lengths import row_bounds


def length_bound(model, source_lengths: list[int], a: float = MAX_LENGTH_A, b: float = MAX_LENGTH_B) -> dict:
    """The `generate` keywords that bound each row of a batch to `max_target_lengths(source_lengths, a, b)` tokens
    within the generation config's own maximum: `max_new_tokens` (the longest row's) and a `SourceLengthBound`
    `logits_processor` that ends each row at its own bound, so that a sentence gets the same translation in any
    batch. Our model's and `CTranslate2Translator`'s `generate` take them."""
    bounds, max_new_tokens = row_bounds(model.generation_config, source_lengths, a, b)
    eos = model.generation_config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    return {"max_new_tokens": max_new_tokens, "logits_processor": LogitsProcessorList([SourceLengthBound(bounds, eos)])}


def generate_batch(model, tokenizer, rows: list[list[int]], bound: tuple[float, float] | None,
                   generate_kwargs: dict):
    """The generated ids of each row of source ids (`bound`: (a, b) of the length bound, or None)."""
    inputs = tokenizer.pad({"input_ids": rows}, return_tensors="pt")
    inputs = {name: inputs[name].to(model.device) for name in ("input_ids", "attention_mask")}
    length_kwargs = {} if bound is None else length_bound(model, [len(ids) for ids in rows], *bound)
    with torch.inference_mode():
        return model.generate(**inputs, **generate_kwargs, **length_kwargs)


def seed(value: int) -> None:
    torch.manual_seed(value)


__all__ = ["generate_batch", "length_bound", "seed"]
