"""Convert Marian (OPUS-MT) and FSMT (fairseq WMT19) checkpoints into `VanillaTransformerForConditionalGeneration`.

Both families are the Transformer of the paper with a few variations, and each variation is an option of
`VanillaTransformerConfig`, so a converted checkpoint computes the same function as the original:

| | Marian (`MarianMTModel`) | FSMT (`FSMTForConditionalGeneration`) |
|---|---|---|
| positions | sin/cos halves, paper wavelengths, from 0 | sin/cos halves, t2t wavelengths, from pad + 1, skip padding |
| activation | from the config (swish in OPUS-MT) | from the config (relu) |
| vocabularies | shared, or separate source and target | separate, with an untied output projection |
| output | `final_logits_bias` | no bias |
| decoder start | `<pad>` | `</s>` |

The layer weights have the same names in all three (BART's: `self_attn.q_proj`, `fc1`, ...) and are copied name for
name with shape checks; only the embeddings and the output projection change names. The generation config and the
tokenizer files are carried over, and the model card names the origin.

    vanilla-transformer convert marian path/to/opus-mt-en-de opus-mt-en-de-vanilla
"""

import json
from collections.abc import Callable
from pathlib import Path

import torch
import transformers
from huggingface_hub.errors import StrictDataclassError
from transformers import AutoTokenizer, GenerationConfig
from transformers.utils import logging

from vanilla_transformer.cards.model_card import converted_model_card, hub_id_from_path
from vanilla_transformer.checkpoints.kinds import CheckpointError, tokenizer_errors
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.configuration_vanilla_transformer import ACTIVATIONS, VanillaTransformerConfig
from vanilla_transformer.extras import check_extra
from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.paths import check_output_folder
from vanilla_transformer.files.staging import staged_folder
from vanilla_transformer.interop import FAMILIES
from vanilla_transformer.modeling_vanilla_transformer import (
    VanillaTransformerForConditionalGeneration,
    sinusoidal_position_encoding,
)

logger = logging.get_logger(__name__)


class ConversionError(ValueError):
    """The source cannot be converted: another model type, a missing file or weight, or an inconsistent checkpoint."""


# The source's positional tables are not weights of ours: they must equal the sinusoids our config computes. fairseq
# builds its table in float32, which is off by up to ~7e-5 at position 1024 (ours is computed in float64).
POSITION_TABLE_ATOL = 1e-3
POSITION_TABLES = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")


# ----------------------------------------------------------------------------------------------------------------
# Configs: each source option becomes the option of ours that computes the same thing.


def _shared_options(source) -> dict:
    """The options Marian and FSMT both take from BART's names: sizes, dropouts, activation, special tokens."""
    if source.activation_function not in ACTIVATIONS:
        raise ConversionError(
            f"activation_function={source.activation_function!r} is not supported; this model knows "
            f"{list(ACTIVATIONS)}."
        )
    return dict(
        d_model=source.d_model,
        encoder_layers=source.encoder_layers,
        decoder_layers=source.decoder_layers,
        encoder_attention_heads=source.encoder_attention_heads,
        decoder_attention_heads=source.decoder_attention_heads,
        encoder_ffn_dim=source.encoder_ffn_dim,
        decoder_ffn_dim=source.decoder_ffn_dim,
        dropout=source.dropout,
        attention_dropout=source.attention_dropout,
        activation_dropout=source.activation_dropout,
        activation_function=source.activation_function,
        max_position_embeddings=source.max_position_embeddings,
        position_embedding_type="sinusoidal",
        sinusoidal_layout="concatenated",  # both put all sines first, then all cosines
        scale_embedding=source.scale_embedding,
        normalize_before=False,  # both are post-LayerNorm, as the paper
        layer_norm_eps=1e-5,  # both use nn.LayerNorm's default
        init_std=source.init_std,
        pad_token_id=source.pad_token_id,
        bos_token_id=source.bos_token_id,
        eos_token_id=source.eos_token_id,
        decoder_start_token_id=source.decoder_start_token_id,
        forced_eos_token_id=source.forced_eos_token_id,
    )


