"""The explorer's data: everything its views draw for one text, as JSON-ready lists and numbers
(`attention_data`)."""

import torch

from vanilla_transformer.inspect.attention_run import (
    AttentionRun,
    positions_module,
    run_with_attentions,
    stacked_attentions,
)
from vanilla_transformer.inspect.walkthrough import walkthrough_data
from vanilla_transformer.modeling_vanilla_transformer import first_positions

TOP_K = 10
MIN_POSITIONS_DRAWN = 32  # the positional-encoding picture shows at least this many positions (or the model's limit)


def _top_k(logits: torch.Tensor, tokenizer, k: int) -> list[dict]:
    """The k most probable tokens of one softmax distribution, with their ids and probabilities."""
    probabilities = torch.softmax(logits.float(), dim=-1)
    values, ids = probabilities.topk(min(k, probabilities.shape[-1]))
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    return [{"token": token, "id": int(i), "probability": float(p)}
            for token, i, p in zip(tokens, ids.tolist(), values.tolist())]


def _decoding(model, generate_kwargs: dict) -> dict:
    """The decoding actually used: the generation config updated by the call's arguments."""
    config = model.generation_config
    value = {name: generate_kwargs.get(name, getattr(config, name, None))
             for name in ("num_beams", "do_sample", "temperature", "length_penalty", "max_new_tokens", "max_length")}
    value["num_beams"] = value["num_beams"] or 1
    value["strategy"] = "sampling" if value["do_sample"] else "beam search" if value["num_beams"] > 1 else "greedy"
    return value


