"""The model against oracles: torch.nn.Transformer with copied weights, the paper's formulas, full recomputation
versus the KV cache, single versus batched inputs, and save/load round trips."""

import json
import math
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch
from huggingface_hub.errors import StrictDataclassClassValidationError, StrictDataclassFieldValidationError
from torch import nn
from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM, GenerationConfig

from helpers import copy_attention, copy_encoder_layer, paper_positional_encoding, random_batch, tiny_config, tiny_model
from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    sinusoidal_position_encoding,
)

ATOL = 1e-5


# ---------------------------------------------------------------------------------------------------------------
# Configuration


def test_config_defaults_are_the_papers_base_model():
    config = VanillaTransformerConfig()
    assert (config.d_model, config.encoder_attention_heads, config.decoder_attention_heads) == (512, 8, 8)
    assert (config.encoder_ffn_dim, config.decoder_ffn_dim, config.encoder_layers, config.decoder_layers) == (
        2048, 2048, 6, 6)
    assert config.dropout == 0.1 and config.activation_function == "relu" and not config.normalize_before
    assert config.scale_embedding and config.tie_word_embeddings and config.share_encoder_decoder_embeddings
    assert config.position_embedding_type == "sinusoidal" and config.sinusoidal_layout == "interleaved"
    big = VanillaTransformerConfig.from_paper("big")
    assert (big.d_model, big.encoder_attention_heads, big.encoder_ffn_dim, big.dropout) == (1024, 16, 4096, 0.3)
    assert VanillaTransformerConfig.from_paper("base", dropout=0.2).dropout == 0.2


@pytest.mark.parametrize(
    "overrides, names",
    [
        (dict(d_model=30, encoder_attention_heads=4, decoder_attention_heads=5), ["d_model=30", "heads=4"]),
        (dict(activation_function="tanh"), ["activation_function='tanh'"]),
        (dict(dropout=-0.1), ["dropout=-0.1"]),
        (dict(attention_dropout=1.0), ["attention_dropout=1.0"]),
        (dict(encoder_layers=0), ["encoder_layers=0"]),
        (dict(sinusoidal_layout="zigzag"), ["sinusoidal_layout='zigzag'"]),
        (dict(vocab_size=100, decoder_vocab_size=120), ["vocab_size=100", "decoder_vocab_size=120"]),
        (dict(vocab_size=10, pad_token_id=12), ["pad_token_id=12"]),
    ],
)
def test_invalid_config_values_raise_the_strict_validation_error_naming_them(overrides, names):
    with pytest.raises(StrictDataclassClassValidationError) as error:
        VanillaTransformerConfig(**overrides)
    assert isinstance(error.value.__cause__, ValueError)  # raised by our validate_architecture hook
    for name in names:
        assert name in str(error.value)
    with pytest.raises(ValueError, match="Unknown paper configuration"):
        VanillaTransformerConfig.from_paper("huge")


def test_one_config_error_lists_every_problem():
    with pytest.raises(StrictDataclassClassValidationError, match="validate_architecture") as error:
        VanillaTransformerConfig(d_model=30, dropout=1.5, activation_function="tanh", normalise_before=True)
    message = str(error.value.__cause__)
    assert message.startswith("Invalid VanillaTransformerConfig: ") and message.count("; ") == 4
    for part in ("d_model=30 is not divisible by encoder_attention_heads=8", "dropout=1.5 must be in [0, 1)",
                 "activation_function='tanh'", "normalise_before is not a field (did you mean normalize_before?)"):
        assert part in message


def test_a_value_of_the_wrong_type_is_a_strict_field_error():
    for name, value in (("d_model", "512"), ("normalize_before", "yes"), ("encoder_layers", 6.0)):
        with pytest.raises(StrictDataclassFieldValidationError, match=f"field '{name}'"):
            VanillaTransformerConfig(**{name: value})


