"""Export a checkpoint to a plain `MarianMTModel` folder: no remote code, loads in transformers 4.x and 5.x alike.

    vanilla-transformer export marian outputs/multi30k multi30k-marian
    python -c "from transformers import pipeline; print(pipeline('translation', model='multi30k-marian')('Hi!'))"  # 4.x

transformers' `MarianMTModel` is the Transformer of the paper with the options OPUS-MT trained with, and each of them is
an option of `VanillaTransformerConfig` (`convert.py` maps them the other way). Two differences remain:

- sinusoid layout: ours interleaves sin and cos (PE(pos, 2i) = sin, PE(pos, 2i+1) = cos, section 3.5), Marian puts all
  sines first, then all cosines. The two differ by one fixed permutation of the d_model coordinates; applying it to
  every weight that reads or writes the residual stream (embeddings, the attention and feed-forward input matrices by
  column, their output matrices and biases and every LayerNorm by row) gives a model whose hidden states are ours
  with their coordinates reordered, and the same logits. The permutation of a float tensor is exact.
- `final_logits_bias`: Marian always has one; a model without it exports a zero bias.
- positions: Marian computes a table of `max_position_embeddings` sinusoids and fails beyond it, ours computes any
  position; the export gives Marian at least 1024 (no weight depends on it).

What Marian cannot express stops the export (`check_marian_exportable`): pre-LayerNorm, learned positions,
tensor2tensor wavelengths, a position offset, fairseq's padding-skipping positions, a LayerNorm epsilon other than
1e-5, and a missing pad or decoder start token.

The folder: config.json (`model_type: marian`), model.safetensors, generation_config.json (the checkpoint's decoding
defaults: beam size, length penalty, maximum length, decoder start token, banned or forced tokens; MarianMTModel itself
bans no token in transformers 4.57 or 5.x, so the tokens ours generates are the ones it generates; without our
source-length bound, which MarianMTModel's `generate` does not know: its maximum length bounds a translation), the
tokenizer as
tokenizer.json with a tokenizer_config.json naming `PreTrainedTokenizerFast` and the model's input names (4.x and 5.x
both load it; a converted OPUS-MT checkpoint keeps its `MarianTokenizer` files), and a model card. transformers 4's
MarianModel cannot load a target vocabulary of another size than the source one (the export warns).
"""

import json
import os
import warnings
from importlib import resources
from pathlib import Path

import torch
import transformers
from huggingface_hub import ModelCard, ModelCardData
from transformers import GenerationConfig, MarianConfig, MarianMTModel
from transformers.activations import ACT2FN

from vanilla_transformer.cards.model_card import hub_id_from_path
from vanilla_transformer.decoding import LENGTH_BOUND, positions_read
from vanilla_transformer.files.staging import staged_folder
from vanilla_transformer.interop.export_ctranslate2 import ExportError, export_inputs

MARIAN_LAYER_NORM_EPS = 1e-5  # MarianEncoderLayer / MarianDecoderLayer use nn.LayerNorm's default

# Weights whose last axis is a d_model coordinate (they read the residual stream): permute their columns.
READS_D_MODEL = ("shared.weight", "embed_tokens.weight", "lm_head.weight", "q_proj.weight", "k_proj.weight",
                 "v_proj.weight", "fc1.weight")
# Weights whose first axis is a d_model coordinate (they write the residual stream, or normalise it): permute rows.
WRITES_D_MODEL = ("out_proj.weight", "out_proj.bias", "fc2.weight", "fc2.bias", "layer_norm.weight", "layer_norm.bias")
# In neither: q/k/v and fc1 biases (head and d_ff coordinates) and final_logits_bias (vocabulary).
KEEPS = ("q_proj.bias", "k_proj.bias", "v_proj.bias", "fc1.bias", "final_logits_bias")
POSITION_TABLES = ("model.encoder.embed_positions.weight", "model.decoder.embed_positions.weight")

# transformers 4.x's MarianModel gives the decoder embedding `vocab_size` rows, not `decoder_vocab_size` (5.x does)
TRANSFORMERS_4_VOCABULARY_NOTE = (
    "The target vocabulary ({config.target_vocab_size} tokens) differs in size from the source vocabulary "
    "({config.vocab_size}): transformers 5 loads this Marian folder, transformers 4 cannot (its MarianModel makes the "
    "decoder embedding as large as the source vocabulary)."
)

# Generation settings that are the model's, not the decoding strategy's: taken from the config, always written.
SPECIAL_TOKENS = ("pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id", "forced_eos_token_id")


# ----------------------------------------------------------------------------------------------------------------
# What Marian can express


