"""Registration with transformers' Auto classes, `pipeline()` and Hub remote code."""

import functools
import re

import transformers.pipelines as pipelines
from transformers import (
    AutoConfig,
    AutoModel,
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
)

from .configuration_vanilla_transformer import VanillaTransformerConfig
from .modeling_vanilla_transformer import (
    VanillaTransformerForCausalLM,
    VanillaTransformerForConditionalGeneration,
    VanillaTransformerForMaskedLM,
    VanillaTransformerForSequenceClassification,
    VanillaTransformerModel,
)
from .pipeline_checks import register_pipeline_input_checks
from .pipeline_translation import TranslationPipeline

# "translation" and v4's parametrized form "translation_en_to_de"
TRANSLATION_TASK = re.compile(r"translation(_[^_]+_to_[^_]+)?")


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
    the classes for remote code so that `save_pretrained` writes `auto_map` and copies the source files, and make
    `pipeline("translation")` / `pipeline("translation_xx_to_yy")` build a `TranslationPipeline`; transformers'
    text-generation, text-classification and fill-mask pipelines refuse empty texts and unknown targets for our
    models (`pipeline_checks`)."""
    if VanillaTransformerConfig.model_type not in AutoConfig.for_model.__globals__["CONFIG_MAPPING"]:
        AutoConfig.register(VanillaTransformerConfig.model_type, VanillaTransformerConfig)
    VanillaTransformerConfig.register_for_auto_class()
    for auto_class, model_class in AUTO_CLASSES:
        auto_class.register(VanillaTransformerConfig, model_class, exist_ok=True)
        model_class.register_for_auto_class(auto_class.__name__)
    register_translation_pipeline()
    register_pipeline_input_checks()


def register_translation_pipeline() -> None:
    """`pipeline("translation", ...)` and `pipeline("translation_xx_to_yy", ...)` -> `TranslationPipeline`, for any
    `AutoModelForSeq2SeqLM` model, without `trust_remote_code`.

    The public hook is `PIPELINE_REGISTRY.register_pipeline`, but registering is not enough: the registry matches
    task names exactly, so it cannot hold every language pair, and from transformers 5.19 `pipeline()` first passes
    the task to `transformers.pipelines._resolve_deprecated_task`, which raises KeyError for every task in
    `REMOVED_TASKS` ("translation") and for every name starting with "translation_". Nothing configures either, so we
    wrap both (below): translation task names (and only they) pass, and a "translation_xx_to_yy" name becomes a
    registry alias of "translation" when first used, as v4 did. Every other task, removed ones included, still gets
    transformers' own answer. Idempotent.
    """
    registered = pipelines.PIPELINE_REGISTRY.supported_tasks.get("translation", {}).get("impl")
    if registered is not TranslationPipeline:
        pipelines.PIPELINE_REGISTRY.register_pipeline(
            "translation", pipeline_class=TranslationPipeline, pt_model=AutoModelForSeq2SeqLM, type="text"
        )
    # Our config.json lists "translation" in `custom_pipelines` for users without this package; pipeline() would
    # then demand trust_remote_code. With the package, the registered class serves it (see the flag's comment).
    VanillaTransformerConfig.hide_custom_pipelines = True

    # Both hooks below keep every other task's answer, and are idempotent.
    # `PIPELINE_REGISTRY.check_task` (public; all of 5.x) matches names exactly: "translation_xx_to_yy" becomes a
    # registry alias of "translation" when first asked for, as v4 did.
    registry = pipelines.PIPELINE_REGISTRY
    check = registry.check_task
    if not getattr(check, "_passes_translation_tasks", False):

        @functools.wraps(check)
        def check_task(task: str):
            if isinstance(task, str) and TRANSLATION_TASK.fullmatch(task) and task != "translation":
                registry.task_aliases.setdefault(task, "translation")
            return check(task)

        check_task._passes_translation_tasks = True
        registry.check_task = check_task

    # Private API, transformers >= 5.19 (5.18 has no such function and needs nothing more): `pipeline()`
    # first passes the task to `_resolve_deprecated_task`, which raises KeyError for "translation" and
    # "translation_*" (REMOVED_TASKS). Translation task names pass it unchanged.
    resolve = getattr(pipelines, "_resolve_deprecated_task", None)
    if resolve is not None and not getattr(resolve, "_passes_translation_tasks", False):

        @functools.wraps(resolve)
        def resolve_task(task: str) -> str:
            if isinstance(task, str) and TRANSLATION_TASK.fullmatch(task):
                return task
            return resolve(task)

        resolve_task._passes_translation_tasks = True
        pipelines._resolve_deprecated_task = resolve_task
