"""Model cards (the Hub's README.md) for checkpoints of this model, and a Hub-ready folder in one call.

The metadata is a `huggingface_hub.ModelCardData` (with `EvalResult`s, which become the `model-index`), the body is
rendered by `ModelCard.from_template` from `templates/model_card.md`. Uploading is transformers' and
huggingface_hub's own: `model.push_to_hub`, `tokenizer.push_to_hub`, `card.push_to_hub`, or
`huggingface_hub.upload_folder` on the folder `save_for_hub` writes.
"""

import json
import os
import re
from importlib import resources
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCard, ModelCardData

TEMPLATE = "templates/model_card.md"
CODE_URL = "https://pypi.org/project/vanilla-transformer/"
TAGS = ["translation", "vanilla-transformer", "encoder-decoder", "attention-is-all-you-need"]

LANGUAGE_NAMES = {
    "ar": "Arabic", "cs": "Czech", "de": "German", "en": "English", "es": "Spanish", "et": "Estonian",
    "fi": "Finnish", "fr": "French", "hi": "Hindi", "it": "Italian", "ja": "Japanese", "kk": "Kazakh",
    "lt": "Lithuanian", "lv": "Latvian", "nl": "Dutch", "pl": "Polish", "pt": "Portuguese", "ro": "Romanian",
    "ru": "Russian", "tr": "Turkish", "uk": "Ukrainian", "zh": "Chinese",
}
# Sentences for the usage snippet, in the source language (Multi30k style).
EXAMPLES = {
    "en": ["A man in an orange hat is looking at something.", "Two dogs are playing in the snow."],
    "de": ["Ein Mann mit einem orangefarbenen Hut schaut etwas an.", "Zwei Hunde spielen im Schnee."],
    "fr": ["Un homme avec un chapeau orange regarde quelque chose.", "Deux chiens jouent dans la neige."],
    "cs": ["Muž v oranžovém klobouku se na něco dívá.", "Dva psi si hrají ve sněhu."],
}
METRIC_NAMES = {"bleu": "BLEU", "sacrebleu": "BLEU (sacreBLEU)", "chrf": "chrF", "ter": "TER",
                "exact_match": "Exact match", "loss": "Loss", "perplexity": "Perplexity"}
LANGUAGE_CODE = re.compile(r"[a-z]{2,3}")


def card_languages(folder: str | os.PathLike) -> tuple[str | None, str | None]:
    """(source, target) ISO 639 codes from the model card README.md in `folder` (its `language:` list, as
    `render_model_card` writes it); (None, None) when it has none. A ValueError (one line) for a card that cannot be
    read."""
    card_path = Path(folder) / "README.md"
    if not card_path.is_file():
        return None, None
    try:
        languages = ModelCard.load(card_path).data.language
    except (OSError, ValueError, TypeError, yaml.YAMLError) as error:  # TypeError: front matter not a mapping
        raise ValueError(f"{card_path} cannot be read as a model card ({' '.join(str(error).split())})") from None
    if isinstance(languages, str):
        languages = [languages]
    if isinstance(languages, list) and len(languages) == 2 and all(isinstance(code, str) for code in languages):
        return languages[0], languages[1]
    return None, None


def _check_language(name: str, code: str | None) -> None:
    if code is not None and not (isinstance(code, str) and LANGUAGE_CODE.fullmatch(code)):
        raise ValueError(f"{name}={code!r} is not an ISO 639 language code (two or three lowercase letters, "
                         "e.g. 'de').")


def _split_metrics(metrics: dict[str, Any] | None) -> tuple[dict[str, float], str | None]:
    """{"bleu": 27.1, "exact_match": 0.93, "split": "test"} -> ({"bleu": 27.1, "exact_match": 0.93}, "test")."""
    if metrics is None:
        return {}, None
    if not isinstance(metrics, dict):
        raise TypeError(f"metrics must be a dict like {{'bleu': 27.1, 'split': 'test'}}, got {type(metrics).__name__}.")
    values = dict(metrics)
    split = values.pop("split", None)
    if split is not None and not isinstance(split, str):
        raise ValueError(f"metrics['split'] must be the name of a dataset split (a string), got {split!r}.")
    for key, value in values.items():
        if not isinstance(key, str) or not key:
            raise ValueError(f"metric names must be non-empty strings, got {key!r}.")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
            raise ValueError(f"metrics[{key!r}] must be a number, got {value!r}.")
    return {key: float(value) for key, value in values.items()}, split


