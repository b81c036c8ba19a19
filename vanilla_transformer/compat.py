"""Every difference between the transformers releases this model supports, in one place.

The model, configuration and pipeline files import this module relatively, so `save_pretrained` copies it next to them
(transformers copies a remote-code file's relative imports, recursively) and a `trust_remote_code` load of a saved
folder runs it on whatever transformers the user has. Each shim names the releases it serves; when the oldest
supported release moves past them, the shim and its callers' one line go.

This module imports only the standard library and transformers, and checks the version before anything else.
"""

import contextlib
import contextvars
import functools
import inspect
import logging
import re

import transformers

# ----------------------------------------------------------------------------------------------------------------
# The supported range. CI runs the oldest and the newest; pyproject.toml declares the same range. Older 5.x releases
# lack what we rely on: the dataclass `PreTrainedConfig` the configuration's fields are written for (5.4) and beam
# search over a target vocabulary that differs from `vocab_size` (5.18; converted FSMT checkpoints). Checked on
# import, so that `import vanilla_transformer` and a `trust_remote_code` load of a saved folder alike stop with one
# line.
SUPPORTED_TRANSFORMERS = ((5, 18), (6, 0))  # >= 5.18, < 6


def check_transformers_version(version: str = transformers.__version__) -> None:
    """Raise ImportError, in one line naming both versions, if `version` is outside `SUPPORTED_TRANSFORMERS`."""
    lowest, above = SUPPORTED_TRANSFORMERS
    found = re.match(r"(\d+)\.(\d+)", version)
    if found is None or not lowest <= (int(found[1]), int(found[2])) < above:
        raise ImportError(
            f"vanilla-transformer needs transformers>={lowest[0]}.{lowest[1]},<{above[0]}, but transformers {version} "
            f"is installed: pip install \"transformers>={lowest[0]}.{lowest[1]},<{above[0]}\""
        )


check_transformers_version()

from transformers.masking_utils import create_causal_mask  # noqa: E402  (after the version check)
from transformers.modeling_outputs import Seq2SeqLMOutput  # noqa: E402

# ----------------------------------------------------------------------------------------------------------------
# The cache's name. transformers 5.24 renamed the cache argument of models and mask functions, and the cache field of
# outputs, from `past_key_values` to `cache` (the old names still work there, with a deprecation warning); 5.18 - 5.23
# know only `past_key_values`. Our forwards keep the name `past_key_values` (every release's generate and users pass
# it), accept `cache` through `accepts_cache_keyword`, and speak the installed release's names to transformers.

# 5.24: "cache"; 5.18 - 5.23: "past_key_values" (read off the signature, so a release in between needs no table)
CACHE_ARGUMENT = "cache" if "cache" in inspect.signature(create_causal_mask).parameters else "past_key_values"
# 5.24: "cache"; 5.18 - 5.23: "past_key_values"
CACHE_FIELD = "cache" if "cache" in Seq2SeqLMOutput.__dataclass_fields__ else "past_key_values"


def accepts_cache_keyword(forward):
    """Let `forward(..., past_key_values=...)` also take the cache as `cache=...`, the name transformers 5.24's
    `generate` passes it under (5.18 - 5.23 pass `past_key_values`). The one place the two names meet."""

    @functools.wraps(forward)
    def forward_taking_either_name(self, *args, **kwargs):
        if "cache" in kwargs:
            cache = kwargs.pop("cache")
            if kwargs.get("past_key_values") is None:
                kwargs["past_key_values"] = cache
        return forward(self, *args, **kwargs)

    return forward_taking_either_name


def cache_capacity(cache) -> int:
    """How many positions a static cache holds: `get_max_length()` from transformers 5.24 on, `get_max_cache_shape()`
    in 5.18 - 5.23."""
    return (getattr(cache, "get_max_length", None) or cache.get_max_cache_shape)()


# ----------------------------------------------------------------------------------------------------------------
# Generation. Every release of the range (5.18 - 5.24) warns "Both `max_new_tokens` and `max_length` seem to have been
# set" whenever a model's generation config holds any `max_length` and a call asks for `max_new_tokens`, which takes
# precedence as transformers documents. Our generation config holds one (the length of a call that asks for none).

# Set while a generate call runs whose only `max_length` is the one in the model's generation config.
_only_the_configs_max_length = contextvars.ContextVar("only_the_configs_max_length", default=False)


