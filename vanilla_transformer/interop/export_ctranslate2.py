"""Export a checkpoint to CTranslate2, OpenNMT's inference engine (the engine that translates with the exported
folder is `ctranslate2_runtime.CTranslate2Translator`).

    vanilla-transformer export ctranslate2 outputs/multi30k multi30k-ct2 --quantization int8
    vanilla-transformer translate --model multi30k-ct2 --input test.en --output test.de

CTranslate2's `TransformerSpec` describes the architecture of the paper with every variation our config offers, so
the export is a mapping, written here with CTranslate2's own spec API:

| ours (`VanillaTransformerConfig`) | CTranslate2 (`TransformerSpec`) |
|---|---|
| `normalize_before` | `pre_norm` (and the final LayerNorm of each stack) |
| `activation_function` relu / gelu / gelu_new / swish, silu | `Activation.RELU` / `GELU` / `GELUTanh` / `SWISH` |
| sinusoids (any layout and frequencies), learned positions, `position_offset` | an explicit `position_encodings` table |
| `skip_padding_positions` (fairseq) | the same table: CTranslate2 pads on the right, where the numbering is equal |
| `scale_embedding` | `scale_embeddings` = sqrt(d_model) or 1 |
| `q_proj`, `k_proj`, `v_proj`, `out_proj` | `linear[0]` = (q, k, v) fused; cross-attention `linear[0]` = q, `linear[1]` = (k, v) |
| separate vocabularies, untied `lm_head`, `final_logits_bias` | source / target vocabulary, `projection` weight and bias |
| `decoder_start_token_id`, `eos_token_id`, `layer_norm_eps` | `decoder_start_token`, `eos_token`, `layer_norm_epsilon` |

Sinusoids are written as a table of max(`max_position_embeddings`, 1024) positions (learned positions as the
`max_position_embeddings` they have); CTranslate2 refuses longer inputs and outputs with an error naming the length.
config.json records that number under `max_positions` (`ctranslate2_runtime.MAX_POSITIONS`), where the server
reads its length limit; CTranslate2 ignores the key. A checkpoint whose model card names its language pair has
it recorded under `languages` ([source, target]), where `serve` finds it.

The folder holds CTranslate2's model.bin, config.json and vocabularies, the checkpoint's tokenizer files and its
generation_config.json, whose decoding defaults (beam size, length penalty, maximum length, tokens never to generate)
`CTranslate2Translator` applies as `generate` does. The vocabularies list the tokenizer's token strings by id; the
translator maps ids to those strings and back, so the tokenizer's own special-token handling and decoding apply.
tokenizer_fingerprint.json records the SHA-256 of the tokenizer files: a folder whose tokenizer was replaced is
refused when loaded (its vocabularies would no longer be the tokenizer's).
"""  # noqa: E501  (the mapping table's rows)

import math
import os
from pathlib import Path

import torch
from transformers import AutoTokenizer, GenerationConfig

from vanilla_transformer.cards.model_card import card_languages
from vanilla_transformer.checkpoints.kinds import CheckpointError, tokenizer_errors
from vanilla_transformer.checkpoints.load import load_checkpoint
from vanilla_transformer.configuration_vanilla_transformer import ACTIVATIONS
from vanilla_transformer.decoding import positions_read
from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.paths import check_output_folder
from vanilla_transformer.files.staging import staged_folder
from vanilla_transformer.interop import QUANTIZATIONS
from vanilla_transformer.interop.ctranslate2_runtime import (
    LANGUAGES,
    MAX_POSITIONS,
    import_ctranslate2,
    write_tokenizer_fingerprint,
)
from vanilla_transformer.modeling_vanilla_transformer import sinusoidal_position_encoding

# CTranslate2's common_spec.Activation member for each of the configuration's ACTIVATIONS: the name in capitals,
# except these two
CTRANSLATE2_ACTIVATION_EXCEPTIONS = {"gelu_new": "GELUTanh", "silu": "SWISH"}


class ExportError(ValueError):
    """The model cannot be exported: an option CTranslate2 cannot express, a missing tokenizer, a bad folder."""


def _import_ctranslate2():
    try:
        return import_ctranslate2()
    except ImportError as error:
        raise ExportError(str(error)) from None


# ----------------------------------------------------------------------------------------------------------------
# Weights: our modules -> CTranslate2 specs. Copies in float32 (numpy): `spec.optimize` quantizes in place.


def _array(tensor: torch.Tensor):
    return tensor.detach().to(device="cpu", dtype=torch.float32).numpy().copy()


