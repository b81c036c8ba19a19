"""Every example in README.md and docs/*.md runs: the fenced ```python and ```bash blocks, as a reader would run them.

How it works (see docs/tests.md):

- Each fenced block whose language is python, py, bash, sh, shell or console is one test, named
  `FILE:LINE` (the line of its opening fence). Output is fenced as ```text and is not run; a fence without a
  language fails `test_every_fenced_block_names_its_language`.
- A block runs alone, in a fresh copy of a workspace made once by this module: a python block with
  `sys.executable` in a new interpreter, a shell block with `bash -e -o pipefail` (so every line must succeed;
  `console` blocks run their `$ ` lines). `python` and `vanilla-transformer` on its PATH are this interpreter
  and this checkout (`python -m vanilla_transformer`), and the checkout comes first on PYTHONPATH. The Hub is
  offline (HF_HUB_OFFLINE=1): nothing downloads.
- The workspace holds the paths the docs use, made by the test from tiny models (see `workspace` below):
  `outputs/demo` (the main job's folder: a tiny run of `training.train` with checkpoints and evaluation logged),
  `outputs/en-de` (a tiny run on `data/`), `outputs/multi30k` (a copy of `outputs/demo`: the docs' Multi30k
  run trains for 20 minutes), `data/{train,val,test}.{en,de}` (English and German number words),
  `opus-mt-en-de` (a tiny random MarianMTModel with an OPUS-MT-style tokenizer) and `opus-mt-en-de-vanilla` (its
  conversion), `docs/`, and the MADE_BY_COMMANDS folders (a folder one block of a page makes and a later one
  uses, made by its documented command: `multi30k-marian`).
- SUBSTITUTIONS below rewrite a block before it runs, only to make it short: training commands get tiny-model
  options inserted right after `training.train` (the options the doc shows come after them and still apply),
  Python `max_steps=N` becomes 3, and a checkpoint of step N000 becomes step N, one the tiny run saved.
- Markers: an HTML comment on the line before a fence. `<!-- example: skip (the reason) -->` for a block needing
  what a test cannot have (the Hub, a GPU, several GPUs, a run of many minutes, installing packages): it is
  reported as skipped with that reason. `<!-- example: fresh -->` runs the block in the workspace without the
  folders the docs' blocks make (MADE_BY_THE_DOCS: `outputs/demo`, `outputs/en-de`, `opus-mt-en-de-vanilla`,
  `multi30k-marian`), as before running them. Any other `<!-- example: ... -->` comment is an error, so a typo
  cannot skip a block silently.
- A block fails on a non-zero exit status, after its timeout, and on any warning it prints: a `sitecustomize`
  module put first on the examples' PYTHONPATH records every Python warning that is shown (with Python's default
  filters, i.e. what a user would see: a DeprecationWarning raised inside a library at import is not shown, so is
  not counted) and every logging record of level WARNING or above that a stream handler prints (transformers'
  logger included). It covers every Python process a block starts. Text a program writes to stderr itself (tqdm's
  progress bars, a Rust library's message) is not a warning and is not counted. IGNORED_WARNINGS lists the few
  warnings that do not count, each with its reason (the test's tiny scale, or one library calling another).
"""

import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from helpers import REPO_ROOT, made_once_per_run

DOC_FILES = [REPO_ROOT / "README.md", *sorted((REPO_ROOT / "docs").glob("*.md"))]
RUN_LANGUAGES = {"python": "python", "py": "python", "bash": "shell", "sh": "shell", "shell": "shell",
                 "console": "console"}
TIMEOUT_S = 240  # one block: far above the slowest (training commands, CTranslate2 export), so only a hung one stops

# Tiny training options (as in tests/test_training.py): a model and corpus that train a few steps in seconds.
TINY_TRAIN = (  # 2 + 2 layers: the docs draw layer 1
    "--d_model 32 --encoder_layers 2 --decoder_layers 2 --attention_heads 2 --ffn_dim 64 --vocab_size 90 "
              "--demo_train_size 300 --max_tokens 200 --max_test_samples 8 --max_eval_samples 8 "
              "--per_device_eval_batch_size 8 --config_overrides max_position_embeddings=128 --report_to none "
              "--disable_tqdm true --num_sample_translations 0 --warmup_steps 4 --max_steps 4 --save_steps 2 "
              "--logging_steps 1 --average_last_n_checkpoints 2")

