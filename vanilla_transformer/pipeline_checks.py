"""Input checks for transformers' own pipelines when they serve our models: one clear error instead of a silent
wrong answer.

- `pipeline("text-generation")("")` and `pipeline("text-classification")("")`: transformers runs the model on an
  empty text (the decoder-only model then continues nothing, the classifier labels nothing) and returns a result.
- `pipeline("fill-mask")(text, targets=["zebra"])`: transformers replaces a target that is not in the vocabulary by
  the first token of its tokenization (a logged warning at most) and scores that token instead.
- `pipeline("text-generation", model=folder)` (or text-classification, fill-mask) of a folder saved from one of our
  classes of another layout (an encoder-decoder folder for the decoder-only class): our `from_pretrained` loads it
  quietly inside a pipeline and marks it `wrong_layout`; the pipeline refuses it in one line instead of answering
  with random weights.

These pipeline classes are transformers' (registered for every model type), and no public extension point
reaches them for one model type only: `PIPELINE_REGISTRY.register_pipeline` of a subclass would replace the class
of these tasks for every model (and mark it as custom code that `Pipeline.save_pretrained` then writes into other
models' folders), `custom_pipelines` in config.json serves only `trust_remote_code` loads, and the checks need what
never reaches our model (the raw text before tokenization, fill-mask's `targets`, the pipeline's construction). So
`register_pipeline_input_checks` wraps their `preprocess` / `get_target_ids` / `__init__` once, and the wrappers act
only when the pipeline's model is ours (`model_type == "vanilla_transformer"`, or a model our `from_pretrained`
marked `wrong_layout`); every other model gets transformers' behaviour unchanged. Idempotent. (With remote code
only, without this package, transformers' behaviour stays.)
"""

import functools

from transformers.pipelines.fill_mask import FillMaskPipeline
from transformers.pipelines.text_classification import TextClassificationPipeline
from transformers.pipelines.text_generation import TextGenerationPipeline

from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.modeling_vanilla_transformer import PIPELINES_REFUSING_WRONG_LAYOUT


def _ours(pipeline) -> bool:
    config = getattr(getattr(pipeline, "model", None), "config", None)
    return getattr(config, "model_type", None) == VanillaTransformerConfig.model_type


def _is_empty_text(value) -> bool:
    return isinstance(value, str) and not value.strip()


def _refuse_empty_text(method, task: str, what: str):
    """Wrap `preprocess(self, inputs, ...)` of a text pipeline: an empty or blank string is a ValueError."""
    if getattr(method, "_refuses_empty_text", False):
        return method

    @functools.wraps(method)
    def preprocess(self, inputs, *args, **kwargs):
        if _ours(self) and _is_empty_text(inputs):
            raise ValueError(f"{task} got an empty text; give the {what}.")
        return method(self, inputs, *args, **kwargs)

    preprocess._refuses_empty_text = True
    return preprocess


def _refuse_unknown_targets(method):
    """Wrap `FillMaskPipeline.get_target_ids`: every target must be a token of the vocabulary."""
    if getattr(method, "_refuses_unknown_targets", False):
        return method

    @functools.wraps(method)
    def get_target_ids(self, targets):
        if _ours(self):
            vocabulary = self.tokenizer.get_vocab()
            for target in [targets] if isinstance(targets, str) else list(targets):
                if target not in vocabulary:
                    raise ValueError(f"fill-mask target {target!r} is not a token of the model's vocabulary; give "
                                     "tokens as the tokenizer writes them (e.g. tokenizer.tokenize(word)).")
        return method(self, targets)

    get_target_ids._refuses_unknown_targets = True
    return get_target_ids


def _refuse_wrong_layout(init):
    """Wrap a pipeline's `__init__`: a model our `from_pretrained` marked `wrong_layout` is a ValueError (one line)."""
    if getattr(init, "_refuses_wrong_layout", False):
        return init

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        model = kwargs["model"] if "model" in kwargs else args[0] if args else None
        if getattr(model, "wrong_layout", None):
            raise ValueError(model.wrong_layout)
        init(self, *args, **kwargs)

    __init__._refuses_wrong_layout = True
    return __init__


def register_pipeline_input_checks() -> None:
    """Install the checks of this module's docstring on transformers' pipeline classes (idempotent)."""
    TextGenerationPipeline.preprocess = _refuse_empty_text(
        TextGenerationPipeline.preprocess, "text-generation", "text (prompt) to continue")
    TextClassificationPipeline.preprocess = _refuse_empty_text(
        TextClassificationPipeline.preprocess, "text-classification", "text to classify")
    FillMaskPipeline.get_target_ids = _refuse_unknown_targets(FillMaskPipeline.get_target_ids)

    for task, pipeline_class in (("text-generation", TextGenerationPipeline),
                                 ("text-classification", TextClassificationPipeline), ("fill-mask", FillMaskPipeline)):
        pipeline_class.__init__ = _refuse_wrong_layout(pipeline_class.__init__)
        PIPELINES_REFUSING_WRONG_LAYOUT.add(task)
    PIPELINES_REFUSING_WRONG_LAYOUT.add("sentiment-analysis")  # text-classification's other name
