"""The other two configurations built from the same blocks and config: the decoder-only language model and the
encoder-only classifier and masked language model, against oracles (torch.nn.TransformerEncoder with a causal mask,
the encoder-decoder model's own encoder, full recomputation, argmax loops, rows alone), and through transformers'
Auto classes, generate, pipelines, save/load and remote code."""

import math

import pytest
import torch
from torch import nn
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

from helpers import copy_encoder_layer, paper_positional_encoding, random_batch, tiny_config
from vanilla_transformer import (
    VanillaTransformerConfig,
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
)

ATOL = 1e-5


def tiny(model_class, seed: int = 0, attn_implementation: str = "sdpa", **overrides):
    """A random tiny model of `model_class` from conftest's config (2 encoder layers, 3 decoder layers, d_model 32)."""
    torch.manual_seed(seed)
    return model_class._from_config(tiny_config(**overrides), attn_implementation=attn_implementation).eval()


# ---------------------------------------------------------------------------------------------------------------
# The class chosen is the configuration.


def test_one_config_builds_each_configuration_from_its_own_fields():
    config = tiny_config(encoder_layers=2, decoder_layers=3, encoder_ffn_dim=48, decoder_ffn_dim=80,
                         encoder_attention_heads=4, decoder_attention_heads=2, num_labels=3)
    assert config.is_encoder_decoder  # the default stays the paper's model
    causal = AutoModelForCausalLM.from_config(config)
    masked = AutoModelForMaskedLM.from_config(config)
    classifier = AutoModelForSequenceClassification.from_config(config)
    seq2seq = AutoModelForSeq2SeqLM.from_config(config)
    assert type(causal) is VanillaTransformerForCausalLM
    assert type(masked) is VanillaTransformerForMaskedLM
    assert type(classifier) is VanillaTransformerForSequenceClassification
    assert type(seq2seq) is VanillaTransformerForConditionalGeneration
    assert config.is_encoder_decoder  # the models copied it; the given config is unchanged
    for model in (causal, masked, classifier):
        assert model.config.is_encoder_decoder is False

    # decoder-only: decoder fields, no encoder-decoder attention, projection tied to the embedding
    assert len(causal.model.layers) == 3
    layer = causal.model.layers[0]
    assert layer.encoder_attn is None and layer.fc1.out_features == 80
    assert layer.self_attn.num_heads == 2
    assert not any("encoder_attn" in name for name, _ in causal.named_parameters())
    assert causal.lm_head.weight is causal.model.embed_tokens.weight
    # encoder-only: encoder fields
    for model in (masked, classifier):
        assert len(model.model.layers) == 2
        assert model.model.layers[0].fc1.out_features == 48
        assert model.model.layers[0].self_attn.num_heads == 4
    assert masked.lm_head.weight is masked.model.embed_tokens.weight
    assert classifier.classifier.out_features == 3
    # the paper's presets keep meaning the encoder-decoder
    assert VanillaTransformerConfig.from_paper("base").is_encoder_decoder


def test_a_model_built_from_a_translation_checkpoints_config_records_only_its_own_class(tmp_path):
    tiny(VanillaTransformerForConditionalGeneration).save_pretrained(tmp_path / "seq2seq")
    config = AutoConfig.from_pretrained(tmp_path / "seq2seq")
    assert "AutoModelForSeq2SeqLM" in config.auto_map
    for auto_class, model_class in ((AutoModelForCausalLM, VanillaTransformerForCausalLM),
                                    (AutoModelForSequenceClassification, VanillaTransformerForSequenceClassification)):
        folder = tmp_path / model_class.__name__
        auto_class.from_config(config).save_pretrained(folder)
        saved = AutoConfig.from_pretrained(folder)
        assert saved.architectures == [model_class.__name__]
        assert set(saved.auto_map) == {"AutoConfig", auto_class.__name__}
        assert not saved.is_encoder_decoder and "custom_pipelines" not in saved.to_dict()
        assert type(auto_class.from_pretrained(folder)) is model_class


