"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a Hugging Face model.

Importing the package registers the model with the Auto classes and with `pipeline("translation")`.
"""

from vanilla_transformer.cards.model_card import render_model_card, save_for_hub
from vanilla_transformer.configuration_vanilla_transformer import PAPER_PRESETS, VanillaTransformerConfig
from vanilla_transformer.modeling_vanilla_transformer import (
    VanillaTransformerDecoder,
    VanillaTransformerEncoder,
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
    sinusoidal_position_encoding,
)
from vanilla_transformer.pipeline_translation import TranslationPipeline
from vanilla_transformer.registration import register

register()

__version__ = "0.1.0"

__all__ = [
    "PAPER_PRESETS",
    "TranslationPipeline",
    "VanillaTransformerConfig",
    "VanillaTransformerDecoder",
    "VanillaTransformerEncoder",
    "VanillaTransformerForCausalLM",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerForMaskedLM",
    "VanillaTransformerForSequenceClassification",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "register",
    "render_model_card",
    "save_for_hub",
    "sinusoidal_position_encoding",
]
