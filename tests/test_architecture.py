"""The package's architecture, as docs/architecture.md draws it, read from the source with `ast`: the layers and
what may import what, no import cycles, no private names imported across modules, at most 10 modules at the package
root, function-local imports only of optional extras, no function over 100 lines.

Every import counts, function-local ones included (a cycle hidden inside a function is still a cycle)."""

import ast
import pathlib
from collections import defaultdict

import pytest

from helpers import REPO_ROOT

PACKAGE = REPO_ROOT / "vanilla_transformer"

# The layers, lowest first: a module imports only modules of its own layer or of lower ones. Each entry is a module
# path under the package ("" is the package itself, its __init__); a module belongs to its longest matching entry.
LAYERS = [
    ("remote code", ["casing", "compat", "configuration_vanilla_transformer", "decoding", "modeling_vanilla_transformer",
                     "pipeline_translation"]),
    ("transformers integration", ["registration"]),
    ("foundations", ["files", "cards", "extras", "cli.options"]),
    ("package", [""]),
    ("checkpoints", ["checkpoints", "interop.ctranslate2_runtime"]),
    ("tools", ["translate", "interop", "inspect", "training"]),
    ("service", ["serve"]),
    ("command line", ["cli", "__main__"]),
]
REMOTE_CODE = [f"vanilla_transformer.{name}" for name in LAYERS[0][1]]

# Optional extras (pyproject.toml's extras and what a user brings): imported where they are used, so that the
# package imports without them and only the feature that needs one fails, with a line saying what to install.
OPTIONAL_EXTRAS = {"gradio", "gradio_client", "ctranslate2", "matplotlib", "peft", "fastapi", "uvicorn",
                   "sentencepiece", "sacremoses", "sacrebleu", "num2words", "datasets", "accelerate", "tensorboard",
                   "sentencex", "prometheus_client", "typo"}
# The command line imports the library a command drives inside its `run`: `--help` stays fast and a missing extra
# fails only the command that needs it.
CLI_LAZY = {"vanilla_transformer", "transformers", "huggingface_hub", "torch"}
# Other function-local imports, each for its reason: module -> the imported modules allowed there.
LOCAL_IMPORTS_ALLOWED = {
    # only when saving, so that using the model never loads the pipeline (save_pretrained's docstring)
    "vanilla_transformer.modeling_vanilla_transformer": {"vanilla_transformer.pipeline_translation"},
    # `from vanilla_transformer.serve import ServeSettings` works without the serve extra; the app and the engine,
    # which need FastAPI and torch, are imported when asked for (the module's __getattr__)
    "vanilla_transformer.serve": {"vanilla_transformer.serve.app", "vanilla_transformer.serve.engine"},
    # torch and transformers' model code for PyTorch folders and models only: a CTranslate2 folder is told, loaded and
    # translated without them (`vanilla-transformer translate --model CT2_FOLDER` imports neither)
    "vanilla_transformer.checkpoints.kinds": {"vanilla_transformer.checkpoints.classes"},
    "vanilla_transformer.checkpoints.load": {"vanilla_transformer.checkpoints.pytorch"},
    "vanilla_transformer.translate": {"vanilla_transformer.translate.pytorch"},
    # the connections' protocol subclasses uvicorn's (the serve extra), imported where a server is made
    "vanilla_transformer.serve.server": {"vanilla_transformer.serve.connections"},
    "vanilla_transformer.serve.workers": {"vanilla_transformer.serve.connections"},
}
MAX_ROOT_MODULES = 10
MAX_FUNCTION_LINES = 100


def module_name(path: pathlib.Path) -> str:
    parts = path.relative_to(REPO_ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}
TREES = {name: ast.parse(path.read_text(encoding="utf-8"), filename=str(path)) for name, path in MODULES.items()}


def imported_modules(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement imports: `from a.b import c` is a.b.c if that is a module, else a.b."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:  # relative: from the module's package, one level up per extra dot
        package = module.split(".") if MODULES[module].name == "__init__.py" else module.split(".")[:-1]
        package = package[: len(package) - node.level + 1]
        base = ".".join(package + ([base] if base else []))
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base for alias in node.names]


def is_main_block(node: ast.AST) -> bool:
    """`if __name__ == "__main__":`, a module's program entry (`python -m MODULE`), which runs the command line."""
    test = getattr(node, "test", None) if isinstance(node, ast.If) else None
    return (isinstance(test, ast.Compare) and isinstance(test.left, ast.Name) and test.left.id == "__name__"
            and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators))


