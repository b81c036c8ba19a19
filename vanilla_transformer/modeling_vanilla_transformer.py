"""The encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017), as a transformers model.

Read top to bottom, this file follows the paper: positional encoding (section 3.5), scaled dot-product and
multi-head attention (3.2), the position-wise feed-forward network (3.3), encoder and decoder layers and stacks
(3.1), embeddings shared with the pre-softmax projection (3.4), the two Hugging Face models of the paper's
encoder-decoder, and finally the other two configurations built from the same blocks: decoder-only and encoder-only.

Shapes in comments: B batch, T target (query) length, S source (key) length, P cached length, H heads,
Dh head size (d_model / H), D d_model, V vocabulary size.

This file is copied next to the weights by `save_pretrained` (Hub remote code), so it imports only the standard
library, torch, transformers and its siblings: the configuration file, `compat.py` (every difference between
transformers releases), `decoding.py` (the length bound of a translation) and, when saving, the pipeline file that is
saved with them.
"""

import copy
import json
import math
import os
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import GenerationMixin, LogitsProcessor, LogitsProcessorList, PreTrainedModel
from transformers import initialization as init
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, DynamicCache, EncoderDecoderCache
from transformers.loss.loss_utils import fixed_cross_entropy
from transformers.masking_utils import create_bidirectional_mask, create_causal_mask
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import (
    BaseModelOutput,
    BaseModelOutputWithPastAndCrossAttentions,
    CausalLMOutputWithPast,
    MaskedLMOutput,
    Seq2SeqLMOutput,
    Seq2SeqModelOutput,
    SequenceClassifierOutput,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.processing_utils import Unpack
from transformers.utils import TransformersKwargs, logging
from transformers.utils.generic import can_return_tuple, merge_with_config_defaults
from transformers.utils.import_utils import is_torchdynamo_compiling
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .compat import (
    CACHE_ARGUMENT,
    CACHE_FIELD,
    accepts_cache_keyword,
    cache_capacity,
    quiet_about_the_configs_max_length,
)
from .configuration_vanilla_transformer import VanillaTransformerConfig
from .decoding import (
    LENGTH_BOUND,
    MAX_LENGTH_A,
    MAX_LENGTH_B,
    check_generation_parameters,
    length_bound_setting,
    max_target_lengths,
)

logger = logging.get_logger(__name__)

# ----------------------------------------------------------------------------------------------------------------
# Input checks: a wrong id or mask must fail with a message, not an IndexError deep inside an embedding.


def check_token_ids(ids: torch.Tensor, vocab_size: int, name: str, values: bool = True) -> None:
    """Raise a ValueError naming the first id of `ids` outside `[0, vocab_size)`, or a shape that is not (B, L).

    Looking at the values costs a host-device sync on an accelerator, so the stacks look only where ids come from the
    user (`values=True`): not at the tokens of a cached decoding step, which the model itself predicted.
    """
    if ids.dim() != 2:
        raise ValueError(f"{name} must have shape (batch_size, sequence_length), got {tuple(ids.shape)}.")
    if ids.numel() == 0:
        raise ValueError(f"{name} is empty (shape {tuple(ids.shape)}): there is nothing to encode.")
    if not values or is_torchdynamo_compiling():
        return
    bad = (ids < 0) | (ids >= vocab_size)
    if bad.any():
        token_id = int(ids[bad][0])
        raise ValueError(
            f"{name} contains token id {token_id}, outside the vocabulary of {vocab_size} tokens "
            f"(valid ids are 0..{vocab_size - 1}). Was the input made by this model's tokenizer?"
        )


def check_attention_mask(attention_mask: torch.Tensor | None, expected_shape: tuple[int, int], name: str) -> None:
    """A (B, S) mask of 1 (token) and 0 (padding) must match the input it masks; a ready 4D mask (generate's, with a
    static cache) or flex attention's BlockMask is taken as it is."""
    if attention_mask is None or not isinstance(attention_mask, torch.Tensor) or attention_mask.dim() == 4:
        return
    if tuple(attention_mask.shape) != tuple(expected_shape):
        raise ValueError(
            f"{name} has shape {tuple(attention_mask.shape)}, but the input it masks has shape "
            f"{tuple(expected_shape)}; expected a (batch_size, sequence_length) mask of 1 (token) and 0 (padding)."
        )


# ----------------------------------------------------------------------------------------------------------------
# Section 3.5: positional encoding.


def sinusoidal_position_encoding(
    positions: torch.Tensor, d_model: int, layout: str = "interleaved", frequencies: str = "paper"
) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(pos / 10000^(2i/d_model)).

    `layout="concatenated"` puts the d_model/2 sines first and the cosines after them, and
    `frequencies="tensor2tensor"` spaces the wavelengths as 10000^(i/(d_model/2 - 1)): the variants of
    tensor2tensor, Marian and fairseq. Returns (len(positions), d_model) in float64.
    """
    half = d_model // 2
    i = torch.arange(half, dtype=torch.float64)
    if frequencies == "paper":
        inv_wavelength = 10000.0 ** (-2.0 * i / d_model)
    else:
        inv_wavelength = torch.exp(-math.log(10000.0) * i / max(half - 1, 1))
    angles = positions.to(torch.float64)[:, None] * inv_wavelength[None, :]  # (L, D/2)
    if layout == "interleaved":
        return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(-2)  # (L, D): sin, cos, sin, cos, ...
    return torch.cat([angles.sin(), angles.cos()], dim=-1)  # (L, D): sin ... sin, cos ... cos


def token_positions(config: VanillaTransformerConfig, input_ids: torch.Tensor | None, past_length: int | torch.Tensor,
                    length: int, device: torch.device) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The rows of the positional table for `length` new tokens that follow `past_length` cached ones: their positions
    past_length .. past_length + length - 1 plus `config.position_offset`, as a (T,) tensor shared by every row.

    With fairseq's numbering (`config.skip_padding_positions`) positions count only the tokens of each row that are not
    `pad_token_id`: the k-th token of a row is at past_length + k - 1, (B, T); padding tokens get a zero encoding, and
    the second value is then the (B, T, 1) mask of 1 (token) and 0 (padding) that zeroes them, else None.
    `past_length` is a 0-d tensor when a static cache is decoded under `torch.compile` (the position is then data).
    """
    start = config.position_offset + past_length
    if config.skip_padding_positions and input_ids is not None:
        is_token = input_ids != config.pad_token_id  # (B, T)
        return (start - 1 + is_token.cumsum(dim=1)).clamp(min=0), is_token.unsqueeze(-1)  # (B, T), (B, T, 1)
    return start + torch.arange(length, device=device), None  # (T,)


def with_padding_zeroed(positions: torch.Tensor, is_token: torch.Tensor | None) -> torch.Tensor:
    """fairseq's zero encoding at padding tokens: (B, T, D) encodings times the (B, T, 1) mask of `token_positions`."""
    return positions if is_token is None else positions * is_token.to(positions.dtype)


def check_position_ids(position_ids: torch.Tensor, expected_shape: tuple[int, int], values: bool) -> int | None:
    """A ValueError for (B, T) `position_ids` of another shape than the input's, or (when asked to look at the values,
    a device sync) for a negative position; returns the largest position then, else None."""
    if tuple(position_ids.shape) != tuple(expected_shape):
        raise ValueError(f"position_ids has shape {tuple(position_ids.shape)}, but the input has shape "
                         f"{tuple(expected_shape)}; expected one position per input token.")
    if not values or is_torchdynamo_compiling():
        return None
    lowest, highest = torch.aminmax(position_ids)
    if lowest < 0:
        raise ValueError(f"position_ids contains position {int(lowest)}; positions count from 0.")
    return int(highest)


class SinusoidalPositionalEncoding(nn.Module):
    """Fixed sinusoids for any position, looked up in a table of the positions needed so far (it is not a weight)."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.d_model = config.d_model
        self.layout = config.sinusoidal_layout
        self.frequencies = config.sinusoidal_frequencies
        self.initial_rows = config.position_offset + config.max_position_embeddings
        self._table: torch.Tensor | None = None

    def reserve(self, rows: int, like: torch.Tensor) -> None:
        """Make rows 0 .. rows - 1 ready for lookup, in `like`'s dtype and device (grown by doubling, kept between
        calls, computed in float64 and rounded once)."""
        table = self._table
        if table is None or table.shape[0] < rows or table.device != like.device or table.dtype != like.dtype:
            size = max(rows, self.initial_rows, 2 * (table.shape[0] if table is not None else 0))
            table = sinusoidal_position_encoding(torch.arange(size), self.d_model, self.layout, self.frequencies)
            self._table = table.to(device=like.device, dtype=like.dtype)

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """(...) rows of the table (offset included) -> (..., D)."""
        return self._table[position_ids]


class LearnedPositionalEmbedding(nn.Embedding):
    """Table 3, row (E): one learned vector per position, up to `max_position_embeddings`."""

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config.max_position_embeddings + config.position_offset, config.d_model)
        self.offset = config.position_offset

    def reserve(self, rows: int, like: torch.Tensor) -> None:
        """A ValueError if rows 0 .. rows - 1 are more than the model learned."""
        if rows > self.num_embeddings:
            raise ValueError(
                f"Position {rows - 1 - self.offset} is beyond the {self.num_embeddings - self.offset} learned "
                "positions of this model (max_position_embeddings); shorten the input or use sinusoidal positions."
            )

    def forward(self, position_ids: torch.Tensor) -> torch.Tensor:
        """(...) rows (offset included) -> (..., D)."""
        return self.weight[position_ids]


def first_positions(module: SinusoidalPositionalEncoding | LearnedPositionalEmbedding, length: int,
                    like: torch.Tensor, offset: int = 0) -> torch.Tensor:
    """The encodings the stacks add to positions 0 .. length - 1 (rows offset .. offset + length - 1): (L, D)."""
    module.reserve(offset + length, like)
    return module(offset + torch.arange(length, device=like.device))


def positional_encoding(config: VanillaTransformerConfig) -> SinusoidalPositionalEncoding | LearnedPositionalEmbedding:
    if config.position_embedding_type == "learned":
        return LearnedPositionalEmbedding(config)
    return SinusoidalPositionalEncoding(config)


# ----------------------------------------------------------------------------------------------------------------
# Section 3.2: attention.


def applied_attention_mask(module: nn.Module, attention_mask: torch.Tensor | None, query_length: int, key_length: int,
                           device: torch.device | str | None = None) -> torch.Tensor | None:
    """The mask equation (1) applies to (T, S) scores: `attention_mask` as given, or where it is None (sdpa's form of
    "causal, nothing padded") and `module` is causal, section 3.2.3's (T, S) boolean mask (True = attend): each query
    sees the keys up to its own position, the queries being the last T of the S positions (a cache holds the first
    S - T). None: nothing masked (a single query may see every key)."""
    if attention_mask is None and module.is_causal and query_length > 1:  # no looking ahead
        return torch.ones(query_length, key_length, dtype=torch.bool, device=device).tril(
            diagonal=key_length - query_length)
    return attention_mask


def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Equation (1): Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V.

    query (B, H, T, Dh), key and value (B, H, S, Dh); `attention_mask` is additive (eager's mask) or boolean (sdpa's,
    True = attend), broadcastable to (B, H, T, S), or None (sdpa's form of "causal, nothing padded"). Returns the
    output (B, T, H, Dh) and the weights (B, H, T, S).
    """
    scores = torch.matmul(query, key.transpose(-2, -1)) * scaling  # (B, H, T, S)
    attention_mask = applied_attention_mask(module, attention_mask, query.shape[-2], key.shape[-2], query.device)
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()  # (B, T, H, Dh)
    return output, weights