@pytest.mark.parametrize("typo, meant", [
    ("normalise_before", "normalize_before"), ("d_modle", "d_model"), ("encoder_layer", "encoder_layers"),
    ("sinusoidal_layuot", "sinusoidal_layout"), ("share_encoder_decoder_embedding", "share_encoder_decoder_embeddings"),
])
def test_a_misspelled_field_is_an_error_in_the_constructor_in_config_json_and_at_save(typo, meant, tmp_path):
    with pytest.raises(StrictDataclassClassValidationError, match=rf"{typo} is not a field \(did you mean {meant}"):
        VanillaTransformerConfig(**{typo: 1})
    config = tiny_config()
    config.save_pretrained(tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**values, typo: values[meant]}))
    with pytest.raises(StrictDataclassClassValidationError, match=f"did you mean {meant}"):
        AutoConfig.from_pretrained(tmp_path)
    setattr(config, typo, 1)  # set after construction: save_pretrained validates too
    with pytest.raises(StrictDataclassClassValidationError, match=f"did you mean {meant}"):
        config.save_pretrained(tmp_path / "again")


def test_config_json_keeps_loading_with_standard_keys_unknown_keys_and_ints_for_floats(tmp_path):
    config = tiny_config(dropout=0.2, layer_norm_eps=1e-6, init_std=0.05)
    config.save_pretrained(tmp_path)
    values = json.loads((tmp_path / "config.json").read_text())
    extras = dict(architectures=["VanillaTransformerForConditionalGeneration"], transformers_version="5.4.0",
                  _name_or_path="someone/model", id2label={"0": "A", "1": "B"}, task_specific_params={"x": {}},
                  sep_token_id=3, unk_token_id=4, num_beams=4, max_length=40, torch_dtype="float32",
                  custom_pipelines={}, tokenizer_class="PreTrainedTokenizerFast", remote_code_extra="kept")
    ints_for_floats = dict(dropout=0, attention_dropout=0, activation_dropout=0, layer_norm_eps=1, init_std=1)
    (tmp_path / "config.json").write_text(json.dumps({**values, **extras, **ints_for_floats}))
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert isinstance(loaded, VanillaTransformerConfig)
    assert (loaded.dropout, loaded.layer_norm_eps, loaded.init_std) == (0, 1, 1)
    assert loaded.remote_code_extra == "kept" and loaded.sep_token_id == 3
    assert (loaded.d_model, loaded.encoder_layers, loaded.vocab_size) == (config.d_model, config.encoder_layers,
                                                                          config.vocab_size)
    # every generation parameter an old config.json may carry is accepted (transformers moves them out)
    generation = GenerationConfig(num_beams=4, max_length=40).to_dict()
    fields = VanillaTransformerConfig.__dataclass_fields__
    VanillaTransformerConfig(**{k: v for k, v in generation.items() if k not in fields})


def test_auto_classes_know_the_model():
    values = {k: v for k, v in tiny_config().to_diff_dict().items() if k != "model_type"}
    config = AutoConfig.for_model("vanilla_transformer", **values)
    assert isinstance(config, VanillaTransformerConfig)
    assert isinstance(AutoModel.from_config(config), VanillaTransformerModel)
    assert isinstance(AutoModelForSeq2SeqLM.from_config(config), VanillaTransformerForConditionalGeneration)


# ---------------------------------------------------------------------------------------------------------------
# Section 3.5: positional encoding, against the paper's formula written out independently.