def _count_parameters(model) -> int:
    """Parameters of the model, tied matrices counted once."""
    return sum(p.numel() for p in {id(p): p for p in model.parameters()}.values())


def _architecture(model) -> dict[str, str]:
    """The config values the card's table shows, as text."""
    config = model.config
    generation = model.generation_config

    def pair(encoder, decoder):
        return str(encoder) if encoder == decoder else f"{encoder} (encoder) / {decoder} (decoder)"

    if config.position_embedding_type == "sinusoidal":
        positions = (f"sinusoidal ({config.sinusoidal_layout} sin/cos, {config.sinusoidal_frequencies} frequencies)"
                     if (config.sinusoidal_layout, config.sinusoidal_frequencies) != ("interleaved", "paper")
                     else "sinusoidal, as in section 3.5 of the paper")
    else:
        positions = f"learned, up to {config.max_position_embeddings}"
    if config.share_encoder_decoder_embeddings and config.tie_word_embeddings:
        embeddings = "one matrix for source, target and output projection (section 3.4)"
    elif config.share_encoder_decoder_embeddings:
        embeddings = "shared by source and target; separate output projection"
    else:
        embeddings = "separate source and target embeddings" + (
            "; target embedding tied to the output projection" if config.tie_word_embeddings else "")
    if config.scale_embedding:
        embeddings += ", scaled by sqrt(d_model)"
    vocabulary = (f"{config.vocab_size} subword tokens, shared by both languages"
                  if config.decoder_vocab_size is None else
                  f"{config.vocab_size} (source) / {config.decoder_vocab_size} (target) subword tokens")
    decoding = [f"beam size {generation.num_beams}" if (generation.num_beams or 1) > 1 else "greedy"]
    if generation.length_penalty is not None and (generation.num_beams or 1) > 1:
        decoding.append(f"length penalty {generation.length_penalty}")
    if generation.max_new_tokens is not None:
        decoding.append(f"at most {generation.max_new_tokens} new tokens")
    elif generation.max_length is not None:
        decoding.append(f"max length {generation.max_length} tokens")
    return {
        "encoder_layers": str(config.encoder_layers),
        "decoder_layers": str(config.decoder_layers),
        "d_model": str(config.d_model),
        "ffn_dim": pair(config.encoder_ffn_dim, config.decoder_ffn_dim),
        "heads": pair(config.encoder_attention_heads, config.decoder_attention_heads),
        "residual": ("pre-LayerNorm, `x + Sublayer(LayerNorm(x))`" if config.normalize_before
                     else "post-LayerNorm, `LayerNorm(x + Sublayer(x))`, as in the paper")
                    + f", {config.activation_function} feed-forward",
        "positions": positions,
        "embeddings": embeddings,
        "vocabulary": vocabulary,
        "dropout": f"{config.dropout} (residual), {config.attention_dropout} (attention), "
                   f"{config.activation_dropout} (feed-forward)",
        "parameters": f"{_count_parameters(model) / 1e6:.1f}M" if _count_parameters(model) >= 1e5
                      else f"{_count_parameters(model):,}",
        "decoding": ", ".join(decoding),
    }


def _is_table(value) -> bool:
    return (isinstance(value, list) and bool(value) and all(isinstance(row, dict) for row in value)
            and all(list(row) == list(value[0]) for row in value))


def _cell(value) -> str:
    text = f"{value:,}" if isinstance(value, int) and not isinstance(value, bool) else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _training_text(training_summary: dict | str | None) -> str:
    if training_summary is None:
        return "No training details were recorded for this checkpoint."
    if isinstance(training_summary, str):
        return training_summary.strip()
    if isinstance(training_summary, dict):
        tables = {key: value for key, value in training_summary.items() if _is_table(value)}
        text = "\n".join(f"- **{key}**: {value}" for key, value in training_summary.items() if key not in tables)
        for key, rows in tables.items():  # a list of rows with the same keys: a table after the list
            columns = list(rows[0])
            text += (f"\n\n**{key}**\n\n| " + " | ".join(columns) + " |\n|" + "---|" * len(columns) + "\n"
                     + "\n".join("| " + " | ".join(_cell(row[c]) for c in columns) + " |" for row in rows))
        return text
    raise TypeError(f"training_summary must be a dict or a string, got {type(training_summary).__name__}.")


def _evaluation_text(scores: dict[str, float], split: str | None, dataset_name: str | None) -> str:
    if not scores:
        return "No evaluation results were recorded for this checkpoint."
    where = " ".join(part for part in (dataset_name, f"({split} split)" if split else None) if part) or "held-out data"
    rows = "\n".join(f"| {METRIC_NAMES.get(key, key)} | {value:g} |" for key, value in scores.items())
    return f"On {where}, translating with the decoding defaults above:\n\n| Metric | Score |\n|---|---|\n{rows}"