def self_attention_cache(past_key_values: Cache) -> Cache:
    """The cache of the decoder's own keys and values: one part of an encoder-decoder cache, or the whole cache of the
    decoder-only model."""
    if isinstance(past_key_values, EncoderDecoderCache):
        return past_key_values.self_attention_cache
    return past_key_values


class MultiHeadAttention(nn.Module):
    """Section 3.2.2: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    The h per-head projections are one matrix each for Q, K and V (`q_proj`, `k_proj`, `v_proj`), and W^O is
    `out_proj`: the names of BART and Marian, so their checkpoints and their users' LoRA targets find them. In
    encoder-decoder attention the queries come from the decoder and the keys and values from the encoder output; those
    are computed once per source sentence and kept in the cache. Equation (1) itself is the function of
    `config._attn_implementation`: `eager_attention_forward` above, or transformers' sdpa, flex or flash attention.
    """

    def __init__(self, config: VanillaTransformerConfig, num_heads: int, is_cross_attention: bool = False,
                 is_causal: bool = False, layer_idx: int | None = None):
        super().__init__()
        self.config = config
        self.num_heads = num_heads
        self.head_dim = config.d_model // num_heads  # d_v: the heads concatenate to d_model
        self.key_dim = config.attention_key_dim or self.head_dim  # d_k: Table 3, row B sets it apart from d_v
        self.scaling = self.key_dim**-0.5  # 1 / sqrt(d_k)
        self.dropout = config.attention_dropout
        self.is_cross_attention = is_cross_attention
        self.is_causal = is_causal  # read by the attention functions
        self.layer_idx = layer_idx
        d = config.d_model
        self.q_proj = nn.Linear(d, num_heads * self.key_dim)  # W^Q of all heads side by side
        self.k_proj = nn.Linear(d, num_heads * self.key_dim)  # W^K
        self.v_proj = nn.Linear(d, d)  # W^V
        self.out_proj = nn.Linear(d, d)  # W^O

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        """(B, L, H * Dh) projections -> (B, H, L, Dh): head i is dimensions i * Dh .. (i + 1) * Dh - 1 (Dh is d_k for
        queries and keys, d_v for values)."""
        batch, length, _ = x.shape
        return x.view(batch, length, self.num_heads, -1).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, D)
        key_value_states: torch.Tensor | None = None,  # (B, S, D), cross-attention only
        attention_mask: torch.Tensor | None = None,  # made by transformers.masking_utils for the implementation
        past_key_values: EncoderDecoderCache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        batch, length, _ = hidden_states.shape
        query = self.split_heads(self.q_proj(hidden_states))  # (B, H, T, Dk)
        if self.is_cross_attention:
            cache = past_key_values.cross_attention_cache if past_key_values is not None else None
            if cache is not None and past_key_values.is_updated.get(self.layer_idx, False):
                key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
            else:
                key = self.split_heads(self.k_proj(key_value_states))  # (B, H, S, Dh)
                value = self.split_heads(self.v_proj(key_value_states))  # (B, H, S, Dh)
                if cache is not None:
                    key, value = cache.update(key, value, self.layer_idx)
                    past_key_values.is_updated[self.layer_idx] = True
        else:
            key = self.split_heads(self.k_proj(hidden_states))  # (B, H, T, Dh)
            value = self.split_heads(self.v_proj(hidden_states))  # (B, H, T, Dh)
            if past_key_values is not None:
                key, value = self_attention_cache(past_key_values).update(key, value, self.layer_idx)  # (B, H, P+T, Dh)

        implementation = self.config._attn_implementation
        attention: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(implementation, eager_attention_forward)
        if kwargs.get("output_attentions") and implementation != "eager":
            # Only eager computes the weights. sdpa's masks (boolean, or None for "causal") serve it as they are.
            if implementation != "sdpa":
                raise ValueError(f"output_attentions=True needs attn_implementation='eager' or 'sdpa', not "
                                 f"{implementation!r}: load the model with attn_implementation='eager' to see weights.")
            attention = eager_attention_forward
        output, weights = attention(
            self,
            query,
            key,
            value,
            attention_mask,
            scaling=self.scaling,
            dropout=self.dropout if self.training else 0.0,
            **kwargs,
        )
        output = self.out_proj(output.reshape(batch, length, -1))  # (B, T, D)
        return output, weights