def test_sinusoidal_encoding_is_the_papers_formula_for_any_length():
    ours = sinusoidal_position_encoding(torch.arange(300), 32).numpy()
    np.testing.assert_allclose(ours, paper_positional_encoding(300, 32), atol=1e-12)
    # The model adds it for inputs longer than max_position_embeddings (64 here) too.
    model = tiny_model()
    ids = torch.randint(3, 53, (1, 100))
    hidden = model.model.encoder(ids, output_hidden_states=True).hidden_states[0]
    expected = model.model.shared(ids) * math.sqrt(32) + torch.tensor(paper_positional_encoding(100, 32)).float()
    torch.testing.assert_close(hidden, expected, atol=1e-5, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Architecture oracle: torch.nn.TransformerEncoder/Decoder (post-LN, ReLU) with our weights copied in.


def torch_stacks_with_our_weights(model: VanillaTransformerForConditionalGeneration):
    config = model.config
    d = config.d_model
    encoder = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(d, config.encoder_attention_heads, config.encoder_ffn_dim, dropout=0.0,
                                   activation="relu", batch_first=True, norm_first=False),
        config.encoder_layers, enable_nested_tensor=False,
    )
    decoder = nn.TransformerDecoder(
        nn.TransformerDecoderLayer(d, config.decoder_attention_heads, config.decoder_ffn_dim, dropout=0.0,
                                   activation="relu", batch_first=True, norm_first=False),
        config.decoder_layers,
    )
    with torch.no_grad():
        for theirs, ours in zip(encoder.layers, model.model.encoder.layers):
            copy_encoder_layer(theirs, ours)
        for theirs, ours in zip(decoder.layers, model.model.decoder.layers):
            copy_attention(theirs.self_attn, ours.self_attn)
            copy_attention(theirs.multihead_attn, ours.encoder_attn)
            theirs.linear1.load_state_dict(ours.fc1.state_dict())
            theirs.linear2.load_state_dict(ours.fc2.state_dict())
            theirs.norm1.load_state_dict(ours.self_attn_layer_norm.state_dict())
            theirs.norm2.load_state_dict(ours.encoder_attn_layer_norm.state_dict())
            theirs.norm3.load_state_dict(ours.final_layer_norm.state_dict())
    return encoder.eval(), decoder.eval()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_encoder_and_decoder_match_torch_transformer(seed, attn_implementation):
    model = tiny_model(seed, attn_implementation)
    encoder, decoder = torch_stacks_with_our_weights(model)
    input_ids, attention_mask = random_batch(seed)
    decoder_input_ids, decoder_mask = random_batch(seed + 100, length=7)
    embed = model.model.shared
    src = embed(input_ids) * math.sqrt(32) + torch.tensor(paper_positional_encoding(9, 32)).float()
    tgt = embed(decoder_input_ids) * math.sqrt(32) + torch.tensor(paper_positional_encoding(7, 32)).float()

    with torch.no_grad():
        memory = encoder(src, src_key_padding_mask=attention_mask == 0)
        causal = nn.Transformer.generate_square_subsequent_mask(7)
        expected = decoder(tgt, memory, tgt_mask=causal, tgt_is_causal=True, memory_key_padding_mask=attention_mask == 0)
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)

    keep = attention_mask.bool()
    torch.testing.assert_close(out.encoder_last_hidden_state[keep], memory[keep], atol=ATOL, rtol=0)
    # decoder: the target rows are compared whole (padding in the target only follows the real tokens)
    hidden = model.model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    torch.testing.assert_close(hidden.last_hidden_state, expected, atol=ATOL, rtol=0)
    # the output projection is the embedding matrix (section 3.4)
    torch.testing.assert_close(out.logits, expected @ embed.weight.T, atol=ATOL, rtol=0)


