"""The explorer's walk-through data against oracles: each equation recomputed here from the model's weights with
torch.nn.functional (F.linear, F.layer_norm, softmax), the model's own `output_attentions` and logits, and
torch.nn.TransformerEncoderLayer / TransformerDecoderLayer with the model's weights copied in; for the three
configurations, post-LN and pre-LN, eager and sdpa attention, random weights and several seeds.
"""

import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from helpers import copy_attention, copy_encoder_layer, tiny_config
from vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
)
from vanilla_transformer.training.tokenizer import train_tokenizer

num2words = pytest.importorskip("num2words").num2words

from vanilla_transformer.inspect.data import attention_data  # noqa: E402

ATOL = 1e-4
TEXT = "three hundred and forty-two"
CLASSES = {"encoder-decoder": VanillaTransformerForConditionalGeneration, "decoder-only": VanillaTransformerForCausalLM,
           "encoder-only": VanillaTransformerForMaskedLM}


@pytest.fixture(scope="module")
def tokenizer():
    texts = [num2words(i) for i in range(400)] + [num2words(i, lang="de") for i in range(400)]
    tokenizer = train_tokenizer(texts, vocab_size=300, min_frequency=1, model_max_length=40)
    tokenizer.add_special_tokens({"mask_token": "<mask>"})
    return tokenizer


def build(configuration, tokenizer, seed, attn_implementation="sdpa", **overrides):
    torch.manual_seed(seed)
    config = tiny_config(vocab_size=len(tokenizer), **overrides)
    model = CLASSES[configuration]._from_config(config, attn_implementation=attn_implementation).eval()
    if model.can_generate():
        model.generation_config.max_length = 12
    return model


def data_for(model, tokenizer, configuration):
    if configuration == "encoder-only":
        return attention_data(model, tokenizer, "three hundred <mask> forty-two")
    return attention_data(model, tokenizer, TEXT if configuration == "encoder-decoder" else "seventeen", num_beams=1)


def forward(model, tokenizer, data, configuration):
    """The model's own forward pass over the data's tokens, with the inputs of every attention module recorded by a
    hook of this test: {module: (hidden_states, key_value_states)}."""
    ids = lambda tokens: torch.tensor([tokenizer.convert_tokens_to_ids(tokens)])  # noqa: E731
    inputs = {"input_ids": ids(data["source_tokens"])}
    if configuration == "encoder-decoder":
        inputs["decoder_input_ids"] = ids(data["decoder_input_tokens"])
    elif configuration == "decoder-only":
        inputs = {"input_ids": ids(data["decoder_input_tokens"])}
    seen, handles = {}, []
    for module in model.modules():
        if hasattr(module, "q_proj"):
            def hook(m, args, kwargs):
                seen[m] = (args[0] if args else kwargs["hidden_states"], kwargs.get("key_value_states"))
            handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        if hasattr(module, "fc2"):  # a layer: its output, its FFN's output, its LayerNorms' outputs
            for part in (module, module.fc2, module.self_attn_layer_norm, getattr(module, "encoder_attn_layer_norm", None)):
                if part is not None:
                    handles.append(part.register_forward_hook(lambda m, args, out: seen.__setitem__(m, out)))
    try:
        with torch.no_grad():
            outputs = model(**inputs, output_attentions=True)
    finally:
        for handle in handles:
            handle.remove()
    return outputs, seen


def split_heads(x, heads):
    length, d = x.shape
    return x.view(length, heads, d // heads).transpose(0, 1)


def close(ours, expected, atol=ATOL):
    expected = expected.detach() if isinstance(expected, torch.Tensor) else expected
    np.testing.assert_allclose(np.asarray(ours, dtype=np.float64), np.asarray(expected, dtype=np.float64), rtol=0,
                               atol=atol)


def check_attention(ours, attention, inputs, model_weights):
    """One attention sub-layer: Q, K, V as F.linear of its inputs, split into heads; equation (1) step by step."""
    hidden, memory = inputs
    kv = memory if memory is not None else hidden
    heads = attention.num_heads
    for name, x in (("q", hidden), ("k", kv), ("v", kv)):
        proj = getattr(attention, f"{name}_proj")
        close(ours[name], split_heads(F.linear(x[0], proj.weight, proj.bias), heads))
    q, k, v = (torch.tensor(ours[name]) for name in ("q", "k", "v"))
    scores = torch.tensor(ours["scores"])
    close(scores, q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]))
    mask = torch.tensor(ours["mask"])
    if attention.is_causal:
        assert torch.equal(mask, torch.ones_like(mask).tril())
    else:
        assert mask.all()
    softmax = torch.softmax(scores.masked_fill(mask == 0, float("-inf")), dim=-1)
    close(softmax, ours["weights"])
    close(ours["weights"], model_weights[0])  # the model's output_attentions
    context = torch.cat(list(torch.tensor(ours["weights"]) @ v), dim=-1)  # Concat(head_1, ..., head_h)
    close(ours["context"], context)
    close(ours["output"], F.linear(context, attention.out_proj.weight, attention.out_proj.bias))


