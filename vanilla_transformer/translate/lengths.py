"""The length bound of each sentence in a batch, as both engines apply it (`translate._translate_chunk`): fairseq's
`max_length_a * n + max_length_b` tokens (`decoding.max_target_lengths`), within the generation config's own
maximum. Needs no torch."""

from vanilla_transformer.decoding import MAX_LENGTH_A, MAX_LENGTH_B, max_target_lengths


def row_bounds(generation_config, source_lengths: list[int], a: float = MAX_LENGTH_A,
               b: float = MAX_LENGTH_B) -> tuple[list[int], int]:
    """-> (the most tokens each row may take, its </s> included; the batch's `max_new_tokens`, the longest row's).
    A row whose bound is past the configuration's maximum is left to it: cut there as generate cuts every output."""
    config = generation_config
    limit = config.max_new_tokens or (config.max_length or 20) - 1  # the decoder start token counts in max_length
    bounds = [min(bound, limit + 1) for bound in max_target_lengths(source_lengths, a, b)]
    return bounds, min(max(bounds), limit)


__all__ = ["row_bounds"]