def test_pre_layer_norm_matches_torch_transformer_norm_first(seed):
    model = tiny_model(seed, normalize_before=True)
    config = model.config
    layer = nn.TransformerEncoderLayer(32, 4, 64, dropout=0.0, batch_first=True, norm_first=True)
    encoder = nn.TransformerEncoder(layer, 2, norm=nn.LayerNorm(32), enable_nested_tensor=False).eval()
    with torch.no_grad():
        for theirs, ours in zip(encoder.layers, model.model.encoder.layers):
            copy_encoder_layer(theirs, ours)
        encoder.norm.load_state_dict(model.model.encoder.layer_norm.state_dict())
        input_ids, attention_mask = random_batch(seed)
        src = model.model.shared(input_ids) * math.sqrt(config.d_model)
        src = src + torch.tensor(paper_positional_encoding(9, 32)).float()
        expected = encoder(src, src_key_padding_mask=attention_mask == 0)
        ours = model.model.encoder(input_ids, attention_mask=attention_mask).last_hidden_state
    keep = attention_mask.bool()
    torch.testing.assert_close(ours[keep], expected[keep], atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Decoding: the cache, greedy search, beam search, sampling.


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_cache_matches_full_recompute(seed, attn_implementation):
    model = tiny_model(seed, attn_implementation)
    input_ids, attention_mask = random_batch(seed)
    decoder_input_ids = torch.randint(3, 53, (3, 8), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        past, steps = None, []
        # a two-token prefix, a three-token chunk on top of the cache, then one token per step
        for start, end in [(0, 2), (2, 5), (5, 6), (6, 7), (7, 8)]:
            out = model(encoder_outputs=encoder_outputs, attention_mask=attention_mask,
                        decoder_input_ids=decoder_input_ids[:, start:end], past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(out.logits)
    assert past.get_seq_length() == 8
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def argmax_loop_without_cache(model, input_ids, attention_mask, max_new_tokens):
    """Greedy decoding as the paper describes it, recomputing the whole decoder at every step."""
    config = model.config
    sequences = torch.full((input_ids.shape[0], 1), config.decoder_start_token_id)
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=sequences,
                       use_cache=False).logits[:, -1]
        next_tokens = logits.argmax(-1).masked_fill(finished, config.pad_token_id)
        sequences = torch.cat([sequences, next_tokens[:, None]], dim=1)
        finished |= next_tokens == config.eos_token_id
        if finished.all():
            break
    return sequences


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_greedy_generate_equals_argmax_loop_without_cache(seed, attn_implementation):
    # eos 5 is an ordinary-looking id, so random models stop at different steps in different rows
    model = tiny_model(seed, attn_implementation, eos_token_id=5)
    input_ids, attention_mask = random_batch(seed)
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1,
                                   do_sample=False, max_new_tokens=12)
        expected = argmax_loop_without_cache(model, input_ids, attention_mask, 12)
    assert torch.equal(generated, expected)


def test_beam_search_with_cache_equals_beam_search_without(seed):
    model = tiny_model(seed, eos_token_id=5)
    input_ids, attention_mask = random_batch(seed)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=4, num_return_sequences=3,
                  max_new_tokens=10, return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        cached = model.generate(**kwargs, use_cache=True)
        uncached = model.generate(**kwargs, use_cache=False)
    assert cached.sequences.shape[0] == 3 * 3
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=0)
    scores = cached.sequences_scores.view(3, 3)
    assert torch.all(scores[:, :-1] >= scores[:, 1:])  # best hypothesis first


def test_generate_defaults_to_the_papers_beam_search():
    model = tiny_model()
    assert model.generation_config.num_beams == 4
    assert model.generation_config.length_penalty == 0.6
    input_ids, attention_mask = random_batch(0)
    with torch.no_grad():
        default = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6)
        explicit = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=6,
                                  num_beams=4, length_penalty=0.6)
    assert torch.equal(default, explicit)


def test_sampling_is_reproducible_with_a_seed():
    model = tiny_model(1)
    input_ids, attention_mask = random_batch(1)
    outputs = []
    for _ in range(2):
        torch.manual_seed(123)
        with torch.no_grad():
            outputs.append(model.generate(input_ids=input_ids, attention_mask=attention_mask, do_sample=True,
                                          num_beams=1, top_k=10, max_new_tokens=8))
    assert torch.equal(outputs[0], outputs[1])
    assert outputs[0].shape[1] <= 9


# ---------------------------------------------------------------------------------------------------------------
# Padding invariance: a padded row in a batch behaves as that row alone.


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_padding_does_not_change_outputs(seed, attn_implementation):
    model = tiny_model(seed, attn_implementation, eos_token_id=5)
    input_ids, attention_mask = random_batch(seed)
    decoder_input_ids = torch.randint(3, 53, (3, 6), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        batched = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        greedy = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1, max_new_tokens=8)
        beam = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=3, max_new_tokens=8)
        for row in range(3):
            length = int(attention_mask[row].sum())
            alone_ids = input_ids[row : row + 1, :length]
            alone = model(input_ids=alone_ids, decoder_input_ids=decoder_input_ids[row : row + 1]).logits
            torch.testing.assert_close(batched[row : row + 1], alone, atol=ATOL, rtol=0)
            for batched_generation, kwargs in ((greedy, dict(num_beams=1)), (beam, dict(num_beams=3))):
                single = model.generate(input_ids=alone_ids, max_new_tokens=8, **kwargs)[0]
                row_output = batched_generation[row][: single.shape[0]]
                assert torch.equal(row_output, single)
                assert torch.all(batched_generation[row][single.shape[0] :] == model.config.pad_token_id)