def marian_config(source) -> VanillaTransformerConfig:
    """The config of ours that computes what `MarianMTModel` computes with `source` (a `MarianConfig`)."""
    shared = source.share_encoder_decoder_embeddings
    return VanillaTransformerConfig(
        **_shared_options(source),
        vocab_size=source.vocab_size,
        decoder_vocab_size=None if shared else source.decoder_vocab_size,
        share_encoder_decoder_embeddings=shared,
        tie_word_embeddings=source.tie_word_embeddings,
        add_final_logits_bias=True,
        sinusoidal_frequencies="paper",  # MarianSinusoidalPositionalEmbedding: pos / 10000^(2i/d_model)
        position_offset=0,
    )


def fsmt_config(source) -> VanillaTransformerConfig:
    """The config of ours that computes what `FSMTForConditionalGeneration` computes with `source` (an `FSMTConfig`)."""
    tied = source.tie_word_embeddings  # FSMT ties the source, target and output matrices together, or none of them
    return VanillaTransformerConfig(
        **_shared_options(source),
        vocab_size=source.src_vocab_size,
        decoder_vocab_size=source.tgt_vocab_size,
        share_encoder_decoder_embeddings=tied,
        tie_word_embeddings=tied,
        add_final_logits_bias=False,
        sinusoidal_frequencies="tensor2tensor",  # fairseq: 10000^(i/(d_model/2 - 1))
        position_offset=source.pad_token_id + 1,  # fairseq's make_positions: the first token is at pad + 1
        skip_padding_positions=True,  # ... and padding tokens have no position
    )


CONFIG_CONVERTERS: dict[str, Callable] = {"marian": marian_config, "fsmt": fsmt_config}


# ----------------------------------------------------------------------------------------------------------------
# Weights: our key -> the source key whose tensor it is.

# The layers of both families are named as BART's, and so are ours: every layer weight is copied name for name.
ATTENTION_WEIGHTS = ("q_proj", "k_proj", "v_proj", "out_proj")
ENCODER_LAYER_WEIGHTS = (*(f"self_attn.{w}" for w in ATTENTION_WEIGHTS), "self_attn_layer_norm", "fc1", "fc2",
                         "final_layer_norm")
DECODER_LAYER_WEIGHTS = (*ENCODER_LAYER_WEIGHTS, *(f"encoder_attn.{w}" for w in ATTENTION_WEIGHTS),
                         "encoder_attn_layer_norm")


def layer_weight_map(encoder_layers: int, decoder_layers: int) -> dict[str, str]:
    mapping = {}
    for side, count, names in (("encoder", encoder_layers, ENCODER_LAYER_WEIGHTS),
                               ("decoder", decoder_layers, DECODER_LAYER_WEIGHTS)):
        for i in range(count):
            for name in names:
                for p in ("weight", "bias"):
                    key = f"model.{side}.layers.{i}.{name}.{p}"
                    mapping[key] = key
    return mapping


def marian_weight_map(source_config) -> dict[str, str]:
    mapping = layer_weight_map(source_config.encoder_layers, source_config.decoder_layers)
    shared = source_config.share_encoder_decoder_embeddings
    mapping.update({
        # ours always names the source embedding `shared`; Marian only when it is shared
        "model.shared.weight": "model.shared.weight" if shared else "model.encoder.embed_tokens.weight",
        "model.encoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.decoder.embed_tokens.weight",
        "lm_head.weight": "lm_head.weight",
        "final_logits_bias": "final_logits_bias",
    })
    return mapping