def check_marian_exportable(config) -> None:
    """Raise `ExportError`, in one line naming the option, if `MarianMTModel` cannot compute what `config` does.

    Every other option of `VanillaTransformerConfig` maps onto `MarianConfig`: sizes, dropouts, any activation (both
    use transformers' ACT2FN), `scale_embedding`, shared or separate vocabularies, tied or untied output projection,
    `add_final_logits_bias` (a zero bias without it), the special tokens, and either sinusoid layout (permuted).
    """
    def refuse(option: str, why: str):
        raise ExportError(f"{option}={getattr(config, option)!r} cannot be exported to Marian: {why}.")

    if config.normalize_before:
        refuse("normalize_before", "MarianMTModel's layers are post-LayerNorm (LayerNorm(x + Sublayer(x)))")
    if config.position_embedding_type != "sinusoidal":
        refuse("position_embedding_type", "MarianMTModel has sinusoidal positions only")
    if config.attention_key_dim is not None and any(
            config.attention_key_dim * heads != config.d_model
            for heads in (config.encoder_attention_heads, config.decoder_attention_heads)):
        refuse("attention_key_dim", "MarianMTModel's queries and keys are d_model / heads wide, as its values")
    if config.sinusoidal_frequencies != "paper":
        refuse("sinusoidal_frequencies", "MarianMTModel's sinusoids have the paper's wavelengths 10000^(2i/d_model)")
    if config.position_offset != 0:
        refuse("position_offset", "MarianMTModel numbers positions from 0")
    if config.skip_padding_positions:
        refuse("skip_padding_positions", "MarianMTModel numbers every token, padding included")
    if config.layer_norm_eps != MARIAN_LAYER_NORM_EPS:
        refuse("layer_norm_eps", f"MarianMTModel's LayerNorms have epsilon {MARIAN_LAYER_NORM_EPS}")
    if config.pad_token_id is None:
        refuse("pad_token_id", "MarianMTModel needs a padding token")
    if config.decoder_start_token_id is None:
        refuse("decoder_start_token_id", "MarianMTModel needs a decoder start token")

    if config.activation_function not in ACT2FN:
        refuse("activation_function", "transformers has no activation of that name")


def marian_config(config):
    """The `MarianConfig` of the model computing what a `VanillaTransformerConfig` computes."""
    check_marian_exportable(config)
    return MarianConfig(
        vocab_size=config.vocab_size,
        decoder_vocab_size=config.target_vocab_size,
        share_encoder_decoder_embeddings=config.share_encoder_decoder_embeddings,
        tie_word_embeddings=config.tie_word_embeddings,
        d_model=config.d_model,
        encoder_layers=config.encoder_layers,
        decoder_layers=config.decoder_layers,
        encoder_attention_heads=config.encoder_attention_heads,
        decoder_attention_heads=config.decoder_attention_heads,
        encoder_ffn_dim=config.encoder_ffn_dim,
        decoder_ffn_dim=config.decoder_ffn_dim,
        dropout=config.dropout,
        attention_dropout=config.attention_dropout,
        activation_dropout=config.activation_dropout,
        activation_function=config.activation_function,
        # Marian computes a table of this many sinusoids; ours computes any position: give Marian room for long inputs
        max_position_embeddings=positions_read(config),
        scale_embedding=config.scale_embedding,
        # ours: None means d_model^-0.5 (only used to initialise new weights)
        init_std=config.init_std if config.init_std is not None else config.d_model**-0.5,
        use_cache=config.use_cache,
        pad_token_id=config.pad_token_id,
        bos_token_id=config.bos_token_id,
        eos_token_id=config.eos_token_id,
        decoder_start_token_id=config.decoder_start_token_id,
        forced_eos_token_id=config.forced_eos_token_id,
        architectures=["MarianMTModel"],
    )


# ----------------------------------------------------------------------------------------------------------------
# Weights


def marian_dimension_order(config) -> torch.Tensor:
    """(d_model,) indices: Marian's coordinate j is our coordinate `order[j]`. For interleaved sinusoids Marian's
    sines 0..D/2-1 are our even coordinates and its cosines our odd ones; a concatenated layout is Marian's own."""
    d = config.d_model
    if config.sinusoidal_layout == "interleaved":
        return torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])
    return torch.arange(d)


def permute_d_model(state: dict[str, torch.Tensor], order: torch.Tensor) -> dict[str, torch.Tensor]:
    """Reorder the d_model axis of every weight of a (BART-named) state dict by `order`; raise on an unknown name.
    With `order` = `marian_dimension_order(config)` ours becomes Marian's; with `order.argsort()` the reverse."""
    permuted = {}
    for name, tensor in state.items():
        if name.endswith(READS_D_MODEL):
            permuted[name] = tensor[:, order].contiguous()  # (rows, D)
        elif name.endswith(WRITES_D_MODEL):
            permuted[name] = tensor[order].contiguous()  # (D, ...) or (D,)
        elif name.endswith(KEEPS):
            permuted[name] = tensor.clone()
        else:
            raise RuntimeError(f"permute_d_model does not know the weight {name!r}")  # a bug of this file
    return permuted