# ---------------------------------------------------------------------------------------------------------------
# Attention implementations, outputs, gradient checkpointing, embeddings.


def test_eager_and_sdpa_agree_and_attention_weights_are_distributions(seed):
    eager = tiny_model(seed, "eager")
    sdpa = tiny_model(seed, "sdpa")
    input_ids, attention_mask = random_batch(seed)
    decoder_input_ids = torch.randint(3, 53, (3, 5))
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids)
    with torch.no_grad():
        out_eager = eager(**kwargs, output_attentions=True, output_hidden_states=True)
        out_sdpa = sdpa(**kwargs, output_attentions=True, output_hidden_states=True)
    torch.testing.assert_close(out_eager.logits, out_sdpa.logits, atol=ATOL, rtol=0)
    assert len(out_sdpa.encoder_attentions) == 2 and len(out_sdpa.decoder_attentions) == 3
    assert len(out_sdpa.cross_attentions) == 3
    assert len(out_sdpa.encoder_hidden_states) == 3 and len(out_sdpa.decoder_hidden_states) == 4
    for a, b in zip(out_eager.cross_attentions, out_sdpa.cross_attentions):
        torch.testing.assert_close(a, b, atol=ATOL, rtol=0)
    cross = out_sdpa.cross_attentions[0]  # (B, H, T, S)
    assert cross.shape == (3, 4, 5, 9)
    torch.testing.assert_close(cross.sum(-1), torch.ones(3, 4, 5), atol=1e-5, rtol=0)
    assert torch.all(cross.masked_select(attention_mask[:, None, None, :] == 0) == 0)  # no weight on padding
    self_attention = out_sdpa.decoder_attentions[0]
    assert torch.all(self_attention.triu(diagonal=1) == 0)  # no weight on the future


def test_tuple_outputs_with_return_dict_false():
    model = tiny_model()
    input_ids, attention_mask = random_batch(0)
    with torch.no_grad():
        as_dict = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :4])
        as_tuple = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :4],
                         return_dict=False)
    assert isinstance(as_tuple, tuple)
    torch.testing.assert_close(as_tuple[0], as_dict.logits)


def test_gradient_checkpointing_gives_the_same_gradients():
    torch.manual_seed(0)
    input_ids, attention_mask = random_batch(3)
    labels = torch.randint(3, 53, (3, 6))
    grads = []
    for checkpointing in (False, True):
        model = tiny_model(4).train()
        if checkpointing:
            # the name since transformers 5.24; the older one still works there, with a FutureWarning
            enable = getattr(model, "activation_checkpointing_enable", None) or model.gradient_checkpointing_enable
            enable()
        calls = []
        model.model.encoder.layers[0].self_attn.register_forward_hook(lambda *args: calls.append(1))
        loss = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
        loss.backward()
        assert len(calls) == (2 if checkpointing else 1)  # recomputed in the backward pass
        grads.append({n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None})
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 20
    for name in grads[0]:
        torch.testing.assert_close(grads[0][name], grads[1][name], atol=1e-6, rtol=1e-5, msg=name)


def test_loss_is_cross_entropy_of_shifted_labels_ignoring_minus_100():
    model = tiny_model(2)
    input_ids, attention_mask = random_batch(2)
    labels = torch.randint(3, 53, (3, 6))
    labels[1, 4:] = -100
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    decoder_input_ids = torch.cat([torch.full((3, 1), 1), labels[:, :-1].clamp(min=0)], dim=1)
    logits = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    keep = labels != -100
    expected = nn.functional.cross_entropy(logits[keep], labels[keep])
    torch.testing.assert_close(out.loss, expected)