def _usage_examples(examples: list[str] | None, source_lang: str | None) -> list[str]:
    """The (at most two) source sentences of the usage snippet: `examples`, checked, or defaults in the language."""
    if examples is None:
        examples = EXAMPLES.get(source_lang, EXAMPLES["en"])
    if (isinstance(examples, str) or not isinstance(examples, (list, tuple)) or not examples
            or not all(isinstance(e, str) and e.strip() for e in examples)):
        raise ValueError(f"examples must be a non-empty list of non-empty sentences, got {examples!r:.100}.")
    return [e.strip() for e in examples[:2]]


def _eval_results(scores: dict, split: str | None, dataset_name: str | None,
                  direction_codes: str) -> list[EvalResult] | None:
    """The card's model-index entries, one per score; None without scores."""
    if not scores:
        return None
    if dataset_name is None:
        raise ValueError("metrics were given without dataset_name: say which data set they were measured on.")
    return [
        EvalResult(
            task_type="translation",
            task_name=f"Translation {direction_codes}" if direction_codes else "Translation",
            dataset_type=dataset_name,
            dataset_name=f"{dataset_name} ({direction_codes})" if direction_codes else dataset_name,
            dataset_split=split,
            metric_type=key,
            metric_name=METRIC_NAMES.get(key, key),
            metric_value=value,
        )
        for key, value in scores.items()
    ]


def render_model_card(
    model,
    *,
    source_lang: str | None = None,
    target_lang: str | None = None,
    dataset_name: str | None = None,
    metrics: dict[str, Any] | None = None,
    training_summary: dict | str | None = None,
    base_model: str | None = None,
    license: str = "apache-2.0",
    model_id: str | None = None,
    examples: list[str] | None = None,
) -> ModelCard:
    """The model card (README.md) of a checkpoint of `model`, a `VanillaTransformerForConditionalGeneration`.

    Args:
        source_lang, target_lang: ISO 639 codes of the translation direction, e.g. "de" and "en".
        dataset_name: the training/evaluation data set, ideally its Hub id (e.g. "bentrevett/multi30k").
        metrics: evaluation scores, e.g. `{"bleu": 27.1, "exact_match": 0.93, "split": "test"}`; they become the
            card's `metrics` and `model-index`.
        training_summary: the recipe, as a dict (one bullet per item) or a short text.
        base_model: the Hub id of the checkpoint this one was converted or fine-tuned from.
        license: a Hub license id.
        model_id: the repository id (or a path) shown in the title and the usage snippet; defaults to the model's
            `name_or_path`, else "vanilla-transformer-{src}-{tgt}".
        examples: source sentences for the usage snippet (ideally from the model's own domain); defaults to
            image-caption sentences in the source language.

    Save it with `card.save(os.path.join(out_dir, "README.md"))`; `card.data` is the validated metadata.
    """
    _check_language("source_lang", source_lang)
    _check_language("target_lang", target_lang)
    if not isinstance(license, str) or not license:
        raise ValueError(f"license must be a Hub license id such as 'apache-2.0', got {license!r}.")
    scores, split = _split_metrics(metrics)
    examples = _usage_examples(examples, source_lang)
    direction_codes = "-".join(code for code in (source_lang, target_lang) if code)
    if model_id is None:  # the Hub id the model was loaded from, else a name from the direction
        loaded_from = str(getattr(model, "name_or_path", "") or "")
        model_id = loaded_from if loaded_from and not os.path.exists(loaded_from) else (
            f"vanilla-transformer-{direction_codes}" if direction_codes else "vanilla-transformer")
    model_name = Path(str(model_id)).name or str(model_id)
    eval_results = _eval_results(scores, split, dataset_name, direction_codes)
    languages = [code for code in (source_lang, target_lang) if code]
    card_data = ModelCardData(
        language=languages or None,
        license=license,
        library_name="transformers",
        pipeline_tag="translation",
        tags=list(TAGS),
        datasets=[dataset_name] if dataset_name else None,
        metrics=list(scores) or None,
        base_model=base_model,
        model_name=model_name,
        eval_results=eval_results,
    )

    source = LANGUAGE_NAMES.get(source_lang, source_lang)
    target = LANGUAGE_NAMES.get(target_lang, target_lang)
    if source and target:
        direction, direction_phrase = f"{source} → {target}", f"from {source} into {target}"
    else:
        direction, direction_phrase = "direction not recorded", ""
    summary = f"A Transformer translating {direction_phrase}" if direction_phrase else "A Transformer translation model"
    summary += f", trained on {dataset_name}." if dataset_name else "."
    card = ModelCard.from_template(
        card_data,
        template_str=resources.files(__package__).joinpath(TEMPLATE).read_text(encoding="utf-8"),
        title=model_name,
        summary=summary,
        code_url=CODE_URL,
        direction=direction,
        direction_phrase=direction_phrase,
        dataset=dataset_name,
        training=_training_text(training_summary),
        evaluation=_evaluation_text(scores, split, dataset_name),
        model_id=str(model_id),
        # as Python literals for the usage snippet (JSON strings are valid Python; non-ASCII letters kept readable)
        example=json.dumps(examples[0], ensure_ascii=False),
        examples=json.dumps(examples, ensure_ascii=False),
        max_input_length=model.config.max_position_embeddings,
        base_model=base_model,
        **_architecture(model),
    )
    # What the Hub reads back must be what we built: parse the rendered card like the Hub does.
    reparsed = ModelCard(str(card))
    if reparsed.data.to_dict() != card_data.to_dict():
        raise RuntimeError("The rendered model card's metadata does not parse back to what was built.")
    return card