def imports(module: str, local: bool | None = None):
    """(statement, imported module) for each import of `module`, but those of its program entry (`is_main_block`);
    `local`: only function-local (True) or only module level (False) ones."""
    tree = TREES[module]
    in_function, in_main_block = set(), set()
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            in_function.update(id(node) for node in ast.walk(function) if node is not function)
    for block in tree.body:
        if is_main_block(block):
            in_main_block.update(id(node) for node in ast.walk(block))
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in in_main_block:
            if local is None or (id(node) in in_function) == local:
                for name in imported_modules(module, node):
                    yield node, name


def package_graph() -> dict[str, set[str]]:
    graph = defaultdict(set)
    for module in MODULES:
        for _, name in imports(module):
            if name in MODULES and name != module:
                graph[module].add(name)
    return graph


def layer_of(module: str) -> int:
    relative = module.removeprefix("vanilla_transformer").removeprefix(".")
    best = None
    for index, (_, entries) in enumerate(LAYERS):
        for entry in entries:
            if relative == entry or relative.startswith(entry + ".") or (entry == "" and relative == ""):
                if best is None or len(entry) > best[0]:
                    best = (len(entry), index)
    assert best is not None, f"{module} is in no layer of LAYERS (add it, and to docs/architecture.md)"
    return best[1]


def test_every_module_imports_only_its_own_layer_or_lower_ones():
    wrong = [f"{module} ({LAYERS[layer_of(module)][0]}) imports {name} ({LAYERS[layer_of(name)][0]})"
             for module, names in package_graph().items() for name in names if layer_of(name) > layer_of(module)]
    assert not wrong, "\n".join(wrong)


def test_the_remote_code_files_import_each_other_only_relatively():
    """Saved folders hold copies of these files (transformers copies a file's relative imports), so they run where
    this package is not installed."""
    for module in REMOTE_CODE:
        for node, name in imports(module):
            if name.split(".")[0] == "vanilla_transformer":
                assert isinstance(node, ast.ImportFrom) and node.level > 0, f"{module} imports {name} absolutely"
                assert name in REMOTE_CODE, f"{module} imports {name}, which saved folders do not hold"


def test_no_import_cycles():
    graph, state, stack = package_graph(), {}, []

    def visit(module):  # depth first; a module met again while on the stack closes a cycle
        state[module] = "open"
        stack.append(module)
        for name in sorted(graph[module]):
            if state.get(name) == "open":
                pytest.fail("import cycle: " + " -> ".join(stack[stack.index(name):] + [name]))
            if name not in state:
                visit(name)
        stack.pop()
        state[module] = "done"

    for module in MODULES:
        if module not in state:
            visit(module)


def test_no_private_names_imported_across_modules():
    private = set()
    for module, tree in TREES.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                source = imported_modules(module, ast.ImportFrom(module=node.module, names=[ast.alias("")],
                                                                 level=node.level))[0].rstrip(".")
                private.update((module, source, alias.name) for alias in node.names
                               if alias.name.startswith("_") and not alias.name.startswith("__"))
    assert not private, sorted(private)


def test_at_most_ten_modules_at_the_package_root():
    root = sorted(path.name for path in PACKAGE.glob("*.py"))
    assert len(root) <= MAX_ROOT_MODULES, root


def test_function_local_imports_are_optional_extras_or_have_their_reason():
    wrong = []
    for module in MODULES:
        allowed = LOCAL_IMPORTS_ALLOWED.get(module, set())
        for node, name in imports(module, local=True):
            top = name.split(".")[0]
            if top in OPTIONAL_EXTRAS or name in allowed:
                continue
            if module.startswith("vanilla_transformer.cli.") and top in CLI_LAZY:
                continue
            wrong.append(f"{module}:{node.lineno} imports {name} inside a function")
    assert not wrong, "\n".join(wrong)


def test_the_allowances_are_still_needed():
    """An allowance that nothing uses any more is taken out, so that the lists stay narrow."""
    used = {(module, name) for module in LOCAL_IMPORTS_ALLOWED for _, name in imports(module, local=True)}
    unused = [(module, name) for module, names in LOCAL_IMPORTS_ALLOWED.items() for name in names
              if (module, name) not in used]
    assert not unused, unused


def test_no_function_over_100_lines():
    long = [f"{module}.{node.name}: {node.end_lineno - node.lineno + 1} lines" for module, tree in TREES.items()
            for node in ast.walk(tree) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert not long, long