def test_loss_over_split_batches_with_num_items_in_batch_sums_to_the_whole_batch_loss(seed):
    """Trainer passes the target tokens of the whole optimizer step as `num_items_in_batch`; the losses of the
    micro-batches (gradient accumulation) then add up to the mean loss of the whole batch."""
    model = tiny_model(seed)
    input_ids, attention_mask = random_batch(seed, batch=4)
    labels = torch.randint(3, 53, (4, 6), generator=torch.Generator().manual_seed(seed))
    labels[1, 3:] = -100
    labels[2, 5:] = -100
    whole = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels).loss
    items = int((labels != -100).sum())
    parts = [model(input_ids=input_ids[rows], attention_mask=attention_mask[rows], labels=labels[rows],
                   num_items_in_batch=torch.tensor(items)).loss for rows in (slice(0, 2), slice(2, 4))]
    torch.testing.assert_close(parts[0] + parts[1], whole, atol=1e-5, rtol=0)
    assert not torch.allclose(parts[0], whole, atol=1e-3)  # each part alone is not the mean


def test_forward_keyword_arguments_reach_the_attention_function(seed):
    """A registered attention function (transformers' AttentionInterface) gets the masks of its kind and whatever
    keyword arguments the caller gave `forward`, in every self- and encoder-decoder attention."""
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.integrations.sdpa_attention import sdpa_attention_forward
    from transformers.masking_utils import sdpa_mask

    seen = []

    def recording_attention(module, query, key, value, attention_mask, **kwargs):
        seen.append((module.layer_idx, module.is_cross_attention, kwargs.get("trace_tag")))
        return sdpa_attention_forward(module, query, key, value, attention_mask, **kwargs)

    AttentionInterface.register("recording_test", recording_attention)
    AttentionMaskInterface.register("recording_test", sdpa_mask)
    recording, sdpa = tiny_model(seed, "recording_test"), tiny_model(seed, "sdpa")
    input_ids, attention_mask = random_batch(seed)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :5])
    with torch.no_grad():
        recorded = recording(**kwargs, trace_tag="from the caller").logits
        expected = sdpa(**kwargs).logits
    torch.testing.assert_close(recorded, expected, atol=ATOL, rtol=0)
    config = recording.config
    assert sorted(seen) == sorted([(i, False, "from the caller") for i in range(config.encoder_layers)]
                                  + [(i, cross, "from the caller") for i in range(config.decoder_layers)
                                     for cross in (False, True)])


def test_embeddings_are_shared_and_resizing_keeps_them_tied():
    model = tiny_model()
    shared = model.model.shared
    assert model.model.encoder.embed_tokens is shared and model.model.decoder.embed_tokens is shared
    assert model.lm_head.weight is shared.weight
    old = shared.weight.detach().clone()
    model.resize_token_embeddings(60)
    assert model.config.vocab_size == 60 and model.lm_head.weight.shape == (60, 32)
    assert model.lm_head.weight is model.model.shared.weight is model.model.decoder.embed_tokens.weight
    torch.testing.assert_close(model.model.shared.weight[:53], old)
    input_ids = torch.randint(3, 60, (2, 5))
    assert model(input_ids=input_ids, decoder_input_ids=input_ids).logits.shape == (2, 5, 60)


# ---------------------------------------------------------------------------------------------------------------
# Saving and loading.