# (pattern, replacement, why): applied in order to every block before it runs.
SUBSTITUTIONS = [
    (r"(python -m training\.train|vanilla-transformer train|-m training\.train)\b", rf"\1 {TINY_TRAIN}",
     "training commands train a tiny model for 4 steps"),
    (r"((?:vanilla-transformer|-m training\.) ?distill\b(?:[^\n]|\\\n)*?\s--)(?=\s)", rf"\1 {TINY_TRAIN}",
     "distill's student (the recipe options after its bare --) trains a tiny model for 4 steps"),
    (r"\bmax_steps=\d+", "max_steps=3", "Trainer examples in Python train 3 steps"),
    (r"checkpoint-(\d+)000\b", r"checkpoint-\1", ("step N000 of a long run is step N of outputs/en-de, which saved "
                                          "checkpoints 2, 4, ..., 10")),
]

# (pattern, why): printed warnings that do not fail a block, because the test's scale or a library other than this
# package causes them, not the example. Keep it short; each entry says why a user following the docs is not affected
# or what causes it.
IGNORED_WARNINGS = [
    (r"mtime may not be reliable on this filesystem",
     ("the tiny runs save their checkpoints less than a second apart (transformers then sorts them by step "
      "number); a real run's checkpoints are minutes apart")),
    (r"FutureWarning: `is_gradient_checkpointing` is deprecated",
     "PEFT 0.21 reads transformers' deprecated `is_gradient_checkpointing` in get_peft_model; neither is this package"),
]

# Folders a page makes in one block and uses in a later one (each block runs alone): made in the workspace by the
# documented command, run once with `vanilla-transformer` of this checkout. A command that fails (e.g. one this
# branch lacks) leaves its folder out; a block that needs it then fails, and its message names the command.
MADE_BY_COMMANDS = {
    "multi30k-marian": "vanilla-transformer export marian outputs/multi30k multi30k-marian",  # publish-without-...
}

# What the docs' own blocks make, left out of the workspace for a block marked `fresh` (outputs/multi30k stays: no
# block makes it, it stands for the 20-minute Multi30k run).
MADE_BY_THE_DOCS = ["outputs/demo", "outputs/en-de", "opus-mt-en-de-vanilla", *MADE_BY_COMMANDS]

MARKER = re.compile(r"<!--\s*example:\s*(.*?)\s*-->")
SKIP = re.compile(r"skip \((.+)\)$")
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")


@dataclasses.dataclass
class Block:
    file: pathlib.Path
    line: int  # 1-based line of the opening fence
    language: str  # as written after the fence
    code: str
    marker: str | None  # the text of an `<!-- example: ... -->` comment on the line before the fence

    @property
    def id(self) -> str:
        return f"{self.file.relative_to(REPO_ROOT)}:{self.line}"


def fenced_blocks(path: pathlib.Path) -> list[Block]:
    """Every fenced block of a markdown file, with the `<!-- example: ... -->` comment just before it."""
    lines = path.read_text(encoding="utf-8").splitlines()
    blocks, index = [], 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        indent, fence, language = opening.groups()
        end = index + 1
        while end < len(lines) and not lines[end].strip().startswith(fence):
            end += 1
        previous = next((lines[i] for i in range(index - 1, -1, -1) if lines[i].strip()), "")
        marker = MARKER.search(previous)
        code = "\n".join(line.removeprefix(indent) for line in lines[index + 1:end])
        blocks.append(Block(path, index + 1, language.lower(), code + "\n", marker.group(1) if marker else None))
        index = end + 1
    return blocks


ALL_BLOCKS = [block for path in DOC_FILES for block in fenced_blocks(path)]
RUNNABLE = [block for block in ALL_BLOCKS if block.language in RUN_LANGUAGES]


def substitute(code: str) -> str:
    for pattern, replacement, _why in SUBSTITUTIONS:
        code = re.sub(pattern, replacement, code)
    return code


def console_commands(code: str) -> str:
    """The `$ ` lines of a console transcript (and their `\\`-continued lines); the rest is output."""
    commands, continuing = [], False
    for line in code.splitlines():
        if line.startswith("$ ") or continuing:
            commands.append(line[2:] if line.startswith("$ ") and not continuing else line)
            continuing = line.endswith("\\")
    return "\n".join(commands) + "\n"


