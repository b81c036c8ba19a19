"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a Hugging Face model.

Importing the package registers the model with the Auto classes and with `pipeline("translation")`
(`registration.register`). The public names below are loaded on first use (PEP 562), so that a module of the package
that needs none of them (the command line's parsers, the file helpers) does not import torch with the package.
"""

import importlib
import sys

__version__ = "0.1.0"

# public name -> the module of this package that defines it
_PUBLIC_NAMES = {
    "PAPER_PRESETS": "configuration_vanilla_transformer",
    "VanillaTransformerConfig": "configuration_vanilla_transformer",
    "VanillaTransformerDecoder": "modeling_vanilla_transformer",
    "VanillaTransformerEncoder": "modeling_vanilla_transformer",
    "VanillaTransformerForCausalLM": "modeling_vanilla_transformer",
    "VanillaTransformerForConditionalGeneration": "modeling_vanilla_transformer",
    "VanillaTransformerForMaskedLM": "modeling_vanilla_transformer",
    "VanillaTransformerForSequenceClassification": "modeling_vanilla_transformer",
    "VanillaTransformerModel": "modeling_vanilla_transformer",
    "VanillaTransformerPreTrainedModel": "modeling_vanilla_transformer",
    "sinusoidal_position_encoding": "modeling_vanilla_transformer",
    "TranslationPipeline": "pipeline_translation",
    "register": "registration",
    "render_model_card": "cards.model_card",
    "save_for_hub": "cards.model_card",
}

__all__ = sorted(_PUBLIC_NAMES)


def __getattr__(name: str):
    if name not in _PUBLIC_NAMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{_PUBLIC_NAMES[name]}"), name)
    globals()[name] = value  # loaded once
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_PUBLIC_NAMES))


# The command line (`vanilla-transformer`) loads its entry point, the module `vanilla_transformer_cli`, before this
# package, and registers just before a command runs: its --help and usage errors import neither torch nor
# transformers. Every other import registers here.
if "vanilla_transformer_cli" not in sys.modules:
    from vanilla_transformer.registration import register

    register()