def test_decoder_only_reads_a_separate_target_vocabulary():
    config = tiny_config(vocab_size=40, decoder_vocab_size=30, share_encoder_decoder_embeddings=False)
    causal = VanillaTransformerForCausalLM(config)
    masked = VanillaTransformerForMaskedLM(config)
    assert causal.model.embed_tokens.num_embeddings == 30 and causal.lm_head.out_features == 30
    assert masked.model.embed_tokens.num_embeddings == 40 and masked.lm_head.out_features == 40


# ---------------------------------------------------------------------------------------------------------------
# Oracles: torch.nn.TransformerEncoder with a causal mask; the encoder-decoder model's encoder.


def torch_decoder_only_stack(model: VanillaTransformerForCausalLM) -> nn.TransformerEncoder:
    """A decoder layer without encoder-decoder attention is torch's encoder layer run with a causal mask."""
    config = model.config
    stack = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(config.d_model, config.decoder_attention_heads, config.decoder_ffn_dim,
                                   dropout=0.0, activation="relu", batch_first=True, norm_first=False),
        config.decoder_layers, enable_nested_tensor=False,
    )
    for theirs, ours in zip(stack.layers, model.model.layers):
        copy_encoder_layer(theirs, ours)
    return stack.eval()


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_decoder_only_stack_matches_torch_transformer_encoder_with_causal_mask(seed, attn_implementation):
    model = tiny(VanillaTransformerForCausalLM, seed, attn_implementation)
    stack = torch_decoder_only_stack(model)
    input_ids, attention_mask = random_batch(seed)  # right-padded rows of different lengths
    embed = model.model.embed_tokens
    x = embed(input_ids) * math.sqrt(32) + torch.tensor(paper_positional_encoding(9, 32)).float()
    with torch.no_grad():
        causal = torch.ones(9, 9, dtype=torch.bool).triu(diagonal=1)  # True: may not attend
        expected = stack(x, mask=causal, is_causal=True, src_key_padding_mask=attention_mask == 0)
        ours = model.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        logits = model(input_ids=input_ids, attention_mask=attention_mask).logits
    keep = attention_mask.bool()
    torch.testing.assert_close(ours[keep], expected[keep], atol=ATOL, rtol=0)
    torch.testing.assert_close(logits[keep], expected[keep] @ embed.weight.T, atol=ATOL, rtol=0)


