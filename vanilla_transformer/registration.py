"""Registration with transformers' Auto classes, `pipeline()` and Hub remote code, through their public `register`
APIs, plus the one change to transformers that `pipeline("translation")` needs (`compat.let_translation_tasks_through`,
explained there). transformers' own pipeline classes stay as they are: the input checks our models need are in the
models themselves (`forward`, `from_pretrained`)."""

import transformers.pipelines as pipelines
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

from vanilla_transformer.compat import let_translation_tasks_through
from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)
from vanilla_transformer.pipeline_translation import TranslationPipeline

# Each model class and the Auto class that builds it from a VanillaTransformerConfig: the encoder-decoder (the paper's
# model), the decoder-only language model and the two encoder-only models.
AUTO_CLASSES = (
    (AutoModel, VanillaTransformerModel),
    (AutoModelForSeq2SeqLM, VanillaTransformerForConditionalGeneration),
    (AutoModelForCausalLM, VanillaTransformerForCausalLM),
    (AutoModelForMaskedLM, VanillaTransformerForMaskedLM),
    (AutoModelForSequenceClassification, VanillaTransformerForSequenceClassification),
)


def register() -> None:
    """Make `AutoConfig` and the Auto model classes of `AUTO_CLASSES` know `model_type="vanilla_transformer"`, mark
    our classes for remote code so that `save_pretrained` writes `auto_map` and copies the source files, and make
    `pipeline("translation")` / `pipeline("translation_xx_to_yy")` build a `TranslationPipeline`. Idempotent."""
    AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig, exist_ok=True)
    VanillaTransformerConfig.register_for_auto_class()
    for auto_class, model_class in AUTO_CLASSES:
        auto_class.register(VanillaTransformerConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)
    register_translation_pipeline()


def register_translation_pipeline() -> None:
    """`pipeline("translation", ...)` and `pipeline("translation_xx_to_yy", ...)` -> `TranslationPipeline`, for any
    `AutoModelForSeq2SeqLM` model, without `trust_remote_code`. Idempotent.

    `PIPELINE_REGISTRY.register_pipeline` (public) registers the class for "translation". Registering is not enough:
    transformers 5 refuses the removed task names before it looks at the registry, and the registry matches names
    exactly, so it cannot hold every language pair; `compat.let_translation_tasks_through` lets exactly those names
    through. The loaded config of a saved folder leaves out the folder's own `custom_pipelines` entry (see
    `configuration_vanilla_transformer`), so this registered class serves it."""
    registered = pipelines.PIPELINE_REGISTRY.supported_tasks.get("translation", {}).get("impl")
    if registered is not TranslationPipeline:
        pipelines.PIPELINE_REGISTRY.register_pipeline(
            "translation", pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
    let_translation_tasks_through(pipelines)
