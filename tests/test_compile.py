"""Under `torch.compile` (inductor, one graph, no breaks) the model computes what it computes eagerly.

Compiling on a CPU takes tens of seconds per graph, so these tests use one seed and the default (sdpa) attention
each; the eager tests cover the seeds and both attention implementations.
"""

import pytest
import torch
from transformers import CompileConfig

from helpers import random_batch, tiny_model

ATOL = 1e-5


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_compiled_forward_and_gradients_match_eager():
    model = tiny_model(1).train()  # dropout 0: training mode is deterministic
    input_ids, attention_mask = random_batch(1)
    labels = torch.randint(3, 53, (3, 7), generator=torch.Generator().manual_seed(1))
    labels[1, 5:] = -100

    eager = model(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    eager.loss.backward()
    eager_grads = {name: p.grad.clone() for name, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)

    compiled = torch.compile(model, fullgraph=True, dynamic=False)
    out = compiled(input_ids=input_ids, attention_mask=attention_mask, labels=labels)
    out.loss.backward()

    torch.testing.assert_close(out.logits, eager.logits, atol=ATOL, rtol=0)
    torch.testing.assert_close(out.loss, eager.loss, atol=ATOL, rtol=0)
    assert eager_grads  # the embedding, every layer and the projection got gradients
    for name, grad in eager_grads.items():
        torch.testing.assert_close(dict(model.named_parameters())[name].grad, grad, atol=1e-5, rtol=1e-4, msg=name)


def test_compiled_cached_decoding_step_matches_eager():
    model = tiny_model(2)
    input_ids, attention_mask = random_batch(2)
    decoder_input_ids = torch.randint(3, 53, (3, 6), generator=torch.Generator().manual_seed(2))
    compiled = torch.compile(model, fullgraph=True, dynamic=True)
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits
        encoder_outputs = model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask)
        past, steps = None, []
        for position in range(decoder_input_ids.shape[1]):
            out = compiled(encoder_outputs=encoder_outputs, attention_mask=attention_mask, past_key_values=past,
                           decoder_input_ids=decoder_input_ids[:, position:position + 1], use_cache=True)
            past = out.past_key_values
            steps.append(out.logits)
    torch.testing.assert_close(torch.cat(steps, dim=1), full, atol=ATOL, rtol=0)


@pytest.mark.parametrize("num_beams", [1, 4])
def test_generate_with_static_cache_and_compile_matches_eager_generate(num_beams):
    """generate's compiled path: a static cache, the 4D masks generate makes for it, and a compiled decoding step
    (transformers compiles greedy search and sampling; beam search runs the static cache eagerly)."""
    model = tiny_model(3, eos_token_id=5)
    input_ids, attention_mask = random_batch(3)
    kwargs = dict(input_ids=input_ids, attention_mask=attention_mask, num_beams=num_beams, do_sample=False,
                  max_new_tokens=10)
    compile_config = CompileConfig(fullgraph=True, mode="default")
    compile_config._compile_all_devices = True  # generate compiles only on GPUs unless told otherwise
    with torch.no_grad():
        expected = model.generate(**kwargs)
        compiled = model.generate(**kwargs, cache_implementation="static", compile_config=compile_config)
    assert torch.equal(compiled, expected)
    if num_beams == 1:
        assert hasattr(model, "_compiled_call"), "generate did not take its compiled path"


def test_static_cache_without_generates_mask_is_a_clear_error():
    from transformers.cache_utils import EncoderDecoderCache, StaticCache

    model = tiny_model(4)
    input_ids, attention_mask = random_batch(4)
    cache = EncoderDecoderCache(StaticCache(config=model.config, max_cache_len=16),
                                StaticCache(config=model.config, max_cache_len=9))
    with torch.no_grad(), pytest.raises(ValueError, match="static cache needs a"):
        model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True,
              decoder_input_ids=torch.full((3, 1), model.config.decoder_start_token_id))