VARIANTS = {
    "paper": {},
    "untied_output": dict(tie_word_embeddings=False),
    "separate_vocabularies": dict(share_encoder_decoder_embeddings=False, decoder_vocab_size=41),
    "pre_ln_learned_positions": dict(normalize_before=True, position_embedding_type="learned"),
    "marian_like": dict(activation_function="swish", sinusoidal_layout="concatenated", add_final_logits_bias=True,
                        sinusoidal_frequencies="tensor2tensor", position_offset=2),
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_save_and_auto_load_reproduce_logits_exactly(tmp_path, variant):
    model = tiny_model(7, **VARIANTS[variant])
    if model.final_logits_bias is not None:
        model.final_logits_bias.normal_()
    input_ids, attention_mask = random_batch(7)
    decoder_input_ids = torch.randint(3, 41, (3, 5))
    model.save_pretrained(tmp_path)
    assert (tmp_path / "model.safetensors").exists()
    assert (tmp_path / "modeling_vanilla_transformer.py").exists()
    assert (tmp_path / "configuration_vanilla_transformer.py").exists()
    loaded = AutoModelForSeq2SeqLM.from_pretrained(tmp_path).eval()
    assert type(loaded) is VanillaTransformerForConditionalGeneration
    with torch.no_grad():
        before = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        after = loaded(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
    assert torch.equal(before, after)
    tied = loaded.lm_head.weight is loaded.model.decoder.embed_tokens.weight
    assert tied == loaded.config.tie_word_embeddings
    assert loaded.generation_config.num_beams == 4


FRESH_PROCESS = textwrap.dedent(
    """
    import sys, importlib.abc, json
    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ("vanilla_transformer", "training"):
                raise ImportError("blocked: " + name)
    sys.meta_path.insert(0, Block())
    try:
        import vanilla_transformer
    except ImportError:
        pass
    else:
        raise SystemExit("the package must not be importable here")
    import torch
    from transformers import AutoConfig, AutoModelForSeq2SeqLM
    folder, inputs = sys.argv[1], torch.load(sys.argv[2])
    config = AutoConfig.from_pretrained(folder, trust_remote_code=True)
    model = AutoModelForSeq2SeqLM.from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules"), type(model).__module__
    with torch.no_grad():
        logits = model(**inputs).logits
        generated = model.generate(input_ids=inputs["input_ids"], attention_mask=inputs["attention_mask"],
                                   max_new_tokens=6)
    torch.save({"logits": logits, "generated": generated, "model_type": config.model_type}, sys.argv[3])
    """
)


@pytest.mark.slow  # a fresh interpreter
def test_fresh_process_without_the_package_loads_the_folder_with_remote_code(tmp_path):
    model = tiny_model(11)
    input_ids, attention_mask = random_batch(11)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :4])
    model.save_pretrained(tmp_path / "model")
    torch.save(inputs, tmp_path / "inputs.pt")
    (tmp_path / "check.py").write_text(FRESH_PROCESS)
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(HF_HUB_OFFLINE="1", HF_MODULES_CACHE=str(tmp_path / "modules"))
    result = subprocess.run(
        [sys.executable, str(tmp_path / "check.py"), str(tmp_path / "model"), str(tmp_path / "inputs.pt"),
         str(tmp_path / "out.pt")],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    out = torch.load(tmp_path / "out.pt")
    with torch.no_grad():
        assert torch.equal(out["logits"], model(**inputs).logits)
        assert torch.equal(out["generated"], model.generate(input_ids=input_ids, attention_mask=attention_mask,
                                                            max_new_tokens=6))
    assert out["model_type"] == "vanilla_transformer"


# ---------------------------------------------------------------------------------------------------------------
# Bad input.


def test_token_id_outside_vocabulary_raises_value_error_naming_it():
    model = tiny_model()
    input_ids, attention_mask = random_batch(0)
    input_ids[1, 2] = 53
    with pytest.raises(ValueError, match=r"token id 53.*vocabulary of 53 tokens"):
        model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :3])
    with pytest.raises(ValueError, match=r"token id -4"):
        model(input_ids=input_ids.clamp(max=52), decoder_input_ids=torch.tensor([[1, -4]]).expand(3, 2))
    with pytest.raises(ValueError, match=r"labels contains token id 99"):
        model(input_ids=input_ids.clamp(max=52), labels=torch.tensor([[4, 99, -100]] * 3))
    with pytest.raises(ValueError, match=r"token id 1000"):
        model.generate(input_ids=torch.tensor([[4, 1000, 2]]), max_new_tokens=3)


@pytest.mark.parametrize("num_beams", [1, 3])
def test_token_ids_are_looked_at_where_a_sequence_starts_not_at_each_generated_token(monkeypatch, num_beams):
    """Looking at ids is a device sync on an accelerator: generate looks at the user's source and the decoder's first
    input, not at the tokens the model predicted itself (the shapes are still checked at every step)."""
    import vanilla_transformer.modeling_vanilla_transformer as modeling

    looked = []
    check = modeling.check_token_ids

    def recording_check(ids, vocab_size, name, values=True):
        looked.append((name, values))
        return check(ids, vocab_size, name, values)

    monkeypatch.setattr(modeling, "check_token_ids", recording_check)
    model = tiny_model(2)
    input_ids, attention_mask = random_batch(2)
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=5,
                                   min_new_tokens=5, num_beams=num_beams)
    assert generated.shape[1] == 6
    assert looked == [("input_ids", True), ("decoder_input_ids", True)] + [("decoder_input_ids", False)] * 4


