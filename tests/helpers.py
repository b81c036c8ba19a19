"""Helpers shared by the tests: tiny configs and models, random padded batches, and where things are.

(pytest fixtures live in conftest.py; this is a plain module the tests import: `from helpers import tiny_model`.)
"""

import pathlib

import torch

import vanilla_transformer

REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = REPO_ROOT.parent / "shared" / "data" / "multi30k"


def tiny_config(**overrides) -> "vanilla_transformer.VanillaTransformerConfig":
    """A model small enough for CPU tests but with every part of the architecture (2+3 layers, 4 heads)."""
    values = dict(
        vocab_size=53,
        d_model=32,
        encoder_layers=2,
        decoder_layers=3,
        encoder_attention_heads=4,
        decoder_attention_heads=4,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        dropout=0.0,
        max_position_embeddings=64,
    )
    values.update(overrides)
    return vanilla_transformer.VanillaTransformerConfig(**values)


def tiny_model(seed: int = 0, attn_implementation: str = "sdpa", **overrides):
    torch.manual_seed(seed)
    config = tiny_config(**overrides)
    model = vanilla_transformer.VanillaTransformerForConditionalGeneration._from_config(
        config, attn_implementation=attn_implementation
    )
    return model.eval()


def random_batch(seed: int, vocab_size: int = 53, batch: int = 3, length: int = 9, first_id: int = 3):
    """Random token ids (no special tokens) and a right-padded attention mask with different lengths per row."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(first_id, vocab_size, (batch, length), generator=generator)
    lengths = torch.randint(2, length + 1, (batch,), generator=generator)
    lengths[0] = length  # at least one full row
    attention_mask = (torch.arange(length)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)  # pad id 0
    return input_ids, attention_mask