# ----------------------------------------------------------------------------------------------------------------
# Section 3.1: encoder and decoder layers. Each sub-layer is wrapped as LayerNorm(x + Dropout(Sublayer(x)))
# (section 5.4 for the dropout); `normalize_before` gives x + Dropout(Sublayer(LayerNorm(x))) instead. The
# feed-forward network of section 3.3 is the last sub-layer of both; its two matrices are the layer's `fc1` and `fc2`,
# where BART and Marian keep them.


class ResidualLayer(GradientCheckpointingLayer):
    def __init__(self, config: VanillaTransformerConfig):
        super().__init__()
        self.normalize_before = config.normalize_before
        self.dropout = config.dropout
        self.activation_fn = ACT2FN[config.activation_function]
        self.activation_dropout = config.activation_dropout

    def sublayer_input(self, norm: nn.LayerNorm, x: torch.Tensor) -> torch.Tensor:
        return norm(x) if self.normalize_before else x

    def sublayer_output(self, norm: nn.LayerNorm, residual: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        x = residual + F.dropout(x, p=self.dropout, training=self.training)
        return x if self.normalize_before else norm(x)

    def feed_forward(self, x: torch.Tensor) -> torch.Tensor:
        """Section 3.3, equation (2): FFN(x) = max(0, x W_1 + b_1) W_2 + b_2 (ReLU unless `activation_function` says
        otherwise), applied to each position separately. (B, L, D) -> (B, L, D)."""
        x = self.activation_fn(self.fc1(x))  # (B, L, d_ff)
        x = F.dropout(x, p=self.activation_dropout, training=self.training)
        return self.fc2(x)


class VanillaTransformerEncoderLayer(ResidualLayer):
    """Multi-head self-attention, then the position-wise feed-forward network."""

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        self.self_attn = MultiHeadAttention(config, config.encoder_attention_heads, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.d_model, config.encoder_ffn_dim)  # W_1 of equation (2)
        self.fc2 = nn.Linear(config.encoder_ffn_dim, config.d_model)  # W_2
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None,
                **kwargs: Unpack[TransformersKwargs]) -> torch.Tensor:
        x = hidden_states  # (B, S, D)
        h, _ = self.self_attn(self.sublayer_input(self.self_attn_layer_norm, x), attention_mask=attention_mask, **kwargs)
        x = self.sublayer_output(self.self_attn_layer_norm, x, h)
        h = self.feed_forward(self.sublayer_input(self.final_layer_norm, x))
        return self.sublayer_output(self.final_layer_norm, x, h)


class VanillaTransformerDecoderLayer(ResidualLayer):
    """Masked multi-head self-attention, multi-head attention over the encoder output, then the feed-forward network.

    Without an encoder (`config.is_encoder_decoder=False`: the decoder-only language model at the end of this file)
    the layer has no encoder-decoder attention: masked self-attention, then the feed-forward network.
    """

    def __init__(self, config: VanillaTransformerConfig, layer_idx: int | None = None):
        super().__init__(config)
        heads = config.decoder_attention_heads
        self.self_attn = MultiHeadAttention(config, heads, is_causal=True, layer_idx=layer_idx)
        self.self_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.encoder_attn = self.encoder_attn_layer_norm = None
        if config.is_encoder_decoder:
            self.encoder_attn = MultiHeadAttention(config, heads, is_cross_attention=True, layer_idx=layer_idx)
            self.encoder_attn_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)
        self.fc1 = nn.Linear(config.d_model, config.decoder_ffn_dim)  # W_1 of equation (2)
        self.fc2 = nn.Linear(config.decoder_ffn_dim, config.d_model)  # W_2
        self.final_layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)

    def forward(
        self,
        hidden_states: torch.Tensor,  # (B, T, D)
        attention_mask: torch.Tensor | None,  # causal (and padding) mask of the self-attention
        encoder_hidden_states: torch.Tensor | None,  # (B, S, D); None without an encoder
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: Cache | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> torch.Tensor:
        x = hidden_states
        h, _ = self.self_attn(self.sublayer_input(self.self_attn_layer_norm, x), attention_mask=attention_mask,
                              past_key_values=past_key_values, **kwargs)
        x = self.sublayer_output(self.self_attn_layer_norm, x, h)
        if self.encoder_attn is not None:
            h, _ = self.encoder_attn(self.sublayer_input(self.encoder_attn_layer_norm, x),
                                     key_value_states=encoder_hidden_states, attention_mask=encoder_attention_mask,
                                     past_key_values=past_key_values, **kwargs)
            x = self.sublayer_output(self.encoder_attn_layer_norm, x, h)
        h = self.feed_forward(self.sublayer_input(self.final_layer_norm, x))
        return self.sublayer_output(self.final_layer_norm, x, h)


# ----------------------------------------------------------------------------------------------------------------
# The Hugging Face contract: weights initialisation, saving, loading, tying.


# The stacks whose weights each class saves (under the same names within a layout). Loading a folder saved from a
# class of another layout would leave a stack random (or empty: "Cannot copy out of meta tensor"), so
# `from_pretrained` refuses it in one line.
_LAYOUTS = {
    "VanillaTransformerModel": "an encoder-decoder model",
    "VanillaTransformerForConditionalGeneration": "an encoder-decoder model",
    "VanillaTransformerForCausalLM": "a decoder-only model",
    "VanillaTransformerForMaskedLM": "an encoder-only model",
    "VanillaTransformerForSequenceClassification": "an encoder-only model",
}


def _saved_architecture(pretrained_model_name_or_path, config) -> str | None:
    """The class a folder was saved from (config.json's first `architectures`), from the `config` passed to
    `from_pretrained` (the Auto classes pass the folder's) or else from a local folder's config.json; None if
    unknown (a Hub id is left to transformers)."""
    if config is not None and not isinstance(config, (str, os.PathLike)):
        architectures = getattr(config, "architectures", None)
    else:
        folder = config if config is not None else pretrained_model_name_or_path
        path = folder if str(folder).endswith(".json") else os.path.join(str(folder), "config.json")
        try:
            with open(path, encoding="utf-8") as f:
                architectures = json.load(f).get("architectures")
        except (OSError, TypeError, ValueError, AttributeError):
            return None
    return architectures[0] if isinstance(architectures, list) and architectures else None


class VanillaTransformerPreTrainedModel(PreTrainedModel):
    config_class = VanillaTransformerConfig
    config: VanillaTransformerConfig
    base_model_prefix = "model"
    main_input_name = "input_ids"
    supports_gradient_checkpointing = True
    _supports_sdpa = True
    _supports_flex_attn = True
    _supports_flash_attn = True
    _can_compile_fullgraph = True
    _no_split_modules = ["VanillaTransformerEncoderLayer", "VanillaTransformerDecoderLayer"]

    @classmethod
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        """`PreTrainedModel.from_pretrained`, after refusing (ValueError, one line) a folder saved from one of our
        classes whose weights are of another layout (e.g. a decoder-only folder for the encoder-decoder), which would
        otherwise load with a stack of random weights.

        Inside `pipeline(task, model=folder)`, transformers reports this error in its own "Could not load model"
        message, whose last line is this one."""
        saved = _saved_architecture(pretrained_model_name_or_path, kwargs.get("config"))
        ours = next((_LAYOUTS[c.__name__] for c in cls.__mro__ if c.__name__ in _LAYOUTS), None)
        if saved in _LAYOUTS and ours is not None and _LAYOUTS[saved] != ours:
            raise ValueError(f"{pretrained_model_name_or_path} holds {_LAYOUTS[saved]} ({saved}, in config.json's "
                             f"architectures); {cls.__name__} needs {ours}: load it with the class it was saved from, "
                             f"or choose a folder saved from {cls.__name__}.")
        return super().from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)

    @torch.no_grad()
    def _init_weights(self, module: nn.Module):
        """Xavier-uniform linear layers and N(0, d_model^-0.5) embeddings, as tensor2tensor."""
        std = self.config.init_std if self.config.init_std is not None else self.config.d_model**-0.5
        if isinstance(module, nn.Linear):
            if module is getattr(self, "lm_head", None):  # the pre-softmax projection is an embedding matrix (3.4)
                init.normal_(module.weight, mean=0.0, std=std)
            else:
                init.xavier_uniform_(module.weight)
            if module.bias is not None:
                init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            init.normal_(module.weight, mean=0.0, std=std)
            if module.padding_idx is not None and not getattr(module.weight, "_is_hf_initialized", False):
                init.zeros_(module.weight[module.padding_idx])
        elif isinstance(module, nn.LayerNorm):
            init.ones_(module.weight)
            init.zeros_(module.bias)
        elif isinstance(module, VanillaTransformerForConditionalGeneration) and module.final_logits_bias is not None:
            init.zeros_(module.final_logits_bias)


