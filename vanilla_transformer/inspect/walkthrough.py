"""The walk-through's numbers: every intermediate value of the paper's equations for one text, read from the model's
own modules by forward hooks during one teacher-forced forward pass (nothing here recomputes a layer).

What each module gives (the names of modeling_vanilla_transformer.py):

- embeddings (section 3.4, 3.5): the stack's `embed_tokens` output times its `embed_scale` (sqrt(d_model)), the
  `embed_positions` output, and the first layer's input (their sum);
- attention (3.2): `q_proj`, `k_proj`, `v_proj` outputs split into heads by the module's own `split_heads`, the mask
  the attention function was given as the model applies it (`applied_attention_mask`: causal where it was given
  None), the weights it returned (`output_attentions`), the input of `out_proj` (the heads concatenated) and its
  output; the scores are Q K^T / sqrt(d_k) of those Q and K, with the module's own `scaling`;
- the residual stream after each sub-layer (3.1): the output of its LayerNorm (post-LN, the paper's order) or the
  input of the next LayerNorm (pre-LN, where the stream is normalised before each sub-layer);
- the feed-forward network (3.3): the input of `fc2` (after the activation) and its output; the layer's output;
- the output layer (3.4): the model's logits, top-k per position.
"""

import torch

from vanilla_transformer.inspect.attention_run import AttentionRun
from vanilla_transformer.modeling_vanilla_transformer import applied_attention_mask

LOGITS_TOP_K = 10


class Taps:
    """Forward hooks on a model's modules, each keeping what it saw under a key; removed on exit."""

    def __init__(self):
        self.values: dict[tuple, object] = {}
        self.handles = []

    def output(self, module, key, pick=lambda output: output):
        """Keep `pick(output)` of `module`'s forward under `key`."""
        self.handles.append(module.register_forward_hook(lambda _m, _args, out: self.keep(key, pick(out))))

    def first_input(self, module, key):
        """Keep the first positional input of `module`'s forward under `key`."""
        self.handles.append(module.register_forward_pre_hook(lambda _m, args: self.keep(key, args[0])))

    def keyword(self, module, key, name):
        """Keep the keyword argument `name` of `module`'s forward (None when not given) under `key`."""
        def hook(_module, _args, kwargs):
            self.values[key] = kwargs.get(name)
        self.handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))

    def keep(self, key, value):
        self.values[key] = value.detach() if isinstance(value, torch.Tensor) else value

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for handle in self.handles:
            handle.remove()
        self.handles.clear()


def stacks_of(model, configuration: str) -> dict:
    """The model's stacks by name: "encoder" and "decoder" (the single stack of the other configurations takes the
    name of what it is)."""
    if configuration == "encoder-decoder":
        return {"encoder": model.get_encoder(), "decoder": model.get_decoder()}
    return {"decoder" if configuration == "decoder-only" else "encoder": model.model}


def tap_attention(taps: Taps, attention, key: tuple) -> None:
    taps.keyword(attention, key + ("mask",), "attention_mask")
    for name in ("q", "k", "v"):
        taps.output(getattr(attention, f"{name}_proj"), key + (name,))
    taps.first_input(attention.out_proj, key + ("context",))
    taps.output(attention.out_proj, key + ("output",))
    taps.output(attention, key + ("weights",), pick=lambda output: output[1])


def tap_layer(taps: Taps, layer, key: tuple) -> None:
    """The hooks of one encoder or decoder layer (see the module's docstring)."""
    tap_attention(taps, layer.self_attn, key + ("self_attention",))
    cross = getattr(layer, "encoder_attn", None)
    if cross is not None:
        tap_attention(taps, cross, key + ("cross_attention",))
    norms = [layer.self_attn_layer_norm] + ([layer.encoder_attn_layer_norm] if cross is not None else []) + \
        [layer.final_layer_norm]
    for i, norm in enumerate(norms[:-1], start=1):
        if layer.normalize_before:  # the stream after sub-layer i is what the next sub-layer's LayerNorm reads
            taps.first_input(norms[i], key + (f"add_norm_{i}",))
        else:  # LayerNorm(x + Sublayer(x)) is the LayerNorm's output
            taps.output(norm, key + (f"add_norm_{i}",))
    taps.first_input(layer.fc2, key + ("ffn_hidden",))
    taps.output(layer.fc2, key + ("ffn_output",))
    taps.output(layer, key + ("layer_output",), pick=lambda output: output[0] if isinstance(output, tuple) else output)


def tap_model(taps: Taps, stacks: dict) -> None:
    for name, stack in stacks.items():
        # the token embedding may be one module shared by both stacks: each stack marks itself as it starts
        taps.handles.append(stack.register_forward_pre_hook(lambda _m, _args, name=name: taps.keep("stack", name)))
        taps.handles.append(stack.embed_tokens.register_forward_hook(
            lambda _m, _args, out: taps.keep(("embeddings", taps.values["stack"], "token"), out)))
        taps.output(stack.embed_positions, ("embeddings", name, "position"))
        taps.first_input(stack.layers[0], ("embeddings", name, "sum"))
        for i, layer in enumerate(stack.layers):
            tap_layer(taps, layer, (name, i))


def heads(x: torch.Tensor, attention) -> torch.Tensor:
    """(1, L, D) projections -> (H, L, Dh), split by the attention module's own `split_heads`."""
    return attention.split_heads(x)[0]