def fsmt_weight_map(source_config) -> dict[str, str]:
    mapping = layer_weight_map(source_config.encoder_layers, source_config.decoder_layers)
    mapping.update({
        "model.shared.weight": "model.encoder.embed_tokens.weight",
        "model.encoder.embed_tokens.weight": "model.encoder.embed_tokens.weight",
        "model.decoder.embed_tokens.weight": "model.decoder.embed_tokens.weight",
        "lm_head.weight": "model.decoder.output_projection.weight",
    })
    return mapping


WEIGHT_MAPS: dict[str, Callable] = {"marian": marian_weight_map, "fsmt": fsmt_weight_map}


def map_weights(model: torch.nn.Module, source_state: dict[str, torch.Tensor], mapping: dict[str, str]
                ) -> dict[str, torch.Tensor]:
    """Our state dict, filled from `source_state` by `mapping`, with every shape checked and every source key used."""
    ours = model.state_dict()
    if set(ours) != set(mapping):  # a bug of this file, not of the checkpoint
        raise RuntimeError(f"The weight map does not cover the model: {sorted(set(ours) ^ set(mapping))[:8]}")
    state = {}
    for key, target in ours.items():
        source_key = mapping[key]
        if source_key not in source_state:
            raise ConversionError(f"The source checkpoint has no weight {source_key!r} (needed for {key!r}).")
        tensor = source_state[source_key]
        if tensor.shape != target.shape:
            raise ConversionError(
                f"{source_key} has shape {tuple(tensor.shape)}, but the converted config makes {key!r} "
                f"{tuple(target.shape)}: the checkpoint's weights do not match its config."
            )
        state[key] = tensor

    # Weights tied in our model (one tensor under several names) must come from equal source tensors.
    names_by_tensor = {}
    for key, target in ours.items():
        names_by_tensor.setdefault(target.data_ptr(), []).append(key)
    for names in names_by_tensor.values():
        first = names[0]
        for other in names[1:]:
            if not torch.equal(state[first], state[other]):
                raise ConversionError(
                    f"{mapping[first]!r} and {mapping[other]!r} differ, but the source config says they are one "
                    "tied matrix: the checkpoint is inconsistent."
                )

    unused = sorted(set(source_state) - set(mapping.values()) - set(POSITION_TABLES))
    if unused:
        raise ConversionError(f"The source checkpoint has weights this conversion does not know: {unused[:5]}.")
    return state


def check_position_tables(source_state: dict[str, torch.Tensor], config: VanillaTransformerConfig) -> None:
    """The source's sinusoid tables (row i encodes position i) must be the sinusoids our config computes."""
    for key in POSITION_TABLES:
        table = source_state.get(key)
        if table is None:
            continue
        rows = torch.arange(table.shape[0])
        expected = sinusoidal_position_encoding(rows, config.d_model, config.sinusoidal_layout,
                                                config.sinusoidal_frequencies)
        if config.skip_padding_positions:  # fairseq's row `pad` is zeros: padding has no position
            expected[config.position_offset - 1] = 0.0
        error = (table.double() - expected).abs().max().item()
        if error > POSITION_TABLE_ATOL:
            raise ConversionError(
                f"{key} differs from the sinusoids ({config.sinusoidal_layout}, {config.sinusoidal_frequencies}) by "
                f"{error:.3g}: the checkpoint does not use the positional encoding of its model type."
            )


# ----------------------------------------------------------------------------------------------------------------
# Reading the source folder.


def _read_source_config(kind: str, src: Path) -> dict:
    family = FAMILIES[kind]
    if not src.is_dir():
        raise ConversionError(f"{src} is not a folder; pass the folder of a saved {family.title} checkpoint.")
    config_file = src / "config.json"
    if not config_file.is_file():
        raise ConversionError(f"{src} has no config.json; pass the folder of a saved {family.title} checkpoint.")
    try:
        raw = json.loads(config_file.read_text())
    except json.JSONDecodeError as error:
        raise ConversionError(f"{config_file} is not valid JSON: {error}.") from None
    model_type = raw.get("model_type")
    if model_type != family.model_type:
        hint = next((f" Use `convert {other}` for it." for other, f in FAMILIES.items() if f.model_type == model_type),
                    "")
        raise ConversionError(
            f"{src} holds a {model_type!r} checkpoint, but `convert {kind}` takes {family.title} checkpoints "
            f"(model_type {family.model_type!r})." + hint
        )
    architectures = raw.get("architectures") or [family.architecture]
    if family.architecture not in architectures:
        raise ConversionError(
            f"{src} holds a {architectures[0]}; only {family.architecture} (encoder and decoder) can be converted."
        )
    return raw