def save_for_hub(model, tokenizer, output_dir: str | os.PathLike, **card_kwargs) -> ModelCard:
    """Write a Hub-ready checkpoint folder: the model (weights, config.json with `auto_map` and
    `custom_pipelines`, generation_config.json, and the configuration / modeling / pipeline source files), the
    tokenizer files and README.md (the card of `render_model_card(model, **card_kwargs)`). Returns the card.

    Upload the folder with `huggingface_hub.upload_folder(repo_id=..., folder_path=output_dir)`, or push the parts
    with `model.push_to_hub(repo_id)`, `tokenizer.push_to_hub(repo_id)` and `card.push_to_hub(repo_id)`.
    """
    if tokenizer is None:
        raise ValueError("save_for_hub needs the tokenizer: a checkpoint without it cannot translate text.")
    card = render_model_card(model, **card_kwargs)  # first, so that bad card arguments fail before anything is written
    model.save_pretrained(output_dir)
    tokenizer.save_pretrained(output_dir)
    card.save(os.path.join(output_dir, "README.md"))
    return card


def hub_id_from_path(src: Path) -> str | None:
    """`owner/name` for a folder in the Hugging Face cache (`.../models--owner--name/snapshots/<revision>`)."""
    for part in reversed(Path(src).resolve().parts):
        match = re.fullmatch(r"models--([^/]+?)--([^/]+)", part)
        if match:
            return f"{match.group(1)}/{match.group(2)}"
    return None


def converted_model_card(model, out: Path, src: Path, *, family_title: str, architecture: str, kind: str,
                         base_model: str | None, languages: tuple[str | None, str | None]) -> ModelCard:
    """The card (README.md) of a checkpoint converted by `vanilla-transformer convert KIND` from a `family_title`
    checkpoint (`architecture`) in `src`: `render_model_card`'s card naming the origin in its metadata (`base_model`,
    a `converted-from-KIND` tag) and text, and keeping the source card's license: the weights are the source's."""
    license_ = None
    source_card = Path(src) / "README.md"
    if source_card.is_file():
        try:
            license_ = ModelCard.load(source_card, ignore_metadata_errors=True).data.to_dict().get("license")
        except Exception:  # an unreadable source card only costs the license line
            license_ = None
    origin = f"[`{base_model}`](https://huggingface.co/{base_model})" if base_model else f"`{Path(src).name}`"
    summary = (
        f"Not trained here: converted from the {family_title} checkpoint {origin} (`{architecture}`) with "
        f"`vanilla-transformer convert {kind}`. The weights are unchanged, so the model computes the original's "
        "logits up to float rounding and generates the same translations; the generation settings and the "
        "tokenizer are the original's. The source's own card describes its training data and evaluation."
    )
    codes = {name: lang if isinstance(lang, str) and LANGUAGE_CODE.fullmatch(lang) else None
             for name, lang in zip(("source_lang", "target_lang"), languages)}
    card = render_model_card(model, **codes, training_summary=summary, base_model=base_model,
                             license=license_ or "unknown", model_id=Path(out).name)
    card.data.tags = [*(card.data.tags or []), f"converted-from-{kind}"]
    return card


__all__ = ["card_languages", "converted_model_card", "hub_id_from_path", "render_model_card", "save_for_hub"]