class VanillaTransformerEncoder(VanillaTransformerPreTrainedModel):
    """Section 3.1: a stack of `encoder_layers` identical layers over scaled embeddings plus positional encodings."""

    # output_hidden_states / output_attentions: transformers records what these modules return (see capture_outputs)
    _can_record_outputs = {"hidden_states": VanillaTransformerEncoderLayer, "attentions": MultiHeadAttention}

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        super().__init__(config)
        self.embed_tokens = embed_tokens or nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = positional_encoding(config)
        self.dropout = config.dropout
        self.layers = nn.ModuleList(
            [VanillaTransformerEncoderLayer(config, layer_idx=i) for i in range(config.encoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.post_init()

    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, S), 1 for tokens, 0 for padding
        inputs_embeds: torch.Tensor | None = None,  # (B, S, D), already scaled
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutput:
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids and inputs_embeds to the encoder.")
        if inputs_embeds is None:
            check_token_ids(input_ids, self.embed_tokens.num_embeddings, "input_ids")
            inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale  # (B, S, D)
        batch, length = inputs_embeds.shape[:2]
        check_attention_mask(attention_mask, (batch, length), "attention_mask")

        rows, is_token = token_positions(self.config, input_ids, 0, length, inputs_embeds.device)  # (S,) or (B, S)
        self.embed_positions.reserve(self.config.position_offset + length, inputs_embeds)
        hidden_states = inputs_embeds + with_padding_zeroed(self.embed_positions(rows), is_token)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)
        # (B, 1, S, S) in the form the attention implementation takes; None when nothing is padded (sdpa). A row with
        # every key masked (an all-padding input) gives finite, meaningless outputs that reach no other row.
        mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states, attention_mask=attention_mask)

        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, **kwargs)
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutput(last_hidden_state=hidden_states)