def _load_source_model(kind: str, src: Path):
    family = FAMILIES[kind]
    model_class = getattr(transformers, family.architecture)
    try:
        check_checkpoint(src, need_tokenizer=False)  # unreadable or truncated weights, wrong shapes, ...
    except CheckpointError as error:
        raise ConversionError(str(error)) from None
    try:
        model, info = model_class.from_pretrained(src, output_loading_info=True)
    except OSError as error:  # no weight file at all
        raise ConversionError(f"Cannot load the {family.title} weights from {src}: {error}") from None
    except (RuntimeError, ValueError) as error:  # e.g. a weight whose shape disagrees with config.json
        raise ConversionError(f"The {family.title} checkpoint in {src} is inconsistent: {error}") from None
    missing = sorted(set(info["missing_keys"]) - set(POSITION_TABLES))  # sinusoid tables may be left out
    if missing:
        raise ConversionError(f"The checkpoint in {src} lacks {len(missing)} weight(s), e.g. {missing[:3]}.")
    if info["unexpected_keys"]:
        raise ConversionError(
            f"The checkpoint in {src} has weights a {family.architecture} does not have, e.g. "
            f"{sorted(info['unexpected_keys'])[:3]}."
        )
    return model


def _load_source_tokenizer(kind: str, src: Path, config: VanillaTransformerConfig):
    family = FAMILIES[kind]
    missing = [name for name in family.tokenizer_files if not (src / name).is_file()]
    if missing:
        raise ConversionError(
            f"{src} has no {family.title} tokenizer (missing {', '.join(missing)}); pass tokenizer=False "
            "(--no-tokenizer) to convert the model alone."
        )
    try:
        check_extra([family.tokenizer_package], "convert", f"The {family.title} tokenizer")
    except ImportError as error:
        raise ConversionError(str(error)) from None

    with tokenizer_errors(str(src)):  # a damaged tokenizer file: one line naming it
        tokenizer = AutoTokenizer.from_pretrained(src)
    for name in ("pad_token_id", "eos_token_id"):  # FSMT's tokenizer has no eos_token (it ends inputs with sep)
        if getattr(tokenizer, name) is not None and getattr(tokenizer, name) != getattr(config, name):
            raise ConversionError(
                f"The tokenizer in {src} has {name}={getattr(tokenizer, name)} but the model has "
                f"{name}={getattr(config, name)}: they do not belong together."
            )
    return tokenizer


def _source_generation_config(src: Path, raw_config: dict):
    """The source's generation_config.json, or the generation settings of its config.json in older checkpoints."""
    if (src / "generation_config.json").is_file():
        return GenerationConfig.from_pretrained(src)
    return GenerationConfig.from_model_config(raw_config)


def _languages(kind: str, source_config, tokenizer) -> tuple[str | None, str | None]:
    if kind == "fsmt" and len(getattr(source_config, "langs", ()) or ()) == 2:
        return source_config.langs[0], source_config.langs[1]
    if tokenizer is not None:
        return getattr(tokenizer, "source_lang", None), getattr(tokenizer, "target_lang", None)
    return None, None


# ----------------------------------------------------------------------------------------------------------------
# The conversion.


