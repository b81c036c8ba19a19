"""Translate sentences in batches with a loaded model: the library side of `vanilla-transformer translate`.

    from vanilla_transformer.translate import load_model_and_tokenizer, translate
    model, tokenizer = load_model_and_tokenizer("outputs/multi30k")   # or a CTranslate2 export
    translate(model, tokenizer, ["Two dogs play in the snow."], num_beams=4)

Decoding follows the model's `generation_config` (the paper's beam 4, length penalty 0.6) unless the keyword
arguments say otherwise. Folders are opened by `checkpoints.load.load_checkpoint`; the command is `cli/translate.py`.
"""

import sys
from collections.abc import Iterable

import torch
from tqdm.auto import tqdm

from vanilla_transformer.checkpoints.load import ENGINES, load_checkpoint
from vanilla_transformer.pipeline_translation import check_generation_parameters

TRANSLATION_KINDS = ("seq2seq", "ctranslate2")


def load_model(path: str, device: str | torch.device | None = None):
    """A saved translation model folder's model in eval mode on `device` (default: CUDA when available), checked
    first by `checkpoints.load.load_checkpoint`: a folder that is not whole raises `CheckpointError` (a ValueError)."""
    return load_checkpoint(path, kinds=("seq2seq",), device=device, need_tokenizer=False).model


def load_model_and_tokenizer(path: str, device: str | torch.device | None = None, *, engine: str = "auto",
                             compute_type: str = "default"):
    """The model and tokenizer of a saved translation folder: our PyTorch model, or a
    `ctranslate2_runtime.CTranslate2Translator` (with `compute_type`) for a folder written by `vanilla-transformer
    export ctranslate2`; `engine` ("pytorch" or "ctranslate2") insists on one. Both `generate` for `translate`."""
    loaded = load_checkpoint(path, kinds=TRANSLATION_KINDS, device=device, engine=engine,
                             compute_type=compute_type, purpose="translate")
    return loaded.model, loaded.tokenizer


def translate(
    model,
    tokenizer,
    texts: Iterable[str],
    *,
    batch_size: int = 32,
    progress: bool = False,
    **generate_kwargs,
) -> list[str]:
    """Translate `texts` in batches of `batch_size` sentences; returns one single-line string per input text.

    Sentences are batched by token length (less padding) and returned in their original order. A blank text gives
    an empty translation without running the model. `generate_kwargs` go to `model.generate` (num_beams,
    max_new_tokens, length_penalty, ...). `progress=True` shows a tqdm bar on stderr. `model` is our model or an
    `ctranslate2_runtime.CTranslate2Translator` (see `load_model_and_tokenizer`).
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size}")
    check_generation_parameters(model.generation_config, generate_kwargs)
    texts = list(texts)
    translations = [""] * len(texts)
    todo = [i for i, text in enumerate(texts) if text.strip()]
    input_ids = tokenizer([texts[i] for i in todo])["input_ids"] if todo else []
    ids_of = dict(zip(todo, input_ids))
    todo.sort(key=lambda i: len(ids_of[i]), reverse=True)  # longest first: an out-of-memory shows at once

    with tqdm(total=len(texts), disable=not progress, unit="sent", desc="Translating", file=sys.stderr) as bar:
        bar.update(len(texts) - len(todo))  # blank lines
        for start in range(0, len(todo), batch_size):
            batch = todo[start : start + batch_size]
            inputs = tokenizer.pad({"input_ids": [ids_of[i] for i in batch]}, return_tensors="pt")
            inputs = {name: inputs[name].to(model.device) for name in ("input_ids", "attention_mask")}
            with torch.inference_mode():
                output_ids = model.generate(**inputs, **generate_kwargs)
            for i, text in zip(batch, tokenizer.batch_decode(output_ids, skip_special_tokens=True)):
                translations[i] = " ".join(text.splitlines())  # one line out per line in
            bar.update(len(batch))
    return translations


__all__ = ["ENGINES", "load_model", "load_model_and_tokenizer", "translate"]
