"""What decoding a translation takes, without torch: the length bound of a translation (its settings, their
defaults and the bound of each source), the check of generation parameters, and the longest source every engine
reads (`positions_read`). The model
(`modeling_vanilla_transformer`: its `generate` applies the bound through `SourceLengthBound`), the pipeline
(`pipeline_translation`) and the CTranslate2 engine (`interop.ctranslate2_runtime`) use the same functions, and
`vanilla-transformer translate` with a CTranslate2 folder imports this file without torch.

This file is copied next to the weights with the model and the pipeline (Hub remote code): it imports only the
standard library.
"""

import math

# A translation's length bounded by its source's, as fairseq (--max-len-a, --max-len-b) and Marian
# (--max-length-factor) bound it, so that a model that never emits </s> stops after a few times the source's length.
MAX_LENGTH_A = 2.0  # target tokens allowed per source token
MAX_LENGTH_B = 10  # plus this many
# the generation config's attributes and `generate`'s keywords, with the values a config that lacks them gets
LENGTH_BOUND = {"max_length_a": MAX_LENGTH_A, "max_length_b": MAX_LENGTH_B}
# the largest bound a row gets: a*n + b beyond it (or beyond any float, as with a = 1e308) bounds nothing that a
# translation's max_length does not, and must still fit the int64 tensors and int32 options that carry it
LARGEST_BOUND = 2**31 - 1


def max_target_lengths(source_lengths, a: float = MAX_LENGTH_A, b: float = MAX_LENGTH_B) -> list[int]:
    """The most tokens each translation may take, its </s> included: `int(a * n + b)` (at least 1) for a source of
    `n` tokens (its </s> included), at most `LARGEST_BOUND`. `a` and `b` are fairseq's `--max-len-a` /
    `--max-len-b`."""
    if a < 0 or b < 0:
        raise ValueError(f"max_length_a and max_length_b must be 0 or more, got {a} and {b}")
    lengths = []
    for n in source_lengths:
        length = a * int(n) + b
        lengths.append(max(1, int(length)) if length < LARGEST_BOUND else LARGEST_BOUND)  # inf too
    return lengths


def length_bound_setting(call_settings: dict, *generation_configs) -> tuple[float, float] | None:
    """The `(a, b)` of the bound a `generate` call applies, each setting of LENGTH_BOUND taken from `call_settings`
    (the call's keywords) if it is there, else from the first of `generation_configs` (the call's, then the model's;
    None entries skipped) that has the attribute, else LENGTH_BOUND's default: a folder saved before these settings
    existed gets the default bound. None, the bound off, when either setting is None. ValueError for a value that is
    not a number of 0 or more."""
    values = []
    for name, default in LENGTH_BOUND.items():
        holders = [call_settings, *(vars(config) for config in generation_configs if config is not None)]
        values.append(next((holder[name] for holder in holders if name in holder), default))
    if None in values:
        return None
    for name, value in zip(LENGTH_BOUND, values):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value < math.inf:
            raise ValueError(f"{name}={value!r} cannot work: it must be a number of 0 or more (a translation takes "
                             f"at most max_length_a * n + max_length_b tokens for a source of n), or None to turn "
                             f"the bound off.")
    return float(values[0]), values[1]


def check_generation_parameters(generation_config, generate_kwargs: dict | None = None) -> None:
    """Raise ValueError, naming the parameter, for generation settings that cannot work (where `generate` would
    divide by zero, fail deep inside torch, or quietly ignore them). `generate_kwargs` override `generation_config`
    (a `GenerationConfig`)."""
    generate_kwargs = generate_kwargs or {}
    config = generate_kwargs.get("generation_config") or generation_config

    def get(name: str):
        return generate_kwargs[name] if name in generate_kwargs else getattr(config, name, None)

    def whole_number(name: str, least: int, meaning: str) -> None:
        value = get(name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < least):
            raise ValueError(f"{name}={value!r} cannot work: it must be a whole number of at least {least} "
                             f"({meaning}).")

    whole_number("num_beams", 1, "the hypotheses beam search keeps; 1 is greedy search")
    whole_number("num_return_sequences", 1, "translations returned per input")
    whole_number("max_new_tokens", 1, "the longest translation, in tokens")
    whole_number("max_length", 1, "the longest output, in tokens")
    whole_number("min_new_tokens", 0, "the shortest translation, in tokens")
    whole_number("min_length", 0, "the shortest output, in tokens")
    if get("do_sample"):
        temperature, top_p = get("temperature"), get("top_p")
        if temperature is not None and not temperature > 0:
            raise ValueError(f"temperature={temperature!r} cannot work with do_sample=True: it must be positive.")
        if top_p is not None and not 0 < top_p <= 1:
            raise ValueError(f"top_p={top_p!r} cannot work: it must be in (0, 1].")
        whole_number("top_k", 0, "the most likely tokens sampled from; 0 for all")
    elif (get("num_return_sequences") or 1) > (get("num_beams") or 1):
        raise ValueError(
            f"num_return_sequences={get('num_return_sequences')} cannot work with num_beams={get('num_beams')}: "
            "beam search returns at most num_beams translations. Raise num_beams, or sample (do_sample=True)."
        )


# A tokenizer's `model_max_length` at or above this says "no limit" (transformers' own sentinel is 1e30)
NO_LIMIT = 1_000_000
# Sinusoids have no length of their own: the model computes them for any position, and its exports (CTranslate2,
# Marian) hold a table of at least this many positions, so that every engine reads the same longest input.
SINUSOID_TABLE_ROWS = 1024


def positions_read(config) -> int | None:
    """The longest input in tokens a PyTorch model of `config` reads, as its exports hold positions for it: our
    model with sinusoids, max(`max_position_embeddings`, `SINUSOID_TABLE_ROWS`); learned positions, and any other
    model, `max_position_embeddings`; None where the config does not say."""
    positions = getattr(config, "max_position_embeddings", None)
    if not isinstance(positions, int) or isinstance(positions, bool) or positions <= 0:
        return None
    if getattr(config, "model_type", None) == "vanilla_transformer" and config.position_embedding_type != "learned":
        return max(positions, SINUSOID_TABLE_ROWS)
    return positions


def longest_input(positions: int | None, tokenizer) -> int | None:
    """The longest source in tokens a model reads: its `positions` (`positions_read`, or a CTranslate2 folder's) and
    the tokenizer's `model_max_length`, whichever is less; None when neither says."""
    limits = [limit for limit in (positions, getattr(tokenizer, "model_max_length", None))
              if isinstance(limit, int) and not isinstance(limit, bool) and 0 < limit < NO_LIMIT]
    return min(limits, default=None)


__all__ = ["LARGEST_BOUND", "LENGTH_BOUND", "MAX_LENGTH_A", "MAX_LENGTH_B", "NO_LIMIT", "SINUSOID_TABLE_ROWS",
           "check_generation_parameters", "length_bound_setting", "longest_input", "max_target_lengths",
           "positions_read"]