def attention_projections(attention) -> tuple[list[tuple[torch.Tensor, torch.Tensor]],
                                             tuple[torch.Tensor, torch.Tensor]]:
    """The (weight, bias) pairs of one of our attention modules in CTranslate2's layout: the input projections fused
    as CTranslate2 wants them, (q | k | v) for self-attention and q, (k | v) for encoder-decoder attention, and the
    output projection. The only place that knows how our attention names its projections."""
    def fused(*linears):
        return torch.cat([linear.weight for linear in linears]), torch.cat([linear.bias for linear in linears])

    q, k, v = attention.q_proj, attention.k_proj, attention.v_proj
    inputs = [fused(q), fused(k, v)] if attention.is_cross_attention else [fused(q, k, v)]
    return inputs, (attention.out_proj.weight, attention.out_proj.bias)


def _set_linear(spec, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _array(weight)
    if bias is not None:
        spec.bias = _array(bias)


def _set_layer_norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _set_attention(spec, attention, norm: torch.nn.LayerNorm) -> None:
    projections, out = attention_projections(attention)
    for linear, (weight, bias) in zip(spec.linear, [*projections, out], strict=True):
        _set_linear(linear, weight, bias)
    _set_layer_norm(spec.layer_norm, norm)


def _set_feed_forward(spec, layer) -> None:
    """Equation (2), the layer's `fc1` and `fc2`, and the LayerNorm of that sub-layer."""
    _set_linear(spec.linear_0, layer.fc1.weight, layer.fc1.bias)
    _set_linear(spec.linear_1, layer.fc2.weight, layer.fc2.bias)
    _set_layer_norm(spec.layer_norm, layer.final_layer_norm)


def position_table(stack, config) -> torch.Tensor:
    """(L, D) encodings of the positions a stack gives to its tokens 0 .. L-1 (`position_offset` applied)."""
    offset = config.position_offset
    if config.position_embedding_type == "learned":
        return stack.embed_positions.weight[offset:]
    rows = positions_read(config)
    return sinusoidal_position_encoding(torch.arange(offset, offset + rows), config.d_model,
                                        config.sinusoidal_layout, config.sinusoidal_frequencies)


def _set_stack(spec, stack, config) -> None:
    """Embedding, positions and final LayerNorm (pre-LN) of the encoder or decoder stack."""
    embeddings = spec.embeddings[0] if isinstance(spec.embeddings, list) else spec.embeddings
    embeddings.weight = _array(stack.embed_tokens.weight)
    spec.scale_embeddings = math.sqrt(config.d_model) if config.scale_embedding else 1.0
    spec.position_encodings.encodings = _array(position_table(stack, config))
    if config.normalize_before:
        _set_layer_norm(spec.layer_norm, stack.layer_norm)


def ctranslate2_activation(name: str) -> str:
    """The name of CTranslate2's `common_spec.Activation` member for one of the configuration's ACTIVATIONS."""
    return CTRANSLATE2_ACTIVATION_EXCEPTIONS.get(name, name.upper())


def check_exportable(config) -> None:
    """Raise ExportError naming the first option of `config` that CTranslate2 cannot express."""
    if config.activation_function not in ACTIVATIONS:
        raise ExportError(f"activation_function={config.activation_function!r} cannot be expressed in CTranslate2, "
                          f"which has {', '.join(ACTIVATIONS)}.")
    if config.attention_key_dim is not None and any(
            config.attention_key_dim * heads != config.d_model
            for heads in (config.encoder_attention_heads, config.decoder_attention_heads)):
        raise ExportError(f"attention_key_dim={config.attention_key_dim} cannot be expressed in CTranslate2, whose "
                          "queries and keys are d_model / heads wide, as its values.")
    for name in ("decoder_start_token_id", "eos_token_id"):
        if getattr(config, name) is None:
            raise ExportError(f"{name} is not set: CTranslate2 needs it to start and to end a translation.")


def model_spec(model):
    """The CTranslate2 `TransformerSpec` of a `VanillaTransformerForConditionalGeneration`, weights copied (float32)."""
    _import_ctranslate2()
    from ctranslate2.specs import common_spec, transformer_spec

    config = model.config
    check_exportable(config)
    options = dict(pre_norm=config.normalize_before,
                   activation=getattr(common_spec.Activation, ctranslate2_activation(config.activation_function)))
    spec = transformer_spec.TransformerSpec(
        transformer_spec.TransformerEncoderSpec(config.encoder_layers, config.encoder_attention_heads, **options),
        transformer_spec.TransformerDecoderSpec(config.decoder_layers, config.decoder_attention_heads, **options),
    )
    encoder, decoder = model.get_encoder(), model.get_decoder()
    _set_stack(spec.encoder, encoder, config)
    for layer_spec, layer in zip(spec.encoder.layer, encoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)
    _set_stack(spec.decoder, decoder, config)
    for layer_spec, layer in zip(spec.decoder.layer, decoder.layers, strict=True):
        _set_attention(layer_spec.self_attention, layer.self_attn, layer.self_attn_layer_norm)
        _set_attention(layer_spec.attention, layer.encoder_attn, layer.encoder_attn_layer_norm)
        _set_feed_forward(layer_spec.ffn, layer)
    bias = model.final_logits_bias[0] if model.final_logits_bias is not None else None
    _set_linear(spec.decoder.projection, model.get_output_embeddings().weight, bias)
    spec.config.layer_norm_epsilon = config.layer_norm_eps
    # the longest input and output the tables encode (both stacks' tables have the rows of one config)
    positions = min(len(stack.position_encodings.encodings) for stack in (spec.encoder, spec.decoder))
    spec.config.add_attribute(MAX_POSITIONS, int(positions))
    return spec


# ----------------------------------------------------------------------------------------------------------------
# Vocabularies: the tokenizer's token strings by id (CTranslate2 reads and writes tokens, not ids).


def _unique_tokens(tokens: list[str | None]) -> list[str]:
    """Placeholders for ids without a token of their own (beyond the tokenizer, or a repeated string)."""
    seen, unique = set(), []
    for i, token in enumerate(tokens):
        if not token or token in seen:
            token = f"<vanilla_transformer_id_{i}>"
        seen.add(token)
        unique.append(token)
    return unique


def vocabularies(tokenizer, config) -> tuple[list[str], list[str]]:
    """(source tokens, target tokens), one per id of the model's embeddings: the source side is the tokenizer's
    vocabulary (what it encodes), the target side what it decodes ids to (they differ for separate vocabularies)."""
    by_id = {i: token for token, i in tokenizer.get_vocab().items()}
    source = [by_id.get(i) for i in range(config.vocab_size)]
    target_size = config.target_vocab_size
    target = tokenizer.convert_ids_to_tokens(list(range(min(target_size, len(tokenizer)))))
    target = [*target, *[None] * (target_size - len(target))]
    return _unique_tokens(source), _unique_tokens(target)


# ----------------------------------------------------------------------------------------------------------------
# The export.


def load_export_checkpoint(path: Path):
    """The translation model saved in `path`, checked whole first; `ExportError` (one line) for anything else."""
    try:  # checked first: missing weights would be filled with random ones by from_pretrained, and exported
        model = load_checkpoint(path, kinds=("seq2seq",), device="cpu", need_tokenizer=False, purpose="export").model
    except CheckpointError as error:  # the tokenizer is checked by load_export_tokenizer
        raise ExportError(str(error)) from None
    model_type = model.config.model_type
    if model_type != "vanilla_transformer":
        hint = (f" Convert it first: vanilla-transformer convert {model_type} {path} OUT."
                if model_type in ("marian", "fsmt") else "")
        raise ExportError(f"{path} holds a {model_type!r} model, not a vanilla_transformer one.{hint}")
    return model


def load_export_tokenizer(tokenizer, checkpoint: Path | None):
    """`tokenizer` itself, or the tokenizer saved in its folder (default: the checkpoint's); `ExportError` when there
    is none."""
    if tokenizer is None and checkpoint is None:
        raise ExportError("A model object has no tokenizer: pass tokenizer= (a tokenizer or its folder).")
    if tokenizer is None or isinstance(tokenizer, (str, os.PathLike)):
        folder = Path(tokenizer if tokenizer is not None else checkpoint)
        if not any((folder / name).is_file() for name in ("tokenizer.json", "tokenizer_config.json")):
            raise ExportError(f"{folder} has no tokenizer (tokenizer.json or tokenizer_config.json); the exported "
                              "folder needs one to turn text into tokens. Save it there with "
                              "tokenizer.save_pretrained.")
        with tokenizer_errors(str(folder)):  # a damaged tokenizer file: one line naming it
            return AutoTokenizer.from_pretrained(folder)
    return tokenizer


def export_inputs(checkpoint_or_model, tokenizer, output_dir, overwrite: bool):
    """What every export starts with, in this order: the output folder checked against its inputs (nothing loaded
    yet), then the model (a checkpoint folder, checked whole, or a model object) and its tokenizer loaded.
    -> (output folder, checkpoint folder or None, the input paths, model, tokenizer)."""
    out = Path(output_dir)
    checkpoint = Path(checkpoint_or_model) if isinstance(checkpoint_or_model, (str, os.PathLike)) else None
    inputs = [Path(path) for path in (checkpoint, tokenizer) if isinstance(path, (str, os.PathLike))]
    check_export_output(out, overwrite, inputs)
    if checkpoint is not None:
        model = load_export_checkpoint(checkpoint)
    else:
        model = checkpoint_or_model
        if getattr(model.config, "model_type", None) != "vanilla_transformer":
            raise ExportError(f"Only VanillaTransformerForConditionalGeneration exports, got {type(model).__name__}.")
    return out, checkpoint, inputs, model, load_export_tokenizer(tokenizer, checkpoint)


def check_export_output(out: Path, overwrite: bool, inputs) -> None:
    """Refuse (`ExportError`, one line) an output folder the export must not write (`files.paths.check_output_folder`):
    one that is, contains or lies inside one of the `inputs` (even with `overwrite`), a file, a place that cannot be
    written, an existing non-empty folder without `overwrite`, and with `overwrite` one holding anything this project
    did not write (its manifest says what it wrote): --overwrite replaces an earlier export, never the user's files."""
    try:
        check_output_folder(out, overwrite=overwrite, inputs=inputs)
    except OutputError as error:
        raise ExportError(str(error)) from None


def to_ctranslate2(checkpoint_or_model, output_dir: str | os.PathLike, quantization: str = "float32", *,
                   tokenizer=None, overwrite: bool = False) -> Path:
    """Export a saved checkpoint folder (or a `VanillaTransformerForConditionalGeneration` and its `tokenizer`) to a
    CTranslate2 model folder with the weights in `quantization` (one of `QUANTIZATIONS`), the vocabularies, the
    tokenizer files, their fingerprint (`TOKENIZER_FINGERPRINT`) and the generation config. Returns the folder.

    Everything is checked before anything is written (`check_export_output`: `overwrite=True` replaces only a folder
    this project wrote, never one holding the user's files or one that is, contains or lies inside the checkpoint).
    The folder is written through `files.staging.staged_folder`: into a hidden staging folder beside `output_dir`,
    its manifest last, renamed into place when whole, so that `output_dir` is always the old whole export or the new
    whole one (a killed export's staging folder is removed by the next export to the same place). Raises
    `ExportError` for what cannot be exported (the message names the option or the file), `files.OutputError` when
    the disk fills up or the folder cannot be written.
    """
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}.")
    _import_ctranslate2()
    out, checkpoint, inputs, model, tokenizer = export_inputs(checkpoint_or_model, tokenizer, output_dir, overwrite)

    spec = model_spec(model)
    languages = _checkpoint_languages(checkpoint)
    if languages is not None:
        spec.config.add_attribute(LANGUAGES, list(languages))
    source, target = vocabularies(tokenizer, model.config)
    spec.register_source_vocabulary(source)
    spec.register_target_vocabulary(target)
    eos = model.config.eos_token_id
    eos = eos[0] if isinstance(eos, list) else eos
    specials = dict(decoder_start_token=model.config.decoder_start_token_id, eos_token=eos,
                    bos_token=model.config.bos_token_id if model.config.bos_token_id is not None else eos,
                    unk_token=tokenizer.unk_token_id if tokenizer.unk_token_id is not None else eos)
    for name, token_id in specials.items():
        if not 0 <= token_id < len(target):
            raise ExportError(f"The {name} (id {token_id}) is outside the target vocabulary of {len(target)} tokens.")
        setattr(spec.config, name, target[token_id])
    spec.validate()
    spec.optimize(quantization=quantization)

    with staged_folder(out, overwrite=overwrite, inputs=inputs) as staging:
        spec.save(staging)
        saved = tokenizer.save_pretrained(staging)
        write_tokenizer_fingerprint(staging, [os.path.basename(path) for path in saved])
        (model.generation_config or _default_generation_config(model)).save_pretrained(staging)
    return out


def _checkpoint_languages(checkpoint: Path | None) -> tuple[str, str] | None:
    """The checkpoint's (source, target) from its model card; None without a card naming them (or one unreadable:
    the export does not need it)."""
    if checkpoint is None:
        return None
    try:
        source, target = card_languages(checkpoint)
    except ValueError:
        return None
    return None if source is None else (source, target)


def _default_generation_config(model):
    return GenerationConfig.from_model_config(model.config)


__all__ = ["ExportError", "QUANTIZATIONS", "check_export_output", "to_ctranslate2"]