class QuietAboutTheConfigsMaxLength(logging.Filter):
    """Drops generate's "Both `max_new_tokens` and `max_length` seem to have been set" while the flag above is set;
    every other record passes."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not _only_the_configs_max_length.get():
            return True
        message = record.getMessage()
        return not (message.startswith("Both `max_new_tokens`") and "seem to have been set" in message)


@contextlib.contextmanager
def quiet_about_the_configs_max_length(quiet: bool):
    """Within the block (a generate call), leave out that one warning if `quiet`. The filter sits on transformers'
    generation logger, added once per process (a remote-code load may run this file again)."""
    generation_logger = logging.getLogger("transformers.generation.utils")
    if not any(type(item).__name__ == QuietAboutTheConfigsMaxLength.__name__ for item in generation_logger.filters):
        generation_logger.addFilter(QuietAboutTheConfigsMaxLength())
    token = _only_the_configs_max_length.set(quiet)
    try:
        yield
    finally:
        _only_the_configs_max_length.reset(token)


# ----------------------------------------------------------------------------------------------------------------
# The translation pipeline (transformers 5 removed it; `pipeline_translation.TranslationPipeline` brings it back).


def pipeline_merges_generate_kwargs(pipeline_class: type) -> bool:
    """Whether `Pipeline._prepare_generate_kwargs` (private API, transformers >= 5.20) merges a call's generation
    parameters over the pipeline's, the model's generation config and `_default_generation_config`. In 5.18 - 5.19
    `Pipeline.__init__` merged the last three into (public) `self.generation_config` instead."""
    return hasattr(pipeline_class, "_prepare_generate_kwargs")


# "translation" and transformers 4's parametrized "translation_xx_to_yy"
TRANSLATION_TASK = re.compile(r"translation(_[^_]+_to_[^_]+)?")


def translation_task_gate(pipelines) -> tuple[object, str]:
    """(owner, attribute name) of the function through which `pipeline()` first refuses a translation task name
    (`pipelines` is the module `transformers.pipelines`):

    - transformers >= 5.19: `pipelines._resolve_deprecated_task` (private API), which raises KeyError for
      "translation" and "translation_*" (REMOVED_TASKS) before `pipeline()` looks at the registry;
    - 5.18 (no such function, and "translation" is refused nowhere once registered): `PIPELINE_REGISTRY.check_task`
      (public), which knows registered names only, exactly, so no "translation_xx_to_yy"."""
    if hasattr(pipelines, "_resolve_deprecated_task"):
        return pipelines, "_resolve_deprecated_task"
    return pipelines.PIPELINE_REGISTRY, "check_task"


def let_translation_tasks_through(pipelines) -> None:
    """The one change this package makes to transformers, applied by `registration.register()` only (the remote-code
    copies of this file never call it): the function of `translation_task_gate` is wrapped so that translation task
    names (`TRANSLATION_TASK`) reach the `TranslationPipeline` registered for "translation". Every other task name
    goes to transformers' function unchanged, removed tasks included. Idempotent.

    No public route exists: `pipeline("translation", model=...)` is refused by that function whatever is registered
    (`PIPELINE_REGISTRY.register_pipeline`) or passed (`pipeline_class=`), unless a folder's config lists the task in
    `custom_pipelines` (then `pipeline()` demands trust_remote_code or `pipeline_class=`; a model object has no such
    route). Only `TranslationPipeline(model=..., tokenizer=...)`, without `pipeline()`, needs no change.

    A "translation_xx_to_yy" name becomes a registry alias of "translation" when asked for
    (`PIPELINE_REGISTRY.task_aliases`, as transformers 4 did), and the pipeline keeps the full name, from which it
    takes the two language codes.
    """
    owner, name = translation_task_gate(pipelines)
    gate = getattr(owner, name)
    if getattr(gate, "_lets_translation_tasks_through", False):
        return
    registry = pipelines.PIPELINE_REGISTRY

    @functools.wraps(gate)
    def gate_letting_translation_through(task):
        if isinstance(task, str) and TRANSLATION_TASK.fullmatch(task):
            if task != "translation":
                registry.task_aliases.setdefault(task, "translation")
            if name == "_resolve_deprecated_task":
                return task  # not removed: registered
        return gate(task)

    gate_letting_translation_through._lets_translation_tasks_through = True
    setattr(owner, name, gate_letting_translation_through)


__all__ = [
    "CACHE_ARGUMENT",
    "CACHE_FIELD",
    "SUPPORTED_TRANSFORMERS",
    "TRANSLATION_TASK",
    "accepts_cache_keyword",
    "cache_capacity",
    "check_transformers_version",
    "let_translation_tasks_through",
    "pipeline_merges_generate_kwargs",
    "quiet_about_the_configs_max_length",
    "translation_task_gate",
]