def add_norm(x, sublayer, norm, pre_ln):
    """The residual stream after a sub-layer: LayerNorm(x + Sublayer(x)), or x + Sublayer(LayerNorm(x)) in pre-LN."""
    total = torch.as_tensor(x) + torch.as_tensor(sublayer)
    return total if pre_ln else F.layer_norm(total, total.shape[-1:], norm.weight, norm.bias, norm.eps)


def check_layer(ours, layer, x, seen, attentions, pre_ln):
    """One layer from its input x: the attention sub-layers, Add & Norm, the FFN (equation 2), the output; and the
    outputs of the layer, its fc2 and (post-LN) its LayerNorms as the test's own hooks saw them."""
    close(ours["ffn_output"], seen[layer.fc2][0])
    close(ours["layer_output"], seen[layer][0])
    if not pre_ln:
        close(ours["add_norm_1"], seen[layer.self_attn_layer_norm][0])
        if "cross_attention" in ours:
            close(ours["add_norm_2"], seen[layer.encoder_attn_layer_norm][0])
    check_attention(ours["self_attention"], layer.self_attn, seen[layer.self_attn], attentions[0])
    stream = add_norm(x, ours["self_attention"]["output"], layer.self_attn_layer_norm, pre_ln)
    close(ours["add_norm_1"], stream)
    if "cross_attention" in ours:
        check_attention(ours["cross_attention"], layer.encoder_attn, seen[layer.encoder_attn], attentions[1])
        stream = add_norm(stream, ours["cross_attention"]["output"], layer.encoder_attn_layer_norm, pre_ln)
        close(ours["add_norm_2"], stream)
    ffn_input = layer.final_layer_norm(stream) if pre_ln else stream
    close(ours["ffn_hidden"], F.relu(F.linear(ffn_input, layer.fc1.weight, layer.fc1.bias)))
    close(ours["ffn_output"], F.linear(torch.tensor(ours["ffn_hidden"]), layer.fc2.weight, layer.fc2.bias))
    stream = add_norm(stream, ours["ffn_output"], layer.final_layer_norm, pre_ln)
    close(ours["layer_output"], stream)
    if "cross_attention" not in ours:  # the second Add & Norm of a layer without encoder-decoder attention
        close(ours["add_norm_2"], stream)
    return torch.as_tensor(ours["layer_output"])