@pytest.mark.parametrize("model_class", [VanillaTransformerForMaskedLM, VanillaTransformerForSequenceClassification])
def test_encoder_only_stack_is_the_encoder_decoder_models_encoder(seed, model_class):
    seq2seq = tiny(VanillaTransformerForConditionalGeneration, seed)
    encoder_only = tiny(model_class, seed + 10)
    weights = {f"model.{name}": value for name, value in seq2seq.model.encoder.state_dict().items()}
    missing, unexpected = encoder_only.load_state_dict(weights, strict=False)
    assert not unexpected and all(not name.startswith("model.") for name in missing)
    input_ids, attention_mask = random_batch(seed)
    with torch.no_grad():
        expected = seq2seq.get_encoder()(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        ours = encoder_only(input_ids=input_ids, attention_mask=attention_mask, output_hidden_states=True)
    keep = attention_mask.bool()
    torch.testing.assert_close(ours.hidden_states[-1][keep], expected[keep], atol=0, rtol=0)
    if model_class is VanillaTransformerForSequenceClassification:  # the mean over each row's tokens
        pooled = torch.stack([expected[row][keep[row]].mean(0) for row in range(3)])
        torch.testing.assert_close(ours.logits, encoder_only.classifier(pooled), atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Decoding: the cache, greedy search, beam search, sampling, left padding.


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_decoder_only_cache_matches_full_recompute(seed, attn_implementation):
    model = tiny(VanillaTransformerForCausalLM, seed, attn_implementation)
    input_ids = torch.randint(3, 53, (3, 8), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        full = model(input_ids=input_ids, use_cache=False).logits
        past, steps = None, []
        for start, end in [(0, 2), (2, 5), (5, 6), (6, 7), (7, 8)]:  # a prefix, a chunk, then one token per step
            out = model(input_ids=input_ids[:, start:end], past_key_values=past, use_cache=True)
            past = out.past_key_values
            steps.append(out.logits)
    assert past.get_seq_length() == 8
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


def argmax_loop_without_cache(model, input_ids, max_new_tokens):
    """Greedy decoding recomputing the whole sequence at every step, stopping rows at eos."""
    sequences = input_ids
    finished = torch.zeros(input_ids.shape[0], dtype=torch.bool)
    for _ in range(max_new_tokens):
        logits = model(input_ids=sequences, use_cache=False).logits[:, -1]
        next_tokens = logits.argmax(-1).masked_fill(finished, model.config.pad_token_id)
        sequences = torch.cat([sequences, next_tokens[:, None]], dim=1)
        finished |= next_tokens == model.config.eos_token_id
        if finished.all():
            break
    return sequences


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_decoder_only_greedy_generate_equals_argmax_loop(seed, attn_implementation):
    model = tiny(VanillaTransformerForCausalLM, seed, attn_implementation, eos_token_id=5)
    prompts = torch.randint(6, 53, (3, 4), generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        generated = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False,
                                   num_beams=1, max_new_tokens=12)
        expected = argmax_loop_without_cache(model, prompts, 12)
    assert torch.equal(generated, expected)


def test_decoder_only_beam_search_with_cache_equals_beam_search_without(seed):
    model = tiny(VanillaTransformerForCausalLM, seed, eos_token_id=5)
    prompts = torch.randint(6, 53, (2, 3), generator=torch.Generator().manual_seed(seed))
    kwargs = dict(attention_mask=torch.ones_like(prompts), num_beams=4, num_return_sequences=2, max_new_tokens=8,
                  return_dict_in_generate=True, output_scores=True)
    with torch.no_grad():
        cached = model.generate(prompts, **kwargs, use_cache=True)
        uncached = model.generate(prompts, **kwargs, use_cache=False)
    assert cached.sequences.shape[0] == 4
    assert torch.equal(cached.sequences, uncached.sequences)
    torch.testing.assert_close(cached.sequences_scores, uncached.sequences_scores, atol=1e-5, rtol=0)


def test_decoder_only_sampling_follows_temperature_top_k_and_top_p():
    model = tiny(VanillaTransformerForCausalLM, 3)
    prompts = torch.randint(6, 53, (2, 3), generator=torch.Generator().manual_seed(3))
    runs = []
    for _ in range(2):
        torch.manual_seed(7)
        with torch.no_grad():
            runs.append(model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True,
                                       temperature=0.7, top_k=10, top_p=0.9, max_new_tokens=6))
    assert torch.equal(runs[0], runs[1]) and runs[0].shape == (2, 9)
    # top_k=1 sampling is greedy search
    torch.manual_seed(8)
    with torch.no_grad():
        top1 = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=True, top_k=1,
                              max_new_tokens=6)
        greedy = model.generate(prompts, attention_mask=torch.ones_like(prompts), do_sample=False, max_new_tokens=6)
    assert torch.equal(top1, greedy)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_decoder_only_padded_row_equals_the_row_alone(seed, attn_implementation):
    model = tiny(VanillaTransformerForCausalLM, seed, attn_implementation, eos_token_id=5)
    input_ids, attention_mask = random_batch(seed)
    with torch.no_grad():
        right_padded = model(input_ids=input_ids, attention_mask=attention_mask).logits
        # generate's batches are left-padded: positions count from each row's first token
        lengths = attention_mask.sum(1).tolist()
        left_ids = torch.zeros_like(input_ids)
        left_mask = torch.zeros_like(attention_mask)
        for row, length in enumerate(lengths):
            left_ids[row, 9 - length:] = input_ids[row, :length]
            left_mask[row, 9 - length:] = 1
        greedy = model.generate(left_ids, attention_mask=left_mask, num_beams=1, do_sample=False, max_new_tokens=6)
        beam = model.generate(left_ids, attention_mask=left_mask, num_beams=3, max_new_tokens=6)
        for row, length in enumerate(lengths):
            alone_ids = input_ids[row : row + 1, :length]
            alone = model(input_ids=alone_ids).logits
            torch.testing.assert_close(right_padded[row : row + 1, :length], alone, atol=ATOL, rtol=0)
            for batched, kwargs in ((greedy, dict(num_beams=1, do_sample=False)), (beam, dict(num_beams=3))):
                single = model.generate(alone_ids, attention_mask=torch.ones_like(alone_ids), max_new_tokens=6,
                                        **kwargs)[0, length:]
                new_tokens = batched[row, 9:]
                assert torch.equal(new_tokens[: single.shape[0]], single)
                assert torch.all(new_tokens[single.shape[0] :] == model.config.pad_token_id)


@pytest.mark.parametrize("attn_implementation", ["eager", "sdpa"])
def test_classifier_and_masked_lm_padded_row_equals_the_row_alone(seed, attn_implementation):
    classifier = tiny(VanillaTransformerForSequenceClassification, seed, attn_implementation, num_labels=3)
    masked = tiny(VanillaTransformerForMaskedLM, seed, attn_implementation)
    input_ids, attention_mask = random_batch(seed)
    with torch.no_grad():
        scores = classifier(input_ids=input_ids, attention_mask=attention_mask).logits
        token_logits = masked(input_ids=input_ids, attention_mask=attention_mask).logits
        for row in range(3):
            length = int(attention_mask[row].sum())
            alone_ids = input_ids[row : row + 1, :length]
            torch.testing.assert_close(scores[row : row + 1], classifier(input_ids=alone_ids).logits, atol=ATOL, rtol=0)
            torch.testing.assert_close(token_logits[row : row + 1, :length], masked(input_ids=alone_ids).logits,
                                       atol=ATOL, rtol=0)


# ---------------------------------------------------------------------------------------------------------------
# Bad input: one clear error each.


def test_decoder_only_bad_input_raises_clear_errors():
    model = tiny(VanillaTransformerForCausalLM)
    input_ids, attention_mask = random_batch(0)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 8\).*shape \(3, 9\)"):
        model(input_ids=input_ids, attention_mask=attention_mask[:, :8])
    bad = input_ids.clone()
    bad[1, 2] = 53
    with pytest.raises(ValueError, match=r"input_ids contains token id 53.*vocabulary of 53 tokens"):
        model(input_ids=bad, attention_mask=attention_mask)
    with pytest.raises(ValueError, match=r"token id 99"):
        model.generate(torch.tensor([[4, 99, 6]]), max_new_tokens=2)
    with pytest.raises(ValueError, match=r"labels contains token id 70"):
        model(input_ids=input_ids, labels=input_ids.masked_fill(input_ids == input_ids[0, 0], 70))
    with pytest.raises(ValueError, match=r"labels must have the shape of input_ids \(3, 9\)"):
        model(input_ids=input_ids, labels=input_ids[:, 1:])
    with pytest.raises(ValueError, match=r"position_ids has shape \(3, 8\), but the input has shape \(3, 9\)"):
        model(input_ids=input_ids, position_ids=torch.arange(8).expand(3, 8))
    learned = tiny(VanillaTransformerForCausalLM, position_embedding_type="learned", max_position_embeddings=16)
    with pytest.raises(ValueError, match=r"Position 19 is beyond the 16 learned positions"):
        learned(input_ids=torch.randint(3, 53, (2, 20)))
    with pytest.raises(ValueError, match=r"beyond the 16 learned positions"):
        learned.generate(torch.randint(3, 53, (1, 12)), max_new_tokens=8, min_new_tokens=8)