def convert(kind: str, src_dir: str | Path, out_dir: str | Path, *, base_model: str | None = None,
            tokenizer: bool = True, overwrite: bool = False) -> VanillaTransformerForConditionalGeneration:
    """Convert the saved checkpoint folder `src_dir` of `kind` ("marian" or "fsmt") into a folder of ours.

    `out_dir` gets the model (config.json, model.safetensors, generation_config.json, the model code for
    `trust_remote_code`), the source's tokenizer files unless `tokenizer=False`, and a README.md model card naming
    the origin: `base_model` (a Hub id), or the id read off a Hugging Face cache path. Returns the converted model.
    Raises `ConversionError` for a source that cannot be converted.
    """
    if kind not in FAMILIES:
        raise ConversionError(f"Unknown checkpoint kind {kind!r}; choose one of {sorted(FAMILIES)}.")
    src, out = Path(src_dir), Path(out_dir)
    raw_config = _read_source_config(kind, src)
    check_conversion_output(out, overwrite, src)

    source = _load_source_model(kind, src)
    try:
        config = CONFIG_CONVERTERS[kind](source.config)
    except ConversionError:
        raise
    except (ValueError, StrictDataclassError) as error:  # our config's own checks, e.g. an odd d_model with sinusoids
        reason = error.__cause__ or error  # the strict config wraps the ValueError that lists the problems
        raise ConversionError(f"The {FAMILIES[kind].title} config in {src} cannot be expressed: {reason}") from None
    for name in ("encoder_layerdrop", "decoder_layerdrop"):
        if getattr(source.config, name, 0.0):
            logger.warning(f"{name}={getattr(source.config, name)} is not carried over: this model has no LayerDrop "
                           "(it only acts in training).")
    source_tokenizer = _load_source_tokenizer(kind, src, config) if tokenizer else None

    source_state = source.state_dict()
    check_position_tables(source_state, config)
    model = VanillaTransformerForConditionalGeneration(config).to(source.dtype)
    model.load_state_dict(map_weights(model, source_state, WEIGHT_MAPS[kind](source.config)), strict=True)
    model.generation_config = _source_generation_config(src, raw_config)
    model.eval()
    family = FAMILIES[kind]
    card = converted_model_card(model, out, src, family_title=family.title, architecture=family.architecture,
                                kind=kind, base_model=base_model or hub_id_from_path(src),
                                languages=_languages(kind, source.config, source_tokenizer))

    with staged_folder(out, overwrite=overwrite, inputs=[src]) as folder:
        model.save_pretrained(folder)
        if source_tokenizer is not None:
            source_tokenizer.save_pretrained(folder)
        card.save(Path(folder) / "README.md")
    return model


def check_conversion_output(out: Path, overwrite: bool, src: Path) -> None:
    """Refuse (`ConversionError`, one line) an output folder the conversion must not write
    (`files.paths.check_output_folder`): one that is, contains or lies inside the source (even with `overwrite`), a
    file, a place that cannot be written, an existing non-empty folder without `overwrite`, and with `overwrite` one
    holding anything this project did not write (its manifest says what it wrote)."""
    try:
        check_output_folder(out, overwrite=overwrite, inputs=[src])
    except OutputError as error:
        raise ConversionError(str(error)) from None


def convert_marian(src_dir: str | Path, out_dir: str | Path, **kwargs) -> VanillaTransformerForConditionalGeneration:
    """Convert a saved `MarianMTModel` folder (an OPUS-MT checkpoint); see `convert`."""
    return convert("marian", src_dir, out_dir, **kwargs)


def convert_fsmt(src_dir: str | Path, out_dir: str | Path, **kwargs) -> VanillaTransformerForConditionalGeneration:
    """Convert a saved `FSMTForConditionalGeneration` folder (a fairseq WMT19 checkpoint); see `convert`."""
    return convert("fsmt", src_dir, out_dir, **kwargs)


__all__ = ["ConversionError", "convert", "convert_fsmt", "convert_marian", "fsmt_config", "marian_config"]
