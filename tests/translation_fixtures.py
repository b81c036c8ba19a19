"""A tiny tokenizer and tiny translation models for the pipeline, Hub-folder and model-card tests."""

import functools

from helpers import tiny_model
from vanilla_transformer.training.tokenizer import train_tokenizer

# Multi30k-style captions (German with their English translations).
GERMAN = [
    "Ein Mann mit einem orangefarbenen Hut, der etwas anstarrt.",
    "Ein Boston Terrier läuft über saftig-grünes Gras vor einem weißen Zaun.",
    "Ein Mädchen in einem Karateanzug bricht einen Stock mit einem Tritt.",
    "Fünf Leute in Winterjacken und mit Helmen stehen im Schnee.",
    "Leute reparieren das Dach eines Hauses.",
    "Zwei Hunde spielen im Schnee.",
]
ENGLISH = [
    "A man in an orange hat starring at something.",
    "A Boston Terrier is running on lush green grass in front of a white fence.",
    "A girl in karate uniform breaking a stick with a front kick.",
    "Five people in winter jackets and helmets stand in the snow.",
    "People are fixing the roof of a house.",
    "Two dogs are playing in the snow.",
]


@functools.lru_cache(maxsize=1)
def _trained_tokenizer():
    return train_tokenizer(GERMAN + ENGLISH, vocab_size=200, min_frequency=1, model_max_length=64)


def tiny_tokenizer():
    """A fresh copy each call (tests may change model_max_length)."""
    import copy

    return copy.deepcopy(_trained_tokenizer())


def tiny_translator(seed: int = 0, **overrides):
    """A random tiny VanillaTransformerForConditionalGeneration sized for `tiny_tokenizer()`, in eval mode."""
    return tiny_model(seed=seed, vocab_size=len(_trained_tokenizer()), **overrides)


def saved_with_export(model, tokenizer, folder) -> dict:
    """`model` saved for serving under FOLDER/pytorch (a model card saying de -> en), and its float32 CTranslate2
    export under FOLDER/ct2 where CTranslate2 is installed: {"pytorch": path[, "ctranslate2": path]}."""
    from vanilla_transformer import save_for_hub

    save_for_hub(model, tokenizer, folder / "pytorch", source_lang="de", target_lang="en")
    try:
        import ctranslate2  # noqa: F401
    except ImportError:
        return {"pytorch": folder / "pytorch"}
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    return {"pytorch": folder / "pytorch",
            "ctranslate2": to_ctranslate2(folder / "pytorch", folder / "ct2", quantization="float32")}