# ---------------------------------------------------------------------------------------------------------------
# What the examples run in


SITECUSTOMIZE = textwrap.dedent(
    '''
    """Written by tests/test_docs_examples.py: record every warning an example prints (then print it as usual)."""
    import logging
    import os
    import warnings



    def _record(text):
        # the file named now: a process forked by the examples' fork server (example_zygote.py) records to its own
        with open(os.environ["VT_EXAMPLE_WARNINGS"], "a", encoding="utf-8") as file:
            file.write(" ".join(str(text).split()) + "\\n")


    _showwarning = warnings.showwarning


    def showwarning(message, category, filename, lineno, file=None, line=None):
        _record(f"{category.__name__}: {message} ({filename}:{lineno})")
        _showwarning(message, category, filename, lineno, file, line)


    warnings.showwarning = showwarning
    _emit = logging.StreamHandler.emit


    def emit(self, record):
        if record.levelno >= logging.WARNING:
            _record(f"{record.levelname} from logger {record.name!r}: {record.getMessage()}")
        _emit(self, record)


    logging.StreamHandler.emit = emit
    '''
)


def _write_data(folder: pathlib.Path) -> None:
    """data/{train,val,test}.{en,de}: English and German number words, as the docs' 'your data' examples read."""
    from vanilla_transformer.training.numbers import number_translation_splits

    splits = number_translation_splits(train_size=300, validation_size=16, test_size=16, seed=3)
    folder.mkdir()
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test")):
        (folder / f"{name}.en").write_text("\n".join(splits[split]["source"]) + "\n", encoding="utf-8")
        (folder / f"{name}.de").write_text("\n".join(splits[split]["target"]) + "\n", encoding="utf-8")


def _train(argv: list[str]) -> None:
    from vanilla_transformer.training.train import main as train_main

    train_main([*TINY_TRAIN.split(), *argv])


def _opus_mt(source: pathlib.Path, converted: pathlib.Path) -> None:
    """A tiny random MarianMTModel with an OPUS-MT-style sentencepiece tokenizer (as tests/test_convert.py builds
    them), and its conversion by `convert_marian`."""
    from test_convert import build_source, write_marian_tokenizer

    from vanilla_transformer.interop.convert import convert_marian

    source.mkdir()
    vocab_size = write_marian_tokenizer(source)
    build_source("marian", 0, source, vocab_size=vocab_size, pad_token_id=vocab_size - 1,
                 decoder_start_token_id=vocab_size - 1)
    convert_marian(str(source), str(converted))


def make_workspace(folder: pathlib.Path) -> None:
    """The paths the docs use, made here, tiny, in `folder/workspace`; `folder/problems.txt` lists the
    MADE_BY_COMMANDS that failed."""
    root = folder / "workspace"
    root.mkdir(parents=True)
    _write_data(root / "data")
    _train(["--output_dir", str(root / "outputs" / "demo"), "--eval_strategy", "steps", "--eval_steps", "2"])
    _train(["--preset", "multi30k", "--train_source", str(root / "data" / "train.en"),
            "--train_target", str(root / "data" / "train.de"), "--validation_source", str(root / "data" / "val.en"),
            "--validation_target", str(root / "data" / "val.de"), "--test_source", str(root / "data" / "test.en"),
            "--test_target", str(root / "data" / "test.de"), "--output_dir", str(root / "outputs" / "en-de"),
            "--max_steps", "10"])  # checkpoints 2, 4, ..., 10 for the resume and averaging examples
    shutil.copytree(root / "outputs" / "demo", root / "outputs" / "multi30k")
    _opus_mt(root / "opus-mt-en-de", root / "opus-mt-en-de-vanilla")
    (root / "docs").mkdir()
    problems = []
    for made, command in MADE_BY_COMMANDS.items():
        result = subprocess.run([sys.executable, "-m", "vanilla_transformer", *command.split()[1:]], cwd=root,
                                capture_output=True, text=True, check=False)
        if result.returncode != 0:
            problems.append(f"`{command}` failed, so the workspace has no {made}: "
                            f"{result.stderr.strip().splitlines()[-1:] or result.returncode}")
    (folder / "problems.txt").write_text("".join(f"{problem}\n" for problem in problems), encoding="utf-8")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory) -> pathlib.Path:
    """The folder every block starts from (copied fresh for each): made once per test run and shared by
    pytest-xdist's workers (the blocks of this module run on all of them)."""
    folder = made_once_per_run(tmp_path_factory, "docs-workspace", make_workspace)
    WORKSPACE_PROBLEMS[:] = (folder / "problems.txt").read_text(encoding="utf-8").splitlines()
    return folder / "workspace"