@pytest.mark.parametrize("model_class", [VanillaTransformerForMaskedLM, VanillaTransformerForSequenceClassification])
def test_encoder_only_bad_input_raises_clear_errors(model_class):
    model = tiny(model_class, num_labels=3)
    input_ids, attention_mask = random_batch(0)
    with pytest.raises(ValueError, match=r"attention_mask has shape \(3, 10\).*shape \(3, 9\)"):
        model(input_ids=input_ids, attention_mask=torch.ones(3, 10))
    with pytest.raises(ValueError, match=r"input_ids contains token id -1, outside the vocabulary"):
        model(input_ids=input_ids.index_fill(1, torch.tensor([1]), -1), attention_mask=attention_mask)
    learned = tiny(model_class, num_labels=3, position_embedding_type="learned", max_position_embeddings=16)
    with pytest.raises(ValueError, match=r"Position 16 is beyond the 16 learned positions"):
        learned(input_ids=torch.randint(3, 53, (2, 17)))


def test_classifier_labels_that_do_not_fit_raise_clear_errors():
    input_ids, attention_mask = random_batch(0)
    model = tiny(VanillaTransformerForSequenceClassification, num_labels=3)
    with pytest.raises(ValueError, match=r"labels contains class 3, but this model has 3 labels \(valid classes are 0..2\)"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 3, 1]))
    with pytest.raises(ValueError, match=r"labels contains class -1"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([0, -1, 1]))
    with pytest.raises(ValueError, match=r"labels of shape \(3,\)"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.tensor([0, 1]))
    with pytest.raises(ValueError, match=r"Multi-label classification needs labels of shape \(3, 3\)"):
        model(input_ids=input_ids, attention_mask=attention_mask, labels=torch.ones(3, 2))
    regression = tiny(VanillaTransformerForSequenceClassification, num_labels=1)
    with pytest.raises(ValueError, match=r"Regression needs 1 target\(s\) per sequence"):
        regression(input_ids=input_ids, attention_mask=attention_mask, labels=torch.ones(3, 2))
    masked = tiny(VanillaTransformerForMaskedLM)
    with pytest.raises(ValueError, match=r"labels contains token id 53"):
        masked(input_ids=input_ids, labels=torch.full_like(input_ids, -100).index_fill(1, torch.tensor([3]), 53))