class VanillaTransformerDecoder(VanillaTransformerPreTrainedModel):
    """Section 3.1: `decoder_layers` layers; self-attention is masked so position i sees only positions <= i.

    With `config.is_encoder_decoder=False` it is the decoder-only stack (no encoder-decoder attention), whose cache is
    a single `DynamicCache` (or generate's `StaticCache`) instead of an `EncoderDecoderCache`.
    """

    _can_record_outputs = {
        "hidden_states": VanillaTransformerDecoderLayer,
        "attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(MultiHeadAttention, index=1, layer_name="encoder_attn"),
    }

    def __init__(self, config: VanillaTransformerConfig, embed_tokens: nn.Embedding | None = None):
        super().__init__(config)
        self.embed_tokens = embed_tokens or nn.Embedding(config.target_vocab_size, config.d_model, config.pad_token_id)
        self.embed_scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0
        self.embed_positions = positional_encoding(config)
        self.dropout = config.dropout
        self.layers = nn.ModuleList(
            [VanillaTransformerDecoderLayer(config, layer_idx=i) for i in range(config.decoder_layers)]
        )
        self.layer_norm = nn.LayerNorm(config.d_model, eps=config.layer_norm_eps) if config.normalize_before else None
        self.post_init()

    @accepts_cache_keyword
    @merge_with_config_defaults
    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, P+T) or a ready (B, 1, T, P+T) mask
        encoder_hidden_states: torch.Tensor | None = None,  # (B, S, D)
        encoder_attention_mask: torch.Tensor | None = None,  # (B, S)
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        position_ids: torch.LongTensor | None = None,  # (B, T), default P .. P+T-1
        **kwargs: Unpack[TransformersKwargs],
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        cross_attention = self.config.is_encoder_decoder
        prefix = "decoder_" if cross_attention else ""  # the decoder-only model's inputs are its only inputs
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError(f"Pass exactly one of {prefix}input_ids and {prefix}inputs_embeds to the decoder.")
        if cross_attention and encoder_hidden_states is None:
            raise ValueError("The decoder attends over the encoder output: encoder_hidden_states is required.")
        inputs = input_ids if input_ids is not None else inputs_embeds
        batch, length = inputs.shape[:2]

        if not cross_attention:  # decoder-only: the cache holds the self-attention keys and values, nothing else
            if use_cache and past_key_values is None:
                past_key_values = DynamicCache(config=self.config)
            elif isinstance(past_key_values, EncoderDecoderCache):
                raise TypeError("A decoder-only model has no encoder: pass a DynamicCache, not an EncoderDecoderCache.")
        elif use_cache and past_key_values is None:
            past_key_values = EncoderDecoderCache(DynamicCache(config=self.config), DynamicCache(config=self.config))
        elif isinstance(past_key_values, DynamicCache):  # a bare self-attention cache: add the cross-attention one
            past_key_values = EncoderDecoderCache(past_key_values, DynamicCache(config=self.config))
        elif past_key_values is not None and not isinstance(past_key_values, EncoderDecoderCache):
            raise TypeError(f"past_key_values must be an EncoderDecoderCache, got {type(past_key_values).__name__}.")
        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        capacity = None
        if past_key_values is not None and past_key_values.is_compileable:
            # A static cache counts its positions in a tensor, which stays data when compiled; the positional table
            # must then hold the cache's whole length.
            if is_torchdynamo_compiling():
                capacity = cache_capacity(self_attention_cache(past_key_values))
            else:
                past_length = int(past_length)
        else:
            check_attention_mask(attention_mask, (batch, past_length + length), f"{prefix}attention_mask")
        if cross_attention:
            check_attention_mask(encoder_attention_mask, encoder_hidden_states.shape[:2], "attention_mask")
        # A sequence starts here (nothing cached): its ids come from the user and are looked at. The ids of a cached
        # step are the model's own predictions (generate), and looking would cost a device sync per token.
        starts = capacity is None and past_length == 0

        if inputs_embeds is None:
            check_token_ids(input_ids, self.embed_tokens.num_embeddings, f"{prefix}input_ids", values=starts)
            inputs_embeds = self.embed_tokens(input_ids) * self.embed_scale  # (B, T, D)
        offset = self.config.position_offset
        if position_ids is not None:  # generate's for the decoder-only model, counted from each row's first token
            rows, is_token = offset + position_ids, None  # (B, T)
            highest = check_position_ids(position_ids, (batch, length), values=starts)
            # given by the user: as far as they go; in a cached step: the sequence goes on
            needed = offset + (highest + 1 if highest is not None else past_length + length)
        else:
            rows, is_token = token_positions(self.config, input_ids, past_length, length, inputs_embeds.device)
            needed = offset + past_length + length
        self.embed_positions.reserve(offset + capacity if capacity is not None else needed, inputs_embeds)
        hidden_states = inputs_embeds + with_padding_zeroed(self.embed_positions(rows), is_token)
        hidden_states = F.dropout(hidden_states, p=self.dropout, training=self.training)

        # Self-attention: causal (section 3.2.3), plus padding if a decoder mask is given, over the cached positions
        # too; with a static cache, the mask also hides its empty slots. Encoder-decoder attention: source padding.
        own_cache = self_attention_cache(past_key_values) if past_key_values is not None else None
        self_attn_mask = create_causal_mask(config=self.config, inputs_embeds=hidden_states,
                                            attention_mask=attention_mask, **{CACHE_ARGUMENT: own_cache})
        encoder_attn_mask = None
        if cross_attention:
            encoder_attn_mask = create_bidirectional_mask(config=self.config, inputs_embeds=hidden_states,
                                                          attention_mask=encoder_attention_mask,
                                                          encoder_hidden_states=encoder_hidden_states)

        for layer in self.layers:
            hidden_states = layer(
                hidden_states,
                self_attn_mask,
                encoder_hidden_states,  # positional, so gradient checkpointing propagates its gradient
                encoder_attention_mask=encoder_attn_mask,
                past_key_values=past_key_values,
                **kwargs,
            )
        if self.layer_norm is not None:
            hidden_states = self.layer_norm(hidden_states)
        return BaseModelOutputWithPastAndCrossAttentions(
            last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values if use_cache else None}
        )


