"""Importing the package registers the model through transformers' public APIs and changes nothing else of
transformers (docs/architecture.md, "What importing the package does to transformers"): a fresh interpreter imports
every module the package's import loads, takes a snapshot of their state, imports the package and compares."""

import json
import os
import subprocess
import sys
import textwrap

import pytest
import transformers.pipelines as pipelines

from helpers import REPO_ROOT

# The third-party packages whose modules are compared: every module of theirs the package's import loads.
PACKAGES = ("transformers", "huggingface_hub", "tokenizers", "safetensors", "torch")

LOADED_MODULES = textwrap.dedent(
    f"""
    import json, sys
    import vanilla_transformer
    print(json.dumps(sorted(name for name in sys.modules if name.split(".")[0] in {PACKAGES!r})))
    """
)

# Prints the differences, one string each, between the state before and after `import vanilla_transformer`.
SNAPSHOT = textwrap.dedent(
    '''
    import importlib, json, logging, os, pkgutil, signal, sys, threading, types, warnings

    assert "vanilla_transformer" not in sys.modules
    PACKAGES = tuple(sys.argv[1].split(","))
    for name in json.loads(open(sys.argv[2]).read()):
        importlib.import_module(name)
    import transformers.pipelines

    for module in pkgutil.iter_modules(transformers.pipelines.__path__):  # every pipeline class (some load lazily)
        importlib.import_module(f"transformers.pipelines.{module.name}")

    import torch
    import transformers.utils.logging as transformers_logging


    def ours(value) -> bool:
        """Defined in one of the compared packages: a class or function, or an instance of such a class. (Read off
        the class, never the object: a lazy module or object would import whatever it is asked for.)"""
        if isinstance(value, types.ModuleType):
            return False
        owner = value if isinstance(value, (type, types.FunctionType)) else type(value)
        module = vars(owner).get("__module__") if isinstance(owner, type) else owner.__module__
        return isinstance(module, str) and module.split(".")[0] in PACKAGES


    def contents(value):
        """A shallow copy of a plain container, compared item by item (by identity). Not of a subclass: the Auto
        classes' lazy mappings would import every model to list their items."""
        return dict(value) if type(value) is dict else list(value) if type(value) in (list, set) else None


    def take() -> dict:
        """path -> (the object, a shallow copy of its contents or of its attributes), each object once."""
        state, seen = {}, set()

        def visit(path, value, depth):
            if id(value) in seen:
                state[path] = (value, None)
                return
            seen.add(id(value))
            copy = contents(value)
            if copy is None and depth < 2 and (isinstance(value, type) or (ours(value) and hasattr(value, "__dict__")
                                                                           and not callable(value))):
                copy = dict(vars(value))  # a class's attributes, or an instance's (a registry, a mapping)
                for key, member in copy.items():
                    if contents(member) is not None or (ours(member) and hasattr(member, "__dict__")
                                                        and not isinstance(member, type) and not callable(member)):
                        visit(f"{path}.{key}", member, depth + 1)
            state[path] = (value, copy)

        modules = {name: module for name, module in sorted(sys.modules.items())
                   if name.split(".")[0] in PACKAGES and module is not None}
        for name, module in modules.items():
            state[name] = (module, dict(vars(module)))
        # classes and functions first, each under the module that defines it; then registries, mappings and
        # containers, each under the first module (in sorted order) that holds it
        for name, module in modules.items():
            for key, value in list(vars(module).items()):
                if isinstance(value, (type, types.FunctionType)) and ours(value) and value.__module__ == name:
                    visit(f"{name}.{key}", value, 0)
        for name, module in modules.items():
            for key, value in list(vars(module).items()):
                if contents(value) is not None or (ours(value) and not callable(value) and hasattr(value, "__dict__")
                                                   and not isinstance(value, types.ModuleType)):
                    visit(f"{name}.{key}", value, 0)
        return state


    def settings() -> dict:
        """The process-wide state a library could change on import."""
        loggers = {name: logger for name, logger in logging.root.manager.loggerDict.items()
                   if isinstance(logger, logging.Logger)}
        loggers[""] = logging.root
        return {
            "os.environ": dict(os.environ),
            "transformers verbosity": transformers_logging.get_verbosity(),
            "loggers": {name: (logger.level, list(logger.filters), list(logger.handlers), logger.propagate,
                               logger.disabled) for name, logger in loggers.items()},
            "warnings.filters": list(warnings.filters),
            "sys": (list(sys.path), list(sys.meta_path), list(sys.path_hooks), sys.excepthook, sys.displayhook,
                    sys.getrecursionlimit(), sys.getswitchinterval(), threading.excepthook),
            "signals": [signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)],
            "torch": (torch.get_default_dtype(), torch.get_num_threads(), torch.get_num_interop_threads(),
                      torch.are_deterministic_algorithms_enabled(), torch.is_grad_enabled(),
                      torch.get_float32_matmul_precision(), torch.backends.cudnn.benchmark,
                      torch.backends.cudnn.deterministic, torch.backends.cuda.matmul.allow_tf32),
        }


    def name_of(key) -> str:
        return key if isinstance(key, str) else getattr(key, "__name__", None) or repr(key)


    before, settings_before = take(), settings()
    import vanilla_transformer  # noqa: E402,F401

    differences = []
    for path, (value, copy) in before.items():
        if copy is None:
            continue
        now = contents(value) if contents(value) is not None else dict(vars(value))
        if isinstance(copy, list):
            if len(now) != len(copy) or any(a is not b for a, b in zip(now, copy)):
                differences.append(f"{path} changed")
            continue
        for key in copy.keys() - now.keys():
            differences.append(f"{path}: - {name_of(key)}")
        for key in now.keys() - copy.keys():
            added = now[key]
            # a module's new names: its submodules, and what its lazy __getattr__ keeps once asked for (its own)
            if path in sys.modules and (isinstance(added, types.ModuleType) or ours(added)):
                continue
            differences.append(f"{path}: + {name_of(key)}")
        for key in copy.keys() & now.keys():
            if now[key] is not copy[key]:
                differences.append(f"{path}.{name_of(key)} changed")
    settings_after = settings()
    for key, value in settings_before.items():
        if key == "loggers":  # loggers made by the import (the package's own) may be new: the others must not change
            changed = [name for name in value if settings_after[key][name] != value[name]]
            differences += [f"logger {name!r} changed" for name in changed]
        elif settings_after[key] != value:
            differences.append(f"{key} changed")
    compared = [path for path in json.loads(sys.argv[3]) if before.get(path, (None, None))[1] is not None]
    print(json.dumps({"differences": sorted(differences), "compared": compared}))
    '''
)