def attention_data(model, tokenizer, text: str, *, target: str | None = None, top_k: int = TOP_K,
                   walkthrough: bool = True, **generate_kwargs) -> dict:
    """Everything the explorer draws for one text, as JSON-ready lists and numbers.

    Keys for every configuration: `configuration`, `model` (class name), `text`, `source_tokens`, `target_tokens`,
    `decoder_input_tokens`, `translation`, `encoder_attentions`, `decoder_attentions`, `cross_attentions` (each
    `[layer][head][query][key]`, the model's `output_attentions`; empty where the model has no such attention),
    `steps`, `step_attention`, `decoding`, `positional_encoding`, `notes`; and `label_scores` for a classifier.

    - encoder-decoder: the model translates `text` (`model.generate` with its generation config updated by
      `generate_kwargs`, e.g. `num_beams=4` or `do_sample=True, temperature=0.8`) unless `target` is given.
      `target_tokens` are the translation's tokens y_1 .. </s> (row i of the cross-attention is the step that
      produced token i); `decoder_input_tokens` (<start> y_1 .. y_{n-1}) label the decoder self-attention.
      `steps[t]`: the token produced at step t, the `top_k` most probable next tokens (the model's softmax), and
      with beam search the `beams` extended at that step, with their scores (summed log-probabilities) and whether
      each is a prefix of the final translation (`chosen`). `step_attention` = "cross": the row the step view draws.
    - decoder-only: `source_tokens` is the prompt, `target_tokens` the model's continuation (or `target`),
      `decoder_attentions` the causal self-attention over both (`decoder_input_tokens`); `steps[i]` is the
      next-token distribution at each position i. `step_attention` = "decoder".
    - encoder-only: `encoder_attentions` over `source_tokens`; a masked language model gives `steps` with the top
      tokens at each mask token (at every position when the text has none), a classifier gives `label_scores`
      (softmax probabilities per label). `step_attention` = "encoder".

    `positional_encoding`: the vectors the model adds to its embeddings at positions 0 .. n-1 (its own sinusoids,
    or its learned table), `values[position][dimension]`.

    `walkthrough` (unless `walkthrough=False`): every intermediate value of the paper's equations for this text and
    its translation, read from the model's own modules (`walkthrough.walkthrough_data`).
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    run = run_with_attentions(model, tokenizer, text, target, generate_kwargs=generate_kwargs)
    attentions = stacked_attentions(run)
    tokens = tokenizer.convert_ids_to_tokens
    data = {
        "configuration": run.configuration,
        "model": type(model).__name__,
        "text": text,
        "source_tokens": tokens(run.source_ids),
        "target_tokens": tokens(run.target_ids),
        "decoder_input_tokens": tokens(run.decoder_input_ids),
        "translation": run.target,
        "target_generated": run.target_generated,
    }
    for kind in ("encoder", "decoder", "cross"):
        data[f"{kind}_attentions"] = [layer.tolist() for layer in attentions.get(kind, [])]
    data["decoding"] = _decoding(model, generate_kwargs) if run.target_generated else None
    data.update(_steps(model, tokenizer, run, top_k))
    data["positional_encoding"] = _positional_encoding(model, run)
    data["walkthrough"] = walkthrough_data(model, tokenizer, run) if walkthrough else None
    data["notes"] = run.notes
    return data


def _steps(model, tokenizer, run: AttentionRun, top_k: int) -> dict:
    """The step view's data: per decoding step (or position) the top-k distribution, the beams, the attention row."""
    logits = getattr(run.outputs, "logits", None)
    if run.configuration == "encoder-decoder":
        steps = []
        target_tokens = tokenizer.convert_ids_to_tokens(run.target_ids)
        for t, token in enumerate(target_tokens):
            step = {"query": t, "token": token, "top_k": _top_k(logits[0, t], tokenizer, top_k)}
            if run.beam_steps is not None and t < len(run.beam_steps):
                step["beams"] = [{"tokens": tokenizer.convert_ids_to_tokens(ids), "score": score,
                                  "chosen": ids == run.target_ids[:t]} for ids, score in run.beam_steps[t]]
            steps.append(step)
        return {"steps": steps, "step_attention": "cross"}
    if run.configuration == "decoder-only":
        sequence = run.decoder_input_ids
        prompt = len(run.source_ids)
        steps = []
        for i in range(len(sequence)):
            step = {"query": i, "token": tokenizer.convert_ids_to_tokens(sequence[i + 1]) if i + 1 < len(sequence)
                    else "", "top_k": _top_k(logits[0, i], tokenizer, top_k)}
            t = i + 1 - prompt  # the continuation's token i + 1 was chosen at search step t
            if run.beam_steps is not None and 0 <= t < len(run.beam_steps):
                step["beams"] = [{"tokens": tokenizer.convert_ids_to_tokens(ids), "score": score,
                                  "chosen": ids == run.target_ids[:t]} for ids, score in run.beam_steps[t]]
            steps.append(step)
        return {"steps": steps, "step_attention": "decoder"}
    if logits is not None and logits.dim() == 3:  # masked language model: (1, S, V)
        mask_id = getattr(tokenizer, "mask_token_id", None)
        positions = [i for i, token_id in enumerate(run.source_ids) if token_id == mask_id] \
            or list(range(len(run.source_ids)))
        source_tokens = tokenizer.convert_ids_to_tokens(run.source_ids)
        steps = [{"query": i, "token": source_tokens[i], "top_k": _top_k(logits[0, i], tokenizer, top_k)}
                 for i in positions]
        return {"steps": steps, "step_attention": "encoder"}
    result = {"steps": [], "step_attention": "encoder"}
    if logits is not None:  # a classifier: (1, num_labels)
        labels = model.config.id2label or {}
        if logits.shape[-1] == 1:  # a regressor: the value itself
            result["label_scores"] = [{"label": labels.get(0, "score"), "score": float(logits[0, 0])}]
        else:
            probabilities = torch.softmax(logits[0].float(), dim=-1).tolist()
            result["label_scores"] = [{"label": labels.get(i, f"LABEL_{i}"), "score": p}
                                      for i, p in enumerate(probabilities)]
    return result


def _positional_encoding(model, run: AttentionRun) -> dict:
    """The model's own positional encoding for positions 0 .. n-1 (n: the longest sequence of this run, at least
    MIN_POSITIONS_DRAWN, at most the model's positions); computed by the model's positional module."""
    config = model.config
    longest = max(len(run.source_ids), len(run.decoder_input_ids))
    length = min(max(longest, MIN_POSITIONS_DRAWN), config.max_position_embeddings)
    module = positions_module(model)
    like = next(model.parameters())
    with torch.no_grad():
        values = first_positions(module, length, like, config.position_offset).float().cpu()  # (L, D)
    description = f"{config.position_embedding_type} positions"
    if config.position_embedding_type == "sinusoidal":
        description += f", layout {config.sinusoidal_layout}, frequencies {config.sinusoidal_frequencies}"
    if config.position_offset:
        description += f", offset {config.position_offset}"
    return {"type": config.position_embedding_type, "description": description, "values": values.tolist()}