# ---------------------------------------------------------------------------------------------------------------
# Losses: the problem types of transformers, the shifted next-token loss, BERT's masked-token loss.


def test_classifier_loss_follows_the_problem_type_as_transformers_does():
    input_ids, attention_mask = random_batch(1)
    model = tiny(VanillaTransformerForSequenceClassification, 1, num_labels=3)
    labels = torch.tensor([2, 0, 1])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(out.loss, nn.functional.cross_entropy(out.logits, labels))
    assert model.config.problem_type == "single_label_classification"

    model = tiny(VanillaTransformerForSequenceClassification, 1, num_labels=3)
    targets = torch.tensor([[1.0, 0.0, 1.0], [0.0, 0.0, 0.0], [0.0, 1.0, 1.0]])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=targets)
    torch.testing.assert_close(out.loss, nn.functional.binary_cross_entropy_with_logits(out.logits, targets))
    assert model.config.problem_type == "multi_label_classification"

    model = tiny(VanillaTransformerForSequenceClassification, 1, num_labels=1)
    values = torch.tensor([0.5, -1.0, 2.0])
    out = model(input_ids=input_ids, attention_mask=attention_mask, labels=values)
    assert out.logits.shape == (3, 1)
    torch.testing.assert_close(out.loss, nn.functional.mse_loss(out.logits[:, 0], values))
    assert model.config.problem_type == "regression"


def test_causal_and_masked_lm_losses_are_cross_entropies_ignoring_minus_100():
    input_ids, attention_mask = random_batch(2)
    labels = input_ids.masked_fill(attention_mask == 0, -100)
    causal = tiny(VanillaTransformerForCausalLM, 2)
    out = causal(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    expected = nn.functional.cross_entropy(out.logits[:, :-1].reshape(-1, 53), labels[:, 1:].reshape(-1))
    torch.testing.assert_close(out.loss, expected)
    masked = tiny(VanillaTransformerForMaskedLM, 2)
    chosen = torch.rand(input_ids.shape, generator=torch.Generator().manual_seed(2)) < 0.3
    labels = input_ids.masked_fill(~chosen | (attention_mask == 0), -100)
    out = masked(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    torch.testing.assert_close(out.loss, nn.functional.cross_entropy(out.logits.reshape(-1, 53), labels.reshape(-1)))


def test_decoder_only_static_cache_generates_what_the_dynamic_cache_does(seed):
    model = tiny(VanillaTransformerForCausalLM, seed, eos_token_id=5)
    prompts = torch.randint(6, 53, (2, 4), generator=torch.Generator().manual_seed(seed))
    attention_mask = torch.ones_like(prompts)
    attention_mask[1, :2] = 0  # a left-padded prompt
    with torch.no_grad():
        dynamic = model.generate(prompts, attention_mask=attention_mask, do_sample=False, max_new_tokens=6)
        static = model.generate(prompts, attention_mask=attention_mask, do_sample=False, max_new_tokens=6,
                                cache_implementation="static")
    assert torch.equal(static, dynamic)

