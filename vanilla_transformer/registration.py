"""Registration with transformers' Auto classes and Hub remote code."""

from transformers import AutoConfig, AutoModel, AutoModelForSeq2SeqLM

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import VanillaTransformerForConditionalGeneration, VanillaTransformerModel


def register() -> None:
    """Make `AutoConfig`, `AutoModel` and `AutoModelForSeq2SeqLM` know `model_type="vanilla_transformer"`, and mark
    the classes for remote code so that `save_pretrained` writes `auto_map` and copies the source files."""
    if VanillaTransformerConfig.model_type not in AutoConfig.for_model.__globals__["CONFIG_MAPPING"]:
        AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig)
        AutoModel.register(VanillaTransformerConfig, VanillaTransformerModel)
        AutoModelForSeq2SeqLM.register(VanillaTransformerConfig, VanillaTransformerForConditionalGeneration)
    VanillaTransformerConfig.register_for_auto_class()
    VanillaTransformerModel.register_for_auto_class("AutoModel")
    VanillaTransformerForConditionalGeneration.register_for_auto_class("AutoModelForSeq2SeqLM")