class VanillaTransformerModel(VanillaTransformerPreTrainedModel):
    """The encoder-decoder stack of Figure 1, without the output projection; returns `Seq2SeqModelOutput`."""

    _input_embed_layer = "shared"  # get_input_embeddings() returns it

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        # Section 3.4: one embedding matrix for source and target tokens (when the vocabulary is shared).
        self.shared = nn.Embedding(config.vocab_size, config.d_model, config.pad_token_id)
        self.encoder = VanillaTransformerEncoder(config, self.shared)
        self.decoder = VanillaTransformerDecoder(config, self.shared if config.share_encoder_decoder_embeddings else None)
        self._tied_weights_keys = {"encoder.embed_tokens.weight": "shared.weight"}
        if config.share_encoder_decoder_embeddings:
            self._tied_weights_keys["decoder.embed_tokens.weight"] = "shared.weight"
        self.post_init()

    def set_input_embeddings(self, value: nn.Embedding):
        self.shared = value
        self.encoder.embed_tokens = value
        if self.config.share_encoder_decoder_embeddings:
            self.decoder.embed_tokens = value

    @accepts_cache_keyword
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqModelOutput:
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, BaseModelOutput):
            encoder_outputs = BaseModelOutput(*encoder_outputs)
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids,
            attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state,
            encoder_attention_mask=attention_mask,
            past_key_values=past_key_values,
            inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        return Seq2SeqModelOutput(
            last_hidden_state=decoder_outputs.last_hidden_state,
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.hidden_states,
            encoder_attentions=encoder_outputs.attentions,
            **{CACHE_FIELD: getattr(decoder_outputs, CACHE_FIELD)},
        )


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing: the decoder reads <start> y_1 ... y_{n-1} to predict y_1 ... y_n (-100 labels read as padding)."""
    if decoder_start_token_id is None or pad_token_id is None:
        raise ValueError("config.decoder_start_token_id and config.pad_token_id must be set to train with labels.")
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 1:] = labels[:, :-1]
    shifted[:, 0] = decoder_start_token_id
    return shifted.masked_fill(shifted == -100, pad_token_id)


# ----------------------------------------------------------------------------------------------------------------
# Decoding: a translation's length bounded by its source's, as fairseq (--max-len-a, --max-len-b) and Marian
# (--max-length-factor) bound it, so that a model that never emits </s> (an upper-cased or out-of-domain sentence)
# stops after a few times the source's length instead of at the configuration's maximum. `generate` applies it by
# default; the settings live in the generation config (generation_config.json) under the names of LENGTH_BOUND. The
# bound itself (`LENGTH_BOUND`, `max_target_lengths`, `length_bound_setting`) is in decoding.py, which needs no torch
# (the CTranslate2 engine applies the same bound); `SourceLengthBound` applies it inside `generate`.


def source_token_counts(input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None,
                        pad_token_id: int | None, rows: int, width: int) -> list[int]:
    """How many tokens each of a batch's `rows` sources has: its `attention_mask`'s ones, else its `input_ids` that
    are not `pad_token_id`, else `width` (an input given as embeddings or encoder outputs without a mask)."""
    if attention_mask is not None and attention_mask.dim() == 2:
        return [int(count) for count in attention_mask.ne(0).sum(-1).tolist()]
    if input_ids is not None and pad_token_id is not None and input_ids.dim() == 2:
        return [int(count) for count in input_ids.ne(pad_token_id).sum(-1).tolist()]
    return [width] * rows


class SourceLengthBound(LogitsProcessor):
    """Force </s> as the `bounds[i]`-th generated token of row `i` (fewer when the model ends it sooner), so that one
    batch gives each sentence the bound it would have alone. Beam search's and `num_return_sequences`' rows are each
    sentence's rows in order (row r belongs to sentence r // (rows / sentences)). The generated tokens are counted
    after the `prompt_length` tokens of the decoder's prompt (its start token); None counts from the length of the
    first `input_ids` it is called with, which is the prompt.

        generate(**inputs, max_length_a=None, logits_processor=[SourceLengthBound(bounds, eos_id)])
    """

    def __init__(self, bounds, eos_token_id: int, prompt_length: int | None = 1):
        self.bounds = torch.as_tensor(list(bounds), dtype=torch.long)  # (batch,)
        self.eos_token_id = eos_token_id
        self.prompt_length = prompt_length
        self.shortest = int(self.bounds.min()) if len(self.bounds) else 1

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        if self.prompt_length is None:
            self.prompt_length = input_ids.shape[1]
        generated = input_ids.shape[1] - self.prompt_length  # tokens so far, the same in every row
        if generated < self.shortest - 1:
            return scores  # no row's last token yet (and no tensor work, nor a wait for the device, per step)
        bounds = self.bounds.to(scores.device).repeat_interleave(scores.shape[0] // len(self.bounds))  # (rows,)
        last = generated >= bounds - 1  # (rows,): the next token is the row's last
        if last.any():
            scores = scores.clone()
            scores[last] = -math.inf
            scores[last, self.eos_token_id] = 0.0
        return scores


class VanillaTransformerForConditionalGeneration(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The full model of Figure 1: encoder-decoder, then a linear projection to the vocabulary and softmax.

    The projection shares its weights with the decoder's embedding (section 3.4) unless `tie_word_embeddings=False`.
    `generate()` defaults to the paper's decoding (section 6.1): beam size 4, length penalty 0.6.
    """

    def __init__(self, config: VanillaTransformerConfig):
        super().__init__(config)
        self.model = VanillaTransformerModel(config)
        self.lm_head = nn.Linear(config.d_model, config.target_vocab_size, bias=False)
        if config.add_final_logits_bias:
            self.register_buffer("final_logits_bias", torch.zeros(1, config.target_vocab_size))
        else:
            self.final_logits_bias = None
        target_embedding = "model.shared.weight" if config.share_encoder_decoder_embeddings else "model.decoder.embed_tokens.weight"
        self._tied_weights_keys = {"lm_head.weight": target_embedding}
        self.post_init()
        if self.generation_config is not None:
            self.generation_config.num_beams = 4
            self.generation_config.length_penalty = 0.6
            self.generation_config.early_stopping = True
            self.generation_config.max_length = min(256, config.max_position_embeddings)
            for name, default in LENGTH_BOUND.items():  # each translation bounded by its source's length
                setattr(self.generation_config, name, default)
            self.generation_config._from_model_config = False  # settings of its own (see save_pretrained)

    def generate(self, inputs=None, generation_config=None, logits_processor=None, *args, **kwargs):
        """`GenerationMixin.generate`, with each translation bounded by its source's length, and a call asking for
        `max_new_tokens` not told that `max_length` is set too.

        The bound: at most `int(max_length_a * n + max_length_b)` tokens, </s> included, for a source of `n` tokens
        (its attention mask's ones, or its ids that are not padding), enforced by a `SourceLengthBound` that forces
        </s> as a row's last token, in greedy search, sampling and beam search alike, each row by its own source, so
        a sentence gets the same bound in any batch. `max_length_a` / `max_length_b` are keywords of this call, else
        attributes of the call's `generation_config`, else of the model's (generation_config.json), else
        `MAX_LENGTH_A` / `MAX_LENGTH_B`; None turns the bound off. `max_new_tokens` / `max_length` still apply: the
        smaller length wins.

        The generation config holds the paper's decoding (section 6.1) and a `max_length` (at most 256 tokens, within
        `max_position_embeddings`) for calls that ask for no length; `max_new_tokens` takes precedence over it, as
        transformers documents, yet transformers logs a warning whenever a model's generation config holds any
        `max_length`. That warning is left out while this model generates for a call that sets `max_new_tokens` and
        no `max_length` of its own (see `compat.quiet_about_the_configs_max_length`); every other message stays.
        """
        # a setting that cannot work is a ValueError naming it, not a ZeroDivisionError deep in transformers
        check_generation_parameters(self.generation_config,
                                    {**kwargs, "generation_config": generation_config} if generation_config else kwargs)
        call_settings = {name: kwargs.pop(name) for name in LENGTH_BOUND if name in kwargs}
        bound = length_bound_setting(call_settings, generation_config, self.generation_config)
        if bound is not None:
            processor = self.source_length_bound(bound, inputs, generation_config, kwargs)
            if processor is not None:
                self.check_minimum_within_bound(processor, bound, generation_config, kwargs)
                logits_processor = LogitsProcessorList([*(logits_processor or []), processor])
        max_new_tokens = kwargs.get("max_new_tokens", getattr(generation_config, "max_new_tokens", None))
        max_length = kwargs.get("max_length", getattr(generation_config, "max_length", None))
        own_max_length = max_length is None or max_length == self.generation_config.max_length
        with quiet_about_the_configs_max_length(max_new_tokens is not None and own_max_length):
            return super().generate(inputs, generation_config, logits_processor, *args, **kwargs)

    def check_minimum_within_bound(self, processor: SourceLengthBound, bound: tuple[float, float], generation_config,
                                   kwargs: dict) -> None:
        """ValueError when the call's `min_new_tokens` or `min_length` asks a row for more tokens than its source's
        bound allows: the bound would end it sooner, quietly breaking the minimum asked for."""
        def setting(name):
            return next((value for value in (kwargs.get(name), getattr(generation_config, name, None),
                                             getattr(self.generation_config, name, None)) if value is not None), None)

        least = max(int(setting("min_new_tokens") or 0) + 1, int(setting("min_length") or 0))  # </s> included
        shortest = int(processor.bounds.min()) if len(processor.bounds) else least
        if shortest < least:
            name = "min_new_tokens" if setting("min_new_tokens") else "min_length"
            raise ValueError(f"{name}={setting(name)!r} cannot work with max_length_a={bound[0]:g}, "
                             f"max_length_b={bound[1]:g}: a source of this batch allows at most {shortest} tokens "
                             f"(</s> included), fewer than the {least} the minimum asks for. Lower {name}, raise "
                             "max_length_b, or turn the bound off (max_length_a=None).")

    def source_length_bound(self, bound: tuple[float, float], inputs, generation_config,
                            kwargs: dict) -> SourceLengthBound | None:
        """The `SourceLengthBound` of a `generate` call's batch (`inputs` and the keywords `kwargs` it was given) for
        `bound` = (a, b); None when nothing can end a row (no </s> token) or there is no source to measure."""
        eos = next((value for value in (kwargs.get("eos_token_id"), getattr(generation_config, "eos_token_id", None),
                                        self.generation_config.eos_token_id, self.config.eos_token_id)
                    if value is not None), None)
        if isinstance(eos, torch.Tensor):
            eos = eos.flatten().tolist()
        if isinstance(eos, (list, tuple)):
            eos = eos[0] if eos else None
        input_ids = inputs if inputs is not None else kwargs.get("input_ids")
        source = next((value for value in (input_ids, kwargs.get("inputs_embeds")) if value is not None), None)
        if source is None and kwargs.get("encoder_outputs") is not None:
            source = kwargs["encoder_outputs"][0]  # (B, S, D): last_hidden_state of a ModelOutput or a tuple
        if eos is None or source is None:
            return None
        pad = next((value for value in (kwargs.get("pad_token_id"), getattr(generation_config, "pad_token_id", None),
                                        self.generation_config.pad_token_id, self.config.pad_token_id)
                    if value is not None), None)
        counts = source_token_counts(input_ids if input_ids is not None and not input_ids.is_floating_point() else None,
                                     kwargs.get("attention_mask"), pad, source.shape[0], source.shape[1])
        return SourceLengthBound(max_target_lengths(counts, *bound), int(eos), prompt_length=None)

    def save_pretrained(self, save_directory, *args, **kwargs):
        """`PreTrainedModel.save_pretrained`, and the folder also serves `pipeline("translation", model=folder,
        trust_remote_code=True)` where this package is not installed: config.json names the pipeline in
        `custom_pipelines` (as `Pipeline.save_pretrained` does for a registered pipeline), and the pipeline's source
        file is copied along with this one: transformers copies the files this one imports from its folder, and this
        is the one place that imports it (only when saving, so that using the model never loads the pipeline).
        `push_to_hub` and Trainer checkpoints save through here. generation_config.json is saved as settings of its
        own, so that it loads with every attribute it holds, the length bound's included.
        """
        from .pipeline_translation import TranslationPipeline

        if self.generation_config is not None:
            # A generation config marked as made from config.json (`_from_model_config`, as transformers marks the
            # one it builds, and as folders saved before the length bound's settings carry it) loads without the
            # attributes transformers does not know, the bound's `max_length_a` / `max_length_b` among them; this one
            # holds settings of its own, as Seq2SeqTrainer marks it before it generates.
            self.generation_config._from_model_config = False
        module = TranslationPipeline.__module__.rsplit(".", 1)[-1]
        self.config.custom_pipelines = {
            "translation": {"impl": f"{module}.{TranslationPipeline.__name__}", "pt": ["AutoModelForSeq2SeqLM"], "type": "text"}
        }
        return super().save_pretrained(save_directory, *args, **kwargs)

    def resize_token_embeddings(self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None,
                                mean_resizing: bool = True) -> nn.Embedding:
        if not self.config.share_encoder_decoder_embeddings:
            raise ValueError(
                "resize_token_embeddings resizes the shared vocabulary; this model has separate source and target "
                "vocabularies (share_encoder_decoder_embeddings=False)."
            )
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        if self.final_logits_bias is not None:
            old = self.final_logits_bias
            new = old.new_zeros(1, embeddings.num_embeddings)
            keep = min(old.shape[1], new.shape[1])
            new[:, :keep] = old[:, :keep]
            self.final_logits_bias = new
        return embeddings

    def _reorder_cache(self, past_key_values: Cache, beam_idx: torch.LongTensor) -> Cache:
        """Beam search keeps the best beams after each step, and the decoder's own keys and values follow them.

        The cross-attention keys and values are not moved: `beam_idx` only maps a beam of a sentence to a beam of
        the same sentence, and all beams of a sentence hold the same encoder output, so moving them would copy each
        sentence's keys and values onto themselves (per step, as many bytes as the whole cross-attention cache).
        """
        if isinstance(past_key_values, EncoderDecoderCache):
            past_key_values.self_attention_cache.reorder_cache(beam_idx)
        else:
            past_key_values.reorder_cache(beam_idx)
        return past_key_values

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @accepts_cache_keyword
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: tuple | BaseModelOutput | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,
        decoder_inputs_embeds: torch.Tensor | None = None,
        labels: torch.LongTensor | None = None,  # (B, T), -100 where no loss is wanted
        use_cache: bool | None = None,
        **kwargs: Unpack[TransformersKwargs],
    ) -> Seq2SeqLMOutput:
        if labels is not None:
            if labels.dim() != 2:
                raise ValueError(f"labels must have shape (batch_size, target_length), got {tuple(labels.shape)}.")
            check_token_ids(labels.masked_fill(labels == -100, 0), self.config.target_vocab_size, "labels")
            use_cache = False
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # Trainer: target tokens in the whole step

        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            decoder_input_ids=decoder_input_ids,
            decoder_attention_mask=decoder_attention_mask,
            encoder_outputs=encoder_outputs,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            decoder_inputs_embeds=decoder_inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)  # (B, T, V)
        if self.final_logits_bias is not None:
            logits = logits + self.final_logits_bias

        loss = None
        if labels is not None:
            # Mean cross-entropy over the target tokens; over the tokens of the whole optimizer step when Trainer says
            # how many there are (gradient accumulation then sums to the step's mean).
            loss = fixed_cross_entropy(logits.float().view(-1, logits.shape[-1]), labels.view(-1),
                                       num_items_in_batch=num_items_in_batch, ignore_index=-100)

        return Seq2SeqLMOutput(
            loss=loss,
            logits=logits,
            decoder_hidden_states=outputs.decoder_hidden_states,
            decoder_attentions=outputs.decoder_attentions,
            cross_attentions=outputs.cross_attentions,
            encoder_last_hidden_state=outputs.encoder_last_hidden_state,
            encoder_hidden_states=outputs.encoder_hidden_states,
            encoder_attentions=outputs.encoder_attentions,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
        )