def marian_model(model):
    """A `MarianMTModel` (in eval mode) computing what `model`, a `VanillaTransformerForConditionalGeneration`,
    computes: the same weights under the same names, the d_model axis permuted to Marian's sinusoid layout, a zero
    `final_logits_bias` where ours has none, and `model`'s generation config."""
    config = model.config
    marian = MarianMTModel(marian_config(config)).to(model.dtype).eval()
    ours = {name: tensor.detach() for name, tensor in model.state_dict().items()}
    if model.final_logits_bias is None:
        ours["final_logits_bias"] = torch.zeros(1, config.target_vocab_size, dtype=model.dtype)
    wanted = [name for name in marian.state_dict() if name not in POSITION_TABLES]
    missing = [name for name in wanted if name not in ours]
    if missing:  # a bug of this file: Marian and ours name their weights alike
        raise RuntimeError(f"No weight of ours for Marian's {missing[:4]}")
    state = permute_d_model({name: ours[name] for name in wanted}, marian_dimension_order(config))
    result = marian.load_state_dict(state, strict=False)
    if result.unexpected_keys or set(result.missing_keys) - set(POSITION_TABLES):
        raise RuntimeError(f"Marian weights not matched: {result}")
    marian.generation_config = marian_generation_config(model)
    return marian


def marian_generation_config(model):
    """Our decoding defaults (the checkpoint's generation config: beam size, length penalty, maximum length, banned or
    forced tokens) with the special tokens of the model's config."""
    source = model.generation_config or GenerationConfig.from_model_config(model.config)
    generation = GenerationConfig.from_dict({name: value for name, value in source.to_diff_dict().items()
                                             if name not in LENGTH_BOUND})  # settings MarianMTModel does not read
    generation._from_model_config = False  # settings of their own: loaders must not rebuild them from config.json
    for name in SPECIAL_TOKENS:
        value = getattr(model.config, name, None)
        if value is not None:
            setattr(generation, name, value)
    return generation


# ----------------------------------------------------------------------------------------------------------------
# Tokenizer and model card


# tokenizer_config.json keys that only transformers 5 knows or that point at code; the rest 4.x reads as well
TOKENIZER_CONFIG_DROP = ("auto_map", "backend", "tokenizer_class")


