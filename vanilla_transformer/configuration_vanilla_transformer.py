"""Configuration of the encoder-decoder Transformer of "Attention Is All You Need" (Vaswani et al., 2017).

This file is copied next to the weights by `save_pretrained` (Hub remote code), so it imports only
`transformers`, its dependency `huggingface_hub`, the standard library and its sibling `compat.py` (copied with it).
"""
# ruff: noqa: I001  (the version check is imported before transformers on purpose)

import difflib

# First: it stops an unsupported transformers with one line, before anything below can fail on it.
from .compat import SUPPORTED_TRANSFORMERS, check_transformers_version  # noqa: F401  (re-exported)

from huggingface_hub.dataclasses import strict  # noqa: E402
from transformers import PreTrainedConfig  # noqa: E402  (after the version check: 4.x spells it PretrainedConfig)

# config.json names the translation pipeline in `custom_pipelines` (see
# VanillaTransformerForConditionalGeneration.save_pretrained), so that `pipeline("translation", model=folder,
# trust_remote_code=True)` works where this package is not installed. Which copy of this file is running says whether
# the entry is wanted, so nothing needs to set a flag from outside:
# - the installed package's module (`vanilla_transformer.configuration_vanilla_transformer`, imported only through the
#   package, whose import registers its TranslationPipeline for "translation") leaves the entry out of the configs it
#   loads, because `pipeline()` insists on trust_remote_code for any task a config lists there;
# - a copy loaded as remote code (`transformers_modules.<folder>.configuration_vanilla_transformer`) keeps it: there
#   the folder's own pipeline file is the one that serves "translation".
_INSTALLED_PACKAGE = __name__ == "vanilla_transformer.configuration_vanilla_transformer"

ACTIVATIONS = ("relu", "gelu", "gelu_new", "swish", "silu")
POSITION_EMBEDDING_TYPES = ("sinusoidal", "learned")
SINUSOIDAL_LAYOUTS = ("interleaved", "concatenated")
SINUSOIDAL_FREQUENCIES = ("paper", "tensor2tensor")

# Table 3 of the paper. "base" is the default of `VanillaTransformerConfig()`.
PAPER_PRESETS = {
    "base": dict(d_model=512, encoder_ffn_dim=2048, decoder_ffn_dim=2048, encoder_attention_heads=8,
                 decoder_attention_heads=8, encoder_layers=6, decoder_layers=6, dropout=0.1),
    "big": dict(d_model=1024, encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_attention_heads=16,
                decoder_attention_heads=16, encoder_layers=6, decoder_layers=6, dropout=0.3),
}