@pytest.mark.parametrize("configuration", list(CLASSES))
@pytest.mark.parametrize("pre_ln", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("attn_implementation", ["sdpa", "eager"])
@pytest.mark.parametrize("seed", [0, 1])
@torch.no_grad()
def test_every_step_equals_the_papers_equation_on_the_models_weights(tokenizer, configuration, pre_ln,
                                                                   attn_implementation, seed):
    model = build(configuration, tokenizer, seed, attn_implementation, normalize_before=pre_ln)
    data = data_for(model, tokenizer, configuration)
    walk = data["walkthrough"]
    outputs, seen = forward(model, tokenizer, data, configuration)
    assert walk["normalize_before"] is pre_ln
    stacks = {"encoder-decoder": ["encoder", "decoder"], "decoder-only": ["decoder"],
              "encoder-only": ["encoder"]}[configuration]
    assert [name for name in ("encoder", "decoder") if walk[name]] == stacks
    for name in stacks:
        stack = model.get_encoder() if name == "encoder" and configuration == "encoder-decoder" else \
            model.get_decoder() if name == "decoder" and configuration == "encoder-decoder" else model.model
        side = walk["embeddings"]["source" if name == "encoder" else "target"]
        tokens = data["source_tokens"] if name == "encoder" else data["decoder_input_tokens"]
        ids = torch.tensor(tokenizer.convert_tokens_to_ids(tokens))
        close(side["token"], F.embedding(ids, stack.embed_tokens.weight) * math.sqrt(model.config.d_model))
        close(side["sum"], np.add(side["token"], side["position"]))
        x = torch.tensor(side["sum"])
        if configuration == "encoder-decoder":
            weights = {"encoder": [(a,) for a in outputs.encoder_attentions],
                       "decoder": list(zip(outputs.decoder_attentions, outputs.cross_attentions))}[name]
        else:
            weights = [(a,) for a in outputs.attentions]
        assert len(walk[name]) == len(stack.layers)
        for ours, layer, attentions in zip(walk[name], stack.layers, weights):
            x = check_layer(ours, layer, x, seen, attentions, pre_ln)
    if configuration == "encoder-decoder":  # the decoder's keys and values come from the encoder's output
        close(seen[model.get_decoder().layers[0].encoder_attn][1][0], outputs.encoder_last_hidden_state[0])
    logits = outputs.logits[0]  # the model's own: top 10 per decoder (or masked-LM) position, most probable first
    assert len(walk["logits"]) == logits.shape[0]
    for position, top in enumerate(walk["logits"]):
        values, indices = logits[position].topk(len(top))
        assert [entry["id"] for entry in top] == indices.tolist() and len(top) == 10
        close([entry["logit"] for entry in top], values)
        close([entry["probability"] for entry in top], torch.softmax(logits[position], -1)[indices])
        assert [entry["token"] for entry in top] == tokenizer.convert_ids_to_tokens(indices.tolist())


def torch_layers(model):
    """torch.nn.TransformerEncoderLayer / TransformerDecoderLayer (post-LN, ReLU) with the model's weights."""
    config = model.config
    encoder_layers, decoder_layers = [], []
    with torch.no_grad():
        for ours in model.get_encoder().layers:
            theirs = nn.TransformerEncoderLayer(config.d_model, config.encoder_attention_heads, config.encoder_ffn_dim,
                                                dropout=0.0, batch_first=True)
            copy_encoder_layer(theirs, ours)
            encoder_layers.append(theirs.eval())
        for ours in model.get_decoder().layers:
            theirs = nn.TransformerDecoderLayer(config.d_model, config.decoder_attention_heads, config.decoder_ffn_dim,
                                                dropout=0.0, batch_first=True)
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.encoder_attn)
            theirs.linear1.load_state_dict(ours.fc1.state_dict())
            theirs.linear2.load_state_dict(ours.fc2.state_dict())
            theirs.norm1.load_state_dict(ours.self_attn_layer_norm.state_dict())
            theirs.norm2.load_state_dict(ours.encoder_attn_layer_norm.state_dict())
            theirs.norm3.load_state_dict(ours.final_layer_norm.state_dict())
            decoder_layers.append(theirs.eval())
    return encoder_layers, decoder_layers


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_each_layers_add_and_norm_equals_torch_transformer_layers_with_the_same_weights(tokenizer, seed):
    model = build("encoder-decoder", tokenizer, seed)
    walk = data_for(model, tokenizer, "encoder-decoder")["walkthrough"]
    encoder_layers, decoder_layers = torch_layers(model)
    x = torch.tensor(walk["embeddings"]["source"]["sum"])[None]
    with torch.no_grad():
        for ours, theirs in zip(walk["encoder"], encoder_layers):
            x = theirs(x)
            close(ours["add_norm_2"], x[0])
            close(ours["layer_output"], x[0])
        memory, y = x, torch.tensor(walk["embeddings"]["target"]["sum"])[None]
        causal = nn.Transformer.generate_square_subsequent_mask(y.shape[1])
        for ours, theirs in zip(walk["decoder"], decoder_layers):
            y = theirs(y, memory, tgt_mask=causal, tgt_is_causal=True)
            close(ours["layer_output"], y[0])


@pytest.mark.parametrize("seed", [3, 4])
def test_pre_ln_encoder_layers_equal_torch_norm_first_layers(tokenizer, seed):
    model = build("encoder-decoder", tokenizer, seed, normalize_before=True)
    walk = data_for(model, tokenizer, "encoder-decoder")["walkthrough"]
    x = torch.tensor(walk["embeddings"]["source"]["sum"])[None]
    config = model.config
    with torch.no_grad():
        for ours, layer in zip(walk["encoder"], model.get_encoder().layers):
            theirs = nn.TransformerEncoderLayer(config.d_model, config.encoder_attention_heads, config.encoder_ffn_dim,
                                                dropout=0.0, batch_first=True, norm_first=True)
            copy_encoder_layer(theirs, layer)
            x = theirs.eval()(x)
            close(ours["add_norm_2"], x[0])


def test_walkthrough_can_be_left_out(tokenizer):
    model = build("encoder-decoder", tokenizer, 0)
    assert attention_data(model, tokenizer, TEXT, num_beams=1, walkthrough=False)["walkthrough"] is None