def allowed(mask, attention, queries: int, keys: int) -> torch.Tensor:
    """The (Q, K) mask, True where a query may attend: the mask the attention function was given, read as the model
    applies it (`applied_attention_mask`: None means causal for a causal module, else nothing masked), boolean
    (True = attend) or additive (0 = attend)."""
    mask = applied_attention_mask(attention, mask, queries, keys, device="cpu")
    if mask is None:
        return torch.ones(queries, keys, dtype=torch.bool)
    mask = mask[0, 0] if mask.dim() == 4 else mask
    if mask.dtype == torch.bool:
        return mask.cpu()
    return (mask > torch.finfo(mask.dtype).min / 2).cpu()


def attention_values(values: dict, attention, key: tuple) -> dict:
    q, k, v = (heads(values[key + (name,)], attention) for name in ("q", "k", "v"))
    scores = torch.matmul(q, k.transpose(-2, -1)) * attention.scaling  # the scaling of equation (1), before the mask
    return {
        "q": q, "k": k, "v": v, "scores": scores,
        "mask": allowed(values[key + ("mask",)], attention, q.shape[1], k.shape[1]).int(),
        "weights": values[key + ("weights",)][0],
        "context": values[key + ("context",)][0],
        "output": values[key + ("output",)][0],
    }


def layer_values(values: dict, layer, key: tuple) -> dict:
    out = {"self_attention": attention_values(values, layer.self_attn, key + ("self_attention",))}
    cross = getattr(layer, "encoder_attn", None)
    if cross is not None:
        out["cross_attention"] = attention_values(values, cross, key + ("cross_attention",))
    out["add_norm_1"] = values[key + ("add_norm_1",)][0]
    layer_output = values[key + ("layer_output",)][0]
    # the second Add & Norm: after encoder-decoder attention, or (no such sub-layer) after the FFN: the layer output
    out["add_norm_2"] = values[key + ("add_norm_2",)][0] if cross is not None else layer_output
    out["ffn_hidden"] = values[key + ("ffn_hidden",)][0]
    out["ffn_output"] = values[key + ("ffn_output",)][0]
    out["layer_output"] = layer_output
    return out


def top_logits(logits: torch.Tensor, tokenizer, k: int) -> list[list[dict]]:
    """Per position of (L, V) logits: the k most probable tokens with their logit and softmax probability."""
    probabilities = torch.softmax(logits.float(), dim=-1)
    values, ids = probabilities.topk(min(k, probabilities.shape[-1]), dim=-1)
    rows = []
    for position in range(logits.shape[0]):
        row_ids = ids[position].tolist()
        rows.append([{"token": token, "id": i, "logit": float(logits[position, i]), "probability": float(p)}
                     for token, i, p in zip(tokenizer.convert_ids_to_tokens(row_ids), row_ids,
                                            values[position].tolist())])
    return rows


def as_lists(value):
    """Tensors as nested lists of floats (ints for the masks), recursively."""
    if isinstance(value, torch.Tensor):
        return value.tolist() if not value.is_floating_point() else value.float().tolist()
    if isinstance(value, dict):
        return {key: as_lists(item) for key, item in value.items()}
    if isinstance(value, list):
        return [as_lists(item) for item in value]
    return value


def forward_inputs(run: AttentionRun, device) -> dict:
    """The teacher-forced forward pass of the run: the same ids its attention weights were read from."""
    source = torch.tensor([run.source_ids], device=device)
    if run.configuration == "encoder-decoder":
        return {"input_ids": source, "decoder_input_ids": torch.tensor([run.decoder_input_ids], device=device),
                "use_cache": False}
    if run.configuration == "decoder-only":
        return {"input_ids": torch.tensor([run.decoder_input_ids], device=device), "use_cache": False}
    return {"input_ids": source}


def walkthrough_data(model, tokenizer, run: AttentionRun, top_k: int = LOGITS_TOP_K) -> dict:
    """The walk-through of `run`: `embeddings` ({"source"/"target": {token, position, sum}}), `encoder` and
    `decoder` (lists over layers: `self_attention`, `cross_attention`, each {q, k, v, scores, mask, weights, context,
    output}; `add_norm_1`, `add_norm_2`, `ffn_hidden`, `ffn_output`, `layer_output`), `logits` (top-k per position
    of the decoder, or of a masked language model), `normalize_before`, as JSON-ready lists.

    Shapes: q, k, v `[head][position][head_dim]`; scores, weights `[head][query][key]`; mask `[query][key]`; the
    others `[position][d_model]` (`ffn_hidden`: `[position][d_ff]`); embeddings `[position][dimension]`.
    """
    stacks = stacks_of(model, run.configuration)
    was_training = model.training
    model.eval()
    try:
        with Taps() as taps, torch.no_grad():
            tap_model(taps, stacks)
            outputs = model(**forward_inputs(run, next(model.parameters()).device), output_attentions=True)
    finally:
        model.train(was_training)
    values = taps.values
    side = {"encoder": "source", "decoder": "target"}
    result = {"normalize_before": bool(model.config.normalize_before), "embeddings": {}, "encoder": [],
              "decoder": [], "logits": []}
    for name, stack in stacks.items():
        positions = values[("embeddings", name, "position")]
        result["embeddings"][side[name]] = {
            "token": values[("embeddings", name, "token")][0] * stack.embed_scale,
            "position": positions[0] if positions.dim() == 3 else positions,
            "sum": values[("embeddings", name, "sum")][0],
        }
        result[name] = [layer_values(values, layer, (name, i)) for i, layer in enumerate(stack.layers)]
    logits = getattr(outputs, "logits", None)
    if logits is not None and logits.dim() == 3:  # a decoder's (or a masked language model's) logits per position
        result["logits"] = top_logits(logits[0], tokenizer, top_k)
    return as_lists(result)