# ----------------------------------------------------------------------------------------------------------------
# The other two configurations. The paper's blocks also make the two models that came after it: a decoder alone,
# next-token prediction with masked self-attention and no encoder-decoder attention (GPT), and an encoder alone,
# whose contextual vectors are classified or used to recover masked tokens (BERT). As `BartForCausalLM` reads the
# decoder fields of a `BartConfig`, the class chosen is the configuration: the same `VanillaTransformerConfig` builds
# the decoder-only model from its `decoder_*` fields and the encoder-only models from its `encoder_*` fields. Each
# keeps a copy of the config with `is_encoder_decoder=False` (generate, pipelines and the Trainer read it), so the
# one given is not changed and `from_paper(...)` presets keep meaning the encoder-decoder.


def single_stack_config(config: VanillaTransformerConfig) -> VanillaTransformerConfig:
    """A copy of `config` for a model with one stack: `is_encoder_decoder=False`, and nothing left of a translation
    checkpoint's config it may come from (its pipeline, its model classes in `auto_map`; saving adds this model's)."""
    config = copy.deepcopy(config)
    config.is_encoder_decoder = False
    if "custom_pipelines" in config.__dict__:
        del config.custom_pipelines
    if getattr(config, "auto_map", None):
        config.auto_map = {name: path for name, path in config.auto_map.items() if name == "AutoConfig"}
    return config


class VanillaTransformerForCausalLM(VanillaTransformerPreTrainedModel, GenerationMixin):
    """The decoder-only Transformer: the decoder stack without encoder-decoder attention, each position predicting the
    next token, and the pre-softmax projection sharing the embedding matrix (section 3.4) unless
    `tie_word_embeddings=False`.

    Built from the `decoder_*` fields of the config (`decoder_layers`, `decoder_attention_heads`, `decoder_ffn_dim`,
    `decoder_vocab_size` or else `vocab_size`). `labels` are the input ids themselves (-100 where no loss is wanted),
    shifted inside the model, as `DataCollatorForLanguageModeling(mlm=False)` makes them. `generate` uses a
    `DynamicCache` of the decoder's keys and values (greedy search by default, as for any causal LM) and passes
    `position_ids` counted from each row's first token, so a left-padded prompt gets the positions it has alone.
    """

    def __init__(self, config: VanillaTransformerConfig):
        config = single_stack_config(config)
        super().__init__(config)
        self.model = VanillaTransformerDecoder(config)
        self.lm_head = nn.Linear(config.d_model, config.target_vocab_size, bias=False)
        self._tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
        self.post_init()

    @accepts_cache_keyword
    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, T)
        attention_mask: torch.Tensor | None = None,  # (B, P+T), 1 for tokens, 0 for padding
        position_ids: torch.LongTensor | None = None,  # (B, T); generate counts them from the attention mask
        past_key_values: Cache | None = None,
        inputs_embeds: torch.Tensor | None = None,  # (B, T, D), already scaled
        labels: torch.LongTensor | None = None,  # (B, T): the input ids, -100 where no loss is wanted
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs: Unpack[TransformersKwargs],
    ) -> CausalLMOutputWithPast:
        inputs = input_ids if input_ids is not None else inputs_embeds
        if labels is not None:
            if inputs is not None and tuple(labels.shape) != tuple(inputs.shape[:2]):
                raise ValueError(f"labels must have the shape of input_ids {tuple(inputs.shape[:2])} (they are shifted "
                                 f"inside the model), got {tuple(labels.shape)}.")
            check_token_ids(labels.masked_fill(labels == -100, 0), self.config.target_vocab_size, "labels")
            use_cache = False
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)  # Trainer: target tokens in the whole step
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state  # (B, T, D)
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = self.lm_head(hidden_states[:, keep])  # (B, T or logits_to_keep, V)

        loss = None
        if labels is not None:  # position t predicts token t + 1
            loss = self.loss_function(logits, labels, vocab_size=self.config.target_vocab_size,
                                      num_items_in_batch=num_items_in_batch)
        return CausalLMOutputWithPast(
            loss=loss,
            logits=logits,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
            **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)},
        )