WORKSPACE_PROBLEMS: list[str] = []  # MADE_BY_COMMANDS that failed, named in the message of a block that fails


ZYGOTE = pathlib.Path(__file__).with_name("example_zygote.py")


def example_env(tools: pathlib.Path, warnings_file: pathlib.Path) -> dict:
    """The environment every example (and the fork server its Python processes come from) runs in."""
    env = {
        **os.environ,
        "PATH": f"{tools / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}",
        "PYTHONPATH": os.pathsep.join([str(tools / "site"), str(REPO_ROOT)]),
        "VT_EXAMPLE_WARNINGS": str(warnings_file),
        "HF_HUB_OFFLINE": "1",
        "MPLBACKEND": "Agg",
    }
    env.pop("PYTHONWARNINGS", None)  # the user's default filters, not pytest's
    env.pop("PYTEST_CURRENT_TEST", None)  # pytest's, changing from test to test
    return env


@pytest.fixture(scope="module")
def tools(tmp_path_factory) -> pathlib.Path:
    """`python` and `vanilla-transformer` for the shell blocks, and the warning recorder. `python` is a client of a
    fork server (example_zygote.py: a process that imported torch and transformers once forks each example's Python
    process, which a new interpreter would spend seconds importing), or the interpreter itself where the server
    cannot start (its imports printed a warning) or VT_EXAMPLES_FRESH_INTERPRETERS=1 is set."""
    import tempfile

    folder = tmp_path_factory.mktemp("tools")
    (folder / "bin").mkdir()
    (folder / "site").mkdir()
    (folder / "site" / "sitecustomize.py").write_text(SITECUSTOMIZE)
    python = f'"{sys.executable}"'
    server = None
    if os.environ.get("VT_EXAMPLES_FRESH_INTERPRETERS") != "1":
        socket_folder = pathlib.Path(tempfile.mkdtemp(prefix="vt-zygote-"))  # short: a socket's path has 107 bytes
        socket_path, ready = socket_folder / "socket", socket_folder / "ready.json"
        server = subprocess.Popen(
            [sys.executable, str(ZYGOTE), "serve", str(socket_path), str(ready)], cwd=socket_folder,
            env=example_env(folder, socket_folder / "import-warnings.txt"), stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL, stderr=(socket_folder / "server.log").open("w"))
        while not ready.exists() and server.poll() is None:
            time.sleep(0.05)
        problems = json.loads(ready.read_text())["problems"] if ready.exists() else ["the fork server exited"]
        if problems:
            ZYGOTE_PROBLEMS[:] = problems
            server.stdin.close()
            server.wait()
            server = None
        else:
            python = f'"{sys.executable}" -S -E "{ZYGOTE}" run "{socket_path}"'
    for name, command in (("python", f'exec {python} "$@"'),
                          ("python3", f'exec {python} "$@"'),
                          ("vanilla-transformer", f'exec {python} -m vanilla_transformer "$@"')):
        script = folder / "bin" / name
        script.write_text(f"#!/bin/sh\n{command}\n")
        script.chmod(0o755)
    yield folder
    if server is not None:
        server.stdin.close()  # the server stops (and stops what it forked) when its stdin closes
        server.wait(timeout=60)
        shutil.rmtree(socket_folder, ignore_errors=True)


ZYGOTE_PROBLEMS: list[str] = []  # why the fork server did not start, if it did not