def test_attention_mask_of_the_wrong_shape_raises_a_clear_error():
    model = tiny_model()
    input_ids, attention_mask = random_batch(0)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 8\).*shape \(3, 9\)"):
        model(input_ids=input_ids, attention_mask=attention_mask[:, :8], decoder_input_ids=input_ids[:, :2])
    with pytest.raises(ValueError, match=r"decoder_attention_mask has shape"):
        model(input_ids=input_ids, decoder_input_ids=input_ids[:, :2], decoder_attention_mask=attention_mask)
    with pytest.raises(ValueError, match=r"input_ids must have shape \(batch_size, sequence_length\)"):
        model(input_ids=input_ids[0], decoder_input_ids=input_ids[:, :2])


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_row_with_all_zero_attention_mask_gives_finite_outputs(attn_implementation, dtype):
    model = tiny_model(5, attn_implementation).to(dtype)
    input_ids, attention_mask = random_batch(5)
    attention_mask[2] = 0
    decoder_mask = torch.ones(3, 4, dtype=torch.long)
    decoder_mask[1] = 0
    with torch.no_grad():
        out = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=input_ids[:, :4],
                    decoder_attention_mask=decoder_mask)
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, max_new_tokens=4)
        alone = model(input_ids=input_ids[:1], attention_mask=attention_mask[:1], decoder_input_ids=input_ids[:1, :4])
    assert torch.isfinite(out.logits).all() and torch.isfinite(out.encoder_last_hidden_state).all()
    assert generated.shape[0] == 3
    # the fully masked row does not disturb the others
    torch.testing.assert_close(out.logits[:1].float(), alone.logits.float(), atol=1e-5 if dtype == torch.float32 else 0.1, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# d_k apart from d_v (Table 3, row B): `attention_key_dim`


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_a_narrower_key_dim_computes_multi_head_attention_per_head_as_torch_does(seed, attn_implementation):
    """Queries and keys of d_k = 3 per head, values of d_v = d_model / heads = 8: each head is torch's
    scaled_dot_product_attention (which scales by 1 / sqrt of the queries' width) of its own slices, concatenated and
    projected by W^O."""
    model = tiny_model(seed, attn_implementation, attention_key_dim=3)
    attention = model.model.encoder.layers[0].self_attn
    assert attention.q_proj.weight.shape == attention.k_proj.weight.shape == (4 * 3, 32)
    assert attention.v_proj.weight.shape == attention.out_proj.weight.shape == (32, 32)
    x = torch.randn(2, 5, 32, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        ours, _ = attention(x)
        q, k, v = attention.q_proj(x), attention.k_proj(x), attention.v_proj(x)
        heads = [torch.nn.functional.scaled_dot_product_attention(q[..., 3 * h:3 * h + 3], k[..., 3 * h:3 * h + 3],
                                                                  v[..., 8 * h:8 * h + 8]) for h in range(4)]
        expected = attention.out_proj(torch.cat(heads, dim=-1))
    torch.testing.assert_close(ours, expected, atol=ATOL, rtol=0)


def test_a_narrower_key_dim_decodes_with_the_cache_as_without_and_counts_its_parameters(seed):
    model = tiny_model(seed, eos_token_id=5, attention_key_dim=2)
    input_ids, attention_mask = random_batch(seed)
    with torch.no_grad():
        generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1,
                                   do_sample=False, max_new_tokens=12)
    assert torch.equal(generated, argmax_loop_without_cache(model, input_ids, attention_mask, 12))
    # W^Q and W^K (weights and biases) of the 2 + 2 * 3 attention modules shrink from 32 to 4 * 2 outputs each
    full = tiny_model(seed).num_parameters()
    assert full - model.num_parameters() == 8 * 2 * (32 - 8) * (32 + 1)
    with pytest.raises(StrictDataclassClassValidationError, match="attention_key_dim=0 must be positive"):
        tiny_config(attention_key_dim=0)