def save_portable_tokenizer(tokenizer, folder: Path) -> None:
    """The tokenizer's files, loadable by AutoTokenizer of transformers 4.x and 5.x: a fast tokenizer as tokenizer.json
    with a tokenizer_config.json naming `PreTrainedTokenizerFast` (5.x writes `TokenizersBackend`, a class 4.x does not
    have); a tokenizer class of transformers itself (`MarianTokenizer` of a converted OPUS-MT checkpoint) as it
    saves."""
    tokenizer.save_pretrained(folder)
    for leftover in folder.glob("*.py"):  # a tokenizer saved with remote code
        leftover.unlink()
    if not tokenizer.is_fast:
        return
    path = folder / "tokenizer_config.json"
    settings = json.loads(path.read_text(encoding="utf-8"))
    settings = {key: value for key, value in settings.items() if key not in TOKENIZER_CONFIG_DROP}
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    # 4.x's PreTrainedTokenizerFast would add token_type_ids by default, which MarianMTModel.generate refuses
    settings["model_input_names"] = list(tokenizer.model_input_names)
    path.write_text(json.dumps(settings, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def check_portable_tokenizer(tokenizer) -> None:
    """A fast tokenizer (tokenizer.json), or a slow one that transformers itself defines (both versions know it)."""
    name = type(tokenizer).__name__
    if getattr(tokenizer, "is_fast", False):
        return
    if not type(tokenizer).__module__.startswith("transformers.") or not hasattr(transformers, name):
        raise ExportError(f"The tokenizer is a {name}, which transformers does not define; the Marian folder needs a "
                          "fast tokenizer (tokenizer.json) or one of transformers' own tokenizer classes.")


# the README.md of an exported folder, filled with str.format (the template folder of vanilla_transformer.cards)
MARIAN_CARD_TEMPLATE = "templates/marian_model_card.md"


def fits_ctranslate2_marian_loader(model) -> bool:
    """Whether CTranslate2's own converter (`ct2-transformers-converter`) computes this model: its Marian loader
    assumes OPUS-MT's layout, where `<pad>` is the last token of both vocabularies and the decoder starts from it with
    a zero embedding (it drops that row and starts the decoder from zeros)."""
    config = model.config
    pad = config.pad_token_id
    last = config.vocab_size - 1
    return (pad == last == config.target_vocab_size - 1 and config.decoder_start_token_id == pad
            and not model.get_decoder().embed_tokens.weight[pad].any())


def _source_card_data(checkpoint: Path | None) -> dict:
    """license, language, datasets and metrics of the checkpoint's own card, if it has one."""
    if checkpoint is None or not (checkpoint / "README.md").is_file():
        return {}
    try:
        data = ModelCard.load(checkpoint / "README.md", ignore_metadata_errors=True).data.to_dict()
    except Exception:  # noqa: BLE001  (an unreadable source card only costs these lines)
        return {}
    return {key: data[key] for key in ("license", "language", "datasets") if data.get(key)}


def marian_model_card(model, checkpoint: Path | None, model_id: str):
    """The README.md of the folder (huggingface_hub's ModelCard): transformers / translation metadata, the source."""
    config, generation = model.config, model.generation_config
    base_model = hub_id_from_path(checkpoint) if checkpoint is not None else None
    data = ModelCardData(library_name="transformers", pipeline_tag="translation", base_model=base_model,
                         tags=["translation", "marian", "vanilla-transformer"], **_source_card_data(checkpoint))
    if checkpoint is None:
        origin = "A `VanillaTransformerForConditionalGeneration`"
    elif base_model:
        origin = f"The checkpoint [`{base_model}`](https://huggingface.co/{base_model})"
    else:
        origin = f"The checkpoint `{checkpoint.name}`"
    layers = (f"d_model {config.d_model}, {config.encoder_layers} + {config.decoder_layers} layers, "
              f"{config.encoder_attention_heads} heads, d_ff {config.encoder_ffn_dim}, {config.activation_function}, "
              f"{model.num_parameters():,} parameters")
    ctranslate2_note = (
        f"CTranslate2: `ct2-transformers-converter --model {model_id} --output_dir ct2-model`."
        if fits_ctranslate2_marian_loader(model) else
        "CTranslate2: CTranslate2's own `ct2-transformers-converter` assumes OPUS-MT's layout (`<pad>` last and the "
        "decoder start, with a zero embedding), which this model does not have; `vanilla-transformer export "
        "ctranslate2` exports the original checkpoint.")
    template = resources.files("vanilla_transformer.cards").joinpath(MARIAN_CARD_TEMPLATE).read_text(encoding="utf-8")
    text = template.format(card_data=data.to_yaml(), name=model_id, origin=origin, layers=layers,
                                num_beams=generation.num_beams, length_penalty=generation.length_penalty,
                                max_length=generation.max_length, model_id=model_id, example="Hello world!",
                                ctranslate2_note=ctranslate2_note,
                                vocabulary_note="" if config.target_vocab_size == config.vocab_size else
                                "\n\n" + TRANSFORMERS_4_VOCABULARY_NOTE.format(config=config))
    return ModelCard(text)


# ----------------------------------------------------------------------------------------------------------------
# The export


def to_marian(checkpoint_or_model, output_dir: str | os.PathLike, *, tokenizer=None, overwrite: bool = False) -> Path:
    """Export a saved checkpoint folder (or a `VanillaTransformerForConditionalGeneration` and its `tokenizer`, an
    object or a folder) to a `MarianMTModel` folder that loads without this package: config.json, model.safetensors,
    generation_config.json, tokenizer.json + tokenizer_config.json, README.md. Returns the folder.

    Everything is checked before anything is written (`check_export_output`: `overwrite=True` replaces only a folder
    this project wrote, never one holding the user's files or one that is, contains or lies inside the input), and
    the folder is written through `files.staging.staged_folder` (a hidden staging folder beside `output_dir`,
    renamed into place when whole). Raises `ExportError` (one line naming the option or the file) for what cannot be
    exported, `files.OutputError` (one line naming `output_dir`) when the disk fills up or it cannot be written.
    """
    out, checkpoint, inputs, model, tokenizer = export_inputs(checkpoint_or_model, tokenizer, output_dir, overwrite)
    check_portable_tokenizer(tokenizer)
    marian = marian_model(model)  # checks the config first
    if model.config.target_vocab_size != model.config.vocab_size:
        warnings.warn(TRANSFORMERS_4_VOCABULARY_NOTE.format(config=model.config), stacklevel=2)
    card = marian_model_card(model, checkpoint, out.name)

    with staged_folder(out, overwrite=overwrite, inputs=inputs) as folder:
        staging = Path(folder)
        marian.save_pretrained(staging)
        save_portable_tokenizer(tokenizer, staging)
        card.save(staging / "README.md")
    return out


__all__ = ["check_marian_exportable", "marian_config", "marian_model", "permute_d_model", "to_marian"]
