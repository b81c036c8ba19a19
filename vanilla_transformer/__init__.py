"""vanilla-transformer: the Transformer of "Attention Is All You Need" as a Hugging Face model.

Importing the package registers the model with the Auto classes and with `pipeline("translation")`.
"""

from .configuration_vanilla_transformer import PAPER_PRESETS, VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerDecoder,
    VanillaTransformerEncoder,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerModel,
    VanillaTransformerPreTrainedModel,
    sinusoidal_position_encoding,
)
from .registration import register

register()

__version__ = "0.1.0"

__all__ = [
    "PAPER_PRESETS",
    "VanillaTransformerConfig",
    "VanillaTransformerDecoder",
    "VanillaTransformerEncoder",
    "VanillaTransformerForConditionalGeneration",
    "VanillaTransformerModel",
    "VanillaTransformerPreTrainedModel",
    "register",
    "sinusoidal_position_encoding",
]