@strict
class VanillaTransformerConfig(PreTrainedConfig):
    r"""
    Configuration of [`VanillaTransformerModel`] / [`VanillaTransformerForConditionalGeneration`].

    The defaults are the paper's base model (Table 3): d_model 512, 8 heads, d_ff 2048, 6 + 6 layers, dropout 0.1,
    post-LayerNorm residual blocks, ReLU, sinusoidal positions, and one embedding matrix shared by the encoder
    input, the decoder input and the pre-softmax projection, scaled by sqrt(d_model) (section 3.4).
    `VanillaTransformerConfig.from_paper("big")` gives the big model.

    Names follow BART/Marian. What the paper needs beyond them:

    - `normalize_before` (`bool`, defaults to `False`): pre-LayerNorm blocks (`x + Sublayer(LayerNorm(x))`, with a
      final LayerNorm after each stack) instead of the paper's post-LayerNorm (`LayerNorm(x + Sublayer(x))`).
    - `attention_key_dim` (`int`, *optional*): d_k, the width of each head's queries and keys (section 3.2.2);
      `None` means d_model / heads. The values keep d_v = d_model / heads, so the heads still concatenate to
      d_model: Table 3, row B, which shrinks d_k alone.
    - `position_embedding_type` (`"sinusoidal"` or `"learned"`): section 3.5 uses sinusoids and reports that learned
      positions give nearly identical results (Table 3, row E).
    - `sinusoidal_layout` (`"interleaved"` or `"concatenated"`): the paper puts sin on even and cos on odd
      dimensions; tensor2tensor, Marian and fairseq put all sines first, then all cosines.
    - `sinusoidal_frequencies` (`"paper"` or `"tensor2tensor"`): wavelengths 10000^(2i/d_model) as in the paper,
      or 10000^(i/(d_model/2 - 1)) as in tensor2tensor and fairseq.
    - `position_offset` (`int`): added to every position before encoding it (fairseq starts at `pad_token_id + 1`).
    - `skip_padding_positions` (`bool`, defaults to `False`): fairseq's numbering, where positions count only the
      tokens that are not `pad_token_id` and padding tokens get a zero positional encoding. Needs `input_ids`;
      with `inputs_embeds` every position counts.
    - `decoder_vocab_size` (`int`, *optional*): size of a separate target vocabulary; `None` means the shared one.
    - `share_encoder_decoder_embeddings` (`bool`): one embedding matrix for source and target (needs one vocabulary).
    - `add_final_logits_bias` (`bool`): a bias on the output logits (Marian checkpoints have one).
    - `layer_norm_eps` (`float`): epsilon of every LayerNorm.
    - `init_std` (`float`, *optional*): standard deviation of the embedding initialisation; `None` means
      d_model^-0.5, so that embeddings scaled by sqrt(d_model) start with unit variance. Linear layers use Xavier
      uniform as in tensor2tensor, the paper's reference code.

    Like every transformers v5 config this is a `@strict` dataclass: a value of the wrong type raises
    `StrictDataclassFieldValidationError`, and `validate_architecture` (run after `__init__`, by `validate()` and by
    `save_pretrained`) raises `StrictDataclassClassValidationError` with one message that lists every invalid value.
    Keyword arguments that are not fields are kept as attributes, as transformers does, except a likely misspelling
    of a field (`normalise_before=True`), which is an error naming the field meant.
    """

    model_type = "vanilla_transformer"
    keys_to_ignore_at_inference = ["past_key_values"]
    attribute_map = {
        "hidden_size": "d_model",
        "num_attention_heads": "encoder_attention_heads",
        "num_hidden_layers": "decoder_layers",
    }

    # `None` is no valid size (validate_architecture says so), but the type allows it: transformers' decoder view of
    # this flat encoder-decoder config, `get_text_config(decoder=True)` (used by generate), copies `decoder_vocab_size`
    # over `vocab_size`, and that is `None` for the shared vocabulary.
    vocab_size: int | None = 37000
    decoder_vocab_size: int | None = None
    d_model: int = 512
    encoder_layers: int = 6
    decoder_layers: int = 6
    encoder_attention_heads: int = 8
    decoder_attention_heads: int = 8
    attention_key_dim: int | None = None
    encoder_ffn_dim: int = 2048
    decoder_ffn_dim: int = 2048
    dropout: float | int = 0.1
    attention_dropout: float | int = 0.0
    activation_dropout: float | int = 0.0
    activation_function: str = "relu"
    max_position_embeddings: int = 1024
    position_embedding_type: str = "sinusoidal"
    sinusoidal_layout: str = "interleaved"
    sinusoidal_frequencies: str = "paper"
    position_offset: int = 0
    skip_padding_positions: bool = False
    scale_embedding: bool = True
    normalize_before: bool = False
    layer_norm_eps: float | int = 1e-5
    init_std: float | int | None = None
    share_encoder_decoder_embeddings: bool = True
    add_final_logits_bias: bool = False
    tie_word_embeddings: bool = True
    use_cache: bool = True
    is_encoder_decoder: bool = True
    pad_token_id: int | None = 0
    bos_token_id: int | None = 1
    eos_token_id: int | list[int] | None = 2
    decoder_start_token_id: int | None = 1
    forced_eos_token_id: int | list[int] | None = None

    @classmethod
    def from_paper(cls, size: str = "base", **kwargs) -> "VanillaTransformerConfig":
        """The paper's `"base"` or `"big"` model (Table 3); keyword arguments override any value."""
        if size not in PAPER_PRESETS:
            raise ValueError(f"Unknown paper configuration {size!r}; choose one of {sorted(PAPER_PRESETS)}.")
        return cls(**{**PAPER_PRESETS[size], **kwargs})

    def __post_init__(self, **kwargs):
        if _INSTALLED_PACKAGE:
            kwargs.pop("custom_pipelines", None)
        super().__post_init__(**kwargs)

    @property
    def target_vocab_size(self) -> int:
        """Rows of the decoder embedding and of the output projection."""
        return self.decoder_vocab_size if self.decoder_vocab_size is not None else self.vocab_size

    def validate_architecture(self):
        """Part of `@strict`-powered validation: every value the model cannot be built with, in one message."""
        super().validate_architecture()
        problems = self._misspelled_fields()
        if self.vocab_size is None:
            problems.append("vocab_size=None must be a positive number of tokens")
        for name in ("vocab_size", "d_model", "encoder_layers", "decoder_layers", "encoder_attention_heads",
                     "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "max_position_embeddings"):
            if getattr(self, name) is not None and getattr(self, name) <= 0:
                problems.append(f"{name}={getattr(self, name)} must be positive")
        if self.attention_key_dim is not None and self.attention_key_dim <= 0:
            problems.append(f"attention_key_dim={self.attention_key_dim} must be positive")
        if self.decoder_vocab_size is not None and self.decoder_vocab_size <= 0:
            problems.append(f"decoder_vocab_size={self.decoder_vocab_size} must be positive")
        for side in ("encoder", "decoder"):
            heads = getattr(self, f"{side}_attention_heads")
            if heads > 0 and self.d_model % heads != 0:
                problems.append(f"d_model={self.d_model} is not divisible by {side}_attention_heads={heads}")
        for name in ("dropout", "attention_dropout", "activation_dropout"):
            value = getattr(self, name)
            if not 0.0 <= value < 1.0:
                problems.append(f"{name}={value} must be in [0, 1)")
        for name, allowed in (("activation_function", ACTIVATIONS), ("position_embedding_type", POSITION_EMBEDDING_TYPES),
                              ("sinusoidal_layout", SINUSOIDAL_LAYOUTS),
                              ("sinusoidal_frequencies", SINUSOIDAL_FREQUENCIES)):
            if getattr(self, name) not in allowed:
                problems.append(f"{name}={getattr(self, name)!r} is not one of {list(allowed)}")
        if self.position_embedding_type == "sinusoidal" and self.d_model % 2 != 0:
            problems.append(f"sinusoidal positions need an even d_model, got d_model={self.d_model}")
        if self.position_offset < 0:
            problems.append(f"position_offset={self.position_offset} must not be negative")
        if self.skip_padding_positions and self.pad_token_id is None:
            problems.append("skip_padding_positions=True needs a pad_token_id")
        if self.layer_norm_eps <= 0:
            problems.append(f"layer_norm_eps={self.layer_norm_eps} must be positive")
        if self.init_std is not None and self.init_std <= 0:
            problems.append(f"init_std={self.init_std} must be positive")
        if (self.share_encoder_decoder_embeddings and self.decoder_vocab_size is not None
                and self.decoder_vocab_size != self.vocab_size):
            problems.append(
                f"share_encoder_decoder_embeddings=True needs one vocabulary, but vocab_size={self.vocab_size} "
                f"and decoder_vocab_size={self.decoder_vocab_size}"
            )
        for name in ("pad_token_id", "bos_token_id", "decoder_start_token_id"):
            value = getattr(self, name)
            if value is not None and self.target_vocab_size is not None and not 0 <= value < self.target_vocab_size:
                problems.append(f"{name}={value} is outside the target vocabulary of {self.target_vocab_size} tokens")
        if problems:
            raise ValueError("Invalid VanillaTransformerConfig: " + "; ".join(problems) + ".")

    def _misspelled_fields(self) -> list[str]:
        """Attributes set from unknown keyword arguments whose names are close to one of our own fields.

        transformers keeps any unknown key as an attribute (config.json files carry `architectures`, `auto_map`,
        `transformers_version`, ...), so only a near miss of a field this class adds is reported: it is a typo
        that would otherwise build a different model than the one asked for.
        """
        ours = [name for name in self.__dataclass_fields__ if name not in PreTrainedConfig.__dataclass_fields__
                and not name.endswith("_token_id")]
        problems = []
        for key in vars(self):
            if (key in self.__dataclass_fields__ or key.startswith("_") or key.endswith("_token_id")
                    or hasattr(PreTrainedConfig, key) or key in self.attribute_map):
                continue
            close = difflib.get_close_matches(key, ours, n=3, cutoff=0.8)
            if close:
                problems.append(f"{key} is not a field (did you mean {' or '.join(close)}?)")
        return problems


__all__ = ["VanillaTransformerConfig", "PAPER_PRESETS"]