def run_block(block: Block, workspace: pathlib.Path, tools: pathlib.Path, tmp_path: pathlib.Path):
    """Run one block in a fresh copy of the workspace; returns (completed process, code run, warnings it printed)."""
    cwd = tmp_path / "work"
    left_out = {workspace / path for path in MADE_BY_THE_DOCS} if block.marker == "fresh" else set()
    shutil.copytree(workspace, cwd, symlinks=True,
                    ignore=lambda folder, names: [name for name in names if pathlib.Path(folder, name) in left_out])
    warnings_file = tmp_path / "warnings.txt"
    env = example_env(tools, warnings_file)
    kind = RUN_LANGUAGES[block.language]
    code = substitute(console_commands(block.code) if kind == "console" else block.code)
    script = tmp_path / ("example.py" if kind == "python" else "example.sh")
    script.write_text(code, encoding="utf-8")
    command = [str(tools / "bin" / "python"), str(script)] if kind == "python" else [
        "bash", "-e", "-o", "pipefail", str(script)]
    result = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False)
    printed = warnings_file.read_text(encoding="utf-8").splitlines() if warnings_file.exists() else []
    printed = [line for line in printed if not any(re.search(pattern, line) for pattern, _ in IGNORED_WARNINGS)]
    return result, code, printed


@pytest.mark.slow  # fresh interpreters
@pytest.mark.parametrize("block", RUNNABLE, ids=[block.id for block in RUNNABLE])
def test_example_runs_without_error_or_warning(block, workspace, tools, tmp_path):
    if block.marker is not None and block.marker != "fresh":
        skip = SKIP.match(block.marker)
        assert skip, f"{block.id}: unknown marker <!-- example: {block.marker} --> ('skip (reason)' or 'fresh')"
        pytest.skip(f"{block.id}: {skip.group(1)}")
    result, code, printed = run_block(block, workspace, tools, tmp_path)
    shown = f"\n--- the block as run ---\n{code}\n--- stdout ---\n{result.stdout[-4000:]}\n--- stderr ---\n" \
            f"{result.stderr[-4000:]}"
    if WORKSPACE_PROBLEMS:
        shown += "\n--- the workspace ---\n" + "\n".join(WORKSPACE_PROBLEMS)
    assert result.returncode == 0, f"{block.id} exited with status {result.returncode}{shown}"
    assert not printed, f"{block.id} printed {len(printed)} warning(s):\n" + "\n".join(printed) + shown


# ---------------------------------------------------------------------------------------------------------------
# The runner itself


def test_every_fenced_block_names_its_language():
    unnamed = [block.id for block in ALL_BLOCKS if not block.language]
    assert not unnamed, f"fences without a language (```python, ```bash, or ```text for output): {unnamed}"


def test_runner_finds_the_examples_and_every_doc_page_is_linked_from_the_readme():
    assert len(RUNNABLE) >= 20 and {block.file.name for block in RUNNABLE} >= {"use.md", "train.md"}
    readme = (REPO_ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) < 200
    unlinked = [path.name for path in DOC_FILES[1:] if f"docs/{path.name}" not in readme]
    assert not unlinked, f"docs pages the README does not link: {unlinked}"


def test_console_blocks_run_their_prompt_lines_only():
    transcript = "$ echo one \\\n    two\none two\n$ echo three\nthree\n"
    assert console_commands(transcript) == "echo one \\\n    two\necho three\n"


def test_substitutions_shorten_training_and_keep_the_documented_options():
    code = substitute("python -m training.train --preset multi30k --max_steps 7 --resume_from_checkpoint "
                      "outputs/en-de/checkpoint-4000\n")
    assert code.startswith("python -m training.train --d_model 32")
    assert code.endswith("--preset multi30k --max_steps 7 --resume_from_checkpoint outputs/en-de/checkpoint-4\n")
    assert substitute("TrainingArguments(max_steps=300)") == "TrainingArguments(max_steps=3)"