class VanillaTransformerForMaskedLM(VanillaTransformerPreTrainedModel):
    """The encoder-only Transformer trained as BERT is: some input tokens are replaced by a mask token (or a random or
    the same token), and each position predicts the original token from both sides. The projection to the vocabulary
    shares the embedding matrix (section 3.4) unless `tie_word_embeddings=False`.

    Built from the `encoder_*` fields of the config and `vocab_size`. `labels` (B, S) hold the original ids at the
    positions to predict and -100 elsewhere, as `DataCollatorForLanguageModeling` makes them.
    """

    def __init__(self, config: VanillaTransformerConfig):
        config = single_stack_config(config)
        super().__init__(config)
        self.model = VanillaTransformerEncoder(config)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self._tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, S), 1 for tokens, 0 for padding
        inputs_embeds: torch.Tensor | None = None,  # (B, S, D), already scaled
        labels: torch.LongTensor | None = None,  # (B, S): original ids where masked, -100 elsewhere
        **kwargs: Unpack[TransformersKwargs],
    ) -> MaskedLMOutput:
        if labels is not None:
            inputs = input_ids if input_ids is not None else inputs_embeds
            if inputs is not None and tuple(labels.shape) != tuple(inputs.shape[:2]):
                raise ValueError(f"labels must have the shape of input_ids {tuple(inputs.shape[:2])}, "
                                 f"got {tuple(labels.shape)}.")
            check_token_ids(labels.masked_fill(labels == -100, 0), self.config.vocab_size, "labels")
        num_items_in_batch = kwargs.pop("num_items_in_batch", None)
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        logits = self.lm_head(outputs.last_hidden_state)  # (B, S, V)

        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, vocab_size=self.config.vocab_size,
                                      num_items_in_batch=num_items_in_batch)
        return MaskedLMOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                              attentions=outputs.attentions)


class VanillaTransformerForSequenceClassification(VanillaTransformerPreTrainedModel):
    """The encoder-only Transformer as a sequence classifier (or regressor).

    Pooling: the mean of the encoder's output vectors over the tokens of each sequence, the padding left out
    (`attention_mask`; without one, every position counts); then dropout and one linear layer to `num_labels` scores.
    A sentence therefore gets the same scores alone or padded in a batch, and no special classification token is
    needed.

    The loss follows `config.problem_type` as in transformers: "regression" (mean squared error; the default for
    `num_labels=1`), "single_label_classification" (cross-entropy; the default for integer labels) or
    "multi_label_classification" (binary cross-entropy per label; the default for float labels).
    Built from the `encoder_*` fields of the config and `vocab_size`.
    """

    def __init__(self, config: VanillaTransformerConfig):
        config = single_stack_config(config)
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = VanillaTransformerEncoder(config)
        self.classifier = nn.Linear(config.d_model, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,  # (B, S)
        attention_mask: torch.Tensor | None = None,  # (B, S), 1 for tokens, 0 for padding
        inputs_embeds: torch.Tensor | None = None,  # (B, S, D), already scaled
        labels: torch.Tensor | None = None,  # (B,) class ids, (B, num_labels) floats, or (B,) / (B, 1) targets
        **kwargs: Unpack[TransformersKwargs],
    ) -> SequenceClassifierOutput:
        kwargs.pop("num_items_in_batch", None)  # one label per sequence: the mean over the batch is the loss
        outputs = self.model(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)
        hidden_states = outputs.last_hidden_state  # (B, S, D)
        if attention_mask is None:
            pooled = hidden_states.mean(dim=1)  # (B, D)
        else:
            weights = attention_mask.to(hidden_states.dtype).unsqueeze(-1)  # (B, S, 1)
            pooled = (hidden_states * weights).sum(dim=1) / weights.sum(dim=1).clamp(min=1.0)  # (B, D)
        pooled = F.dropout(pooled, p=self.config.dropout, training=self.training)
        logits = self.classifier(pooled)  # (B, num_labels)

        loss = None
        if labels is not None:
            self.check_labels(labels, logits.shape[0])
            loss = self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=outputs.hidden_states,
                                        attentions=outputs.attentions)

    def check_labels(self, labels: torch.Tensor, batch: int) -> None:
        """A ValueError for labels that do not fit the problem type, before a loss would fail or broadcast."""
        num_labels = self.config.num_labels
        problem_type = self.config.problem_type
        if problem_type is None:  # as transformers infers it
            integer = labels.dtype in (torch.long, torch.int)
            problem_type = ("regression" if num_labels == 1 else "single_label_classification" if integer
                            else "multi_label_classification")
        if problem_type == "single_label_classification":
            if labels.shape != (batch,) or labels.is_floating_point():
                raise ValueError(f"Single-label classification needs labels of shape ({batch},) holding class ids, "
                                 f"got {labels.dtype} labels of shape {tuple(labels.shape)}.")
            bad = (labels < 0) | (labels >= num_labels)
            if not is_torchdynamo_compiling() and bad.any():
                raise ValueError(f"labels contains class {int(labels[bad][0])}, but this model has {num_labels} labels "
                                 f"(valid classes are 0..{num_labels - 1}).")
        elif problem_type == "multi_label_classification":
            if labels.shape != (batch, num_labels):
                raise ValueError(f"Multi-label classification needs labels of shape ({batch}, {num_labels}) "
                                 f"(one 0/1 value per label), got {tuple(labels.shape)}.")
        elif labels.numel() != batch * num_labels:
            raise ValueError(f"Regression needs {num_labels} target(s) per sequence, got labels of shape "
                             f"{tuple(labels.shape)} for a batch of {batch}.")


__all__ = [
    "LENGTH_BOUND",
    "MAX_LENGTH_A",
    "MAX_LENGTH_B",
    "SourceLengthBound",
    "length_bound_setting",
    "max_target_lengths",
    "source_token_counts",
    "VanillaTransformerPreTrainedModel",
    "VanillaTransformerEncoder",
    "VanillaTransformerDecoder",
    "VanillaTransformerModel",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForMaskedLM",
    "VanillaTransformerForSequenceClassification",
    "sinusoidal_position_encoding",
    "shift_tokens_right",
]