def run(script: str, *args: str) -> str:
    env = {key: value for key, value in os.environ.items() if not key.startswith("PYTHON")}
    env.update(PYTHONPATH=str(REPO_ROOT), HF_HUB_OFFLINE="1")
    result = subprocess.run([sys.executable, "-c", script, *args], cwd=REPO_ROOT, env=env, stdin=subprocess.DEVNULL,
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.strip().splitlines()[-1]


@pytest.mark.slow  # a fresh interpreter
def test_importing_the_package_only_registers_and_lets_translation_tasks_through(tmp_path):
    modules = tmp_path / "modules.json"
    modules.write_text(run(LOADED_MODULES))
    must_compare = ["transformers.pipelines.text_generation.TextGenerationPipeline",
                    "transformers.pipelines.text_classification.TextClassificationPipeline",
                    "transformers.pipelines.fill_mask.FillMaskPipeline", "transformers.pipelines.PIPELINE_REGISTRY",
                    "transformers.pipelines.TASK_ALIASES", "transformers.pipelines.REMOVED_TASKS",
                    "transformers.modeling_utils.PreTrainedModel", "transformers.configuration_utils.PreTrainedConfig",
                    "transformers.generation.utils.GenerationMixin"]
    result = json.loads(run(SNAPSHOT, ",".join(PACKAGES), str(modules), json.dumps(must_compare)))
    assert result["compared"] == [path for path in must_compare if "REMOVED" not in path
                                  or hasattr(pipelines, "REMOVED_TASKS")]  # 5.18 has no removed tasks
    differences = result["differences"]

    registered = {  # the public register APIs
        "transformers.models.auto.configuration_auto.CONFIG_MAPPING._extra_content: + vanilla_transformer",
        "transformers.pipelines.SUPPORTED_TASKS: + translation",  # PIPELINE_REGISTRY.supported_tasks
    } | {f"transformers.models.auto.modeling_auto.{auto_class}._model_mapping._extra_content: + VanillaTransformerConfig"
         for auto_class in ("AutoModel", "AutoModelForSeq2SeqLM", "AutoModelForCausalLM", "AutoModelForMaskedLM",
                            "AutoModelForSequenceClassification")}
    # the one change to transformers (compat.let_translation_tasks_through): transformers >= 5.19 / 5.18
    gate = ("transformers.pipelines._resolve_deprecated_task changed" if hasattr(pipelines, "_resolve_deprecated_task")
            else "transformers.pipelines.PIPELINE_REGISTRY: + check_task")
    assert set(differences) == registered | {gate}, differences