@pytest.mark.slow  # fresh interpreters
def test_a_warning_or_a_failure_in_an_example_fails_it(workspace, tools, tmp_path):
    """The oracle for the checks above: blocks that warn (Python warnings, transformers' logger) or fail are caught."""
    cases = {
        "python-warning": ("python", "import warnings\nwarnings.warn('careful')\n", "UserWarning: careful"),
        "logger": ("python", ("from transformers.utils import logging\nlogging.get_logger('transformers.x')"
                              ".warning('watch out')\n"), "WARNING from logger 'transformers.x': watch out"),
        "shell-python": ("bash", "python -c \"import warnings; warnings.warn('from bash')\"\n", "from bash"),
    }
    for name, (language, code, expected) in cases.items():
        folder = tmp_path / name
        folder.mkdir()
        result, _, printed = run_block(Block(REPO_ROOT / "README.md", 1, language, code, None), workspace, tools,
                                       folder)
        assert result.returncode == 0 and any(expected in line for line in printed), (name, printed)
    folder = tmp_path / "fails"
    folder.mkdir()
    result, _, printed = run_block(Block(REPO_ROOT / "README.md", 1, "bash", "false\necho after\n", None), workspace,
                                   tools, folder)
    assert result.returncode != 0 and "after" not in result.stdout and not printed
    # not counted: a DeprecationWarning raised inside a library (Python's default filters hide it, as from a user),
    # and a warning of IGNORED_WARNINGS
    folder = tmp_path / "hidden"
    folder.mkdir()
    code = ("import warnings\nwarnings.warn_explicit('old', DeprecationWarning, 'lib.py', 1, module='lib')\n"
            "from transformers.utils import logging\nlogging.get_logger('transformers.trainer_utils')"
            ".warning('mtime may not be reliable on this filesystem, falling back to numerical ordering')\n")
    result, _, printed = run_block(Block(REPO_ROOT / "README.md", 1, "python", code, None), workspace, tools, folder)
    assert result.returncode == 0 and not printed and "mtime may not be reliable" in result.stderr


PROBE = textwrap.dedent(
    """
    import json
    import os
    import sys

    import torch  # noqa: F401  (what the examples import; it sets TORCHINDUCTOR_CACHE_DIR)
    from transformers import CONFIG_MAPPING

    mode = sys.argv[1]
    if mode == "fail":
        raise ValueError("a failure in an example")
    if mode == "exit":
        sys.exit("a message from sys.exit")
    print(json.dumps({
        "argv": sys.argv, "path0": sys.path[0], "name": __name__, "file": __file__, "cwd": os.getcwd(),
        "package_imported": sorted(name for name in sys.modules if name.startswith("vanilla_transformer")),
        "registered": "vanilla_transformer" in CONFIG_MAPPING,
        "environment": {name: value for name, value in os.environ.items() if name != "VT_EXAMPLE_WARNINGS"},
        "stdin": sys.stdin.read(),
    }, sort_keys=True))
    """
)


@pytest.mark.slow  # a fresh interpreter
def test_a_forked_process_starts_as_a_new_interpreter_would(tools, tmp_path):
    """The oracle for example_zygote.py: a probe script run by the examples' `python` (forked by the fork server, or
    a new interpreter where it did not start) and by the interpreter itself, in the same environment: the same
    argv, sys.path[0], __main__, working folder, environment, standard input, exit status and error output, and the
    package neither imported nor registered (a block that does not import it must not find the model registered)."""
    if os.environ.get("VT_EXAMPLES_FRESH_INTERPRETERS") == "1" or ZYGOTE_PROBLEMS:
        pytest.skip(f"the examples run in new interpreters: {ZYGOTE_PROBLEMS or 'VT_EXAMPLES_FRESH_INTERPRETERS=1'}")
    (tmp_path / "probe.py").write_text(PROBE)
    env = example_env(tools, tmp_path / "warnings.txt")

    def run(python, mode):  # through a shell, as the examples' `python` starts (the shell sets PWD)
        return subprocess.run(["/bin/sh", "-c", 'exec "$@"', "sh", python, str(tmp_path / "probe.py"), mode,
                               "two words"], cwd=tmp_path, env=env, input="on stdin", capture_output=True, text=True,
                              timeout=120, check=False)

    for mode in ("report", "fail", "exit"):
        forked, fresh = run(str(tools / "bin" / "python"), mode), run(sys.executable, mode)
        assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr), mode
        if mode == "report":
            report = json.loads(forked.stdout)
            assert report == json.loads(fresh.stdout)
            assert report["package_imported"] == [] and not report["registered"]
            assert report["argv"][1:] == ["report", "two words"] and report["stdin"] == "on stdin"
    assert "ValueError: a failure in an example" in run(str(tools / "bin" / "python"), "fail").stderr
    assert not (tmp_path / "warnings.txt").exists()
