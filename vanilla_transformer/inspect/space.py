"""A Hugging Face Space of the live explorer: `write_space` writes a folder that `huggingface_hub.upload_folder(...,
repo_type="space")` publishes as a live demo."""

import os
import pathlib
import shutil
import tempfile
from importlib import metadata

from vanilla_transformer.checkpoints.kinds import is_ctranslate2_folder
from vanilla_transformer.checkpoints.validate import check_checkpoint
from vanilla_transformer.inspect.page import ASSETS_FOLDER

SPACE_README = """---
title: {title}
emoji: 🔍
colorFrom: indigo
colorTo: blue
sdk: gradio
app_file: app.py
pinned: false
---

# {title}

An interactive attention explorer for {model_name}, the Transformer of
[Attention Is All You Need](https://arxiv.org/abs/1706.03762) (Vaswani et al., 2017): type a sentence and see every
layer and head of its encoder self-attention, decoder masked self-attention and encoder-decoder attention, the
decoding step by step (top-k probabilities, beams) and the positional encoding. Made with
`vanilla-transformer explore --space`.
"""

SPACE_APP = '''"""The attention explorer of {model_name} (written by `vanilla-transformer explore --space`)."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import transformers  # noqa: E402

import vanilla_transformer  # noqa: E402  (registers the model with the Auto classes)
from vanilla_transformer.inspect.app import build_app  # noqa: E402

MODEL = {model_ref}

config = transformers.AutoConfig.from_pretrained(MODEL)
model_class = getattr(vanilla_transformer, (config.architectures or ["VanillaTransformerForConditionalGeneration"])[0])
model = model_class.from_pretrained(MODEL).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL)
demo = build_app(model, tokenizer)

if __name__ == "__main__":
    demo.launch()
'''

# the package as the Space runs it: its modules (every subpackage) and data files
_PACKAGE_FILES = ("**/*.py", "cards/templates/*", f"inspect/{ASSETS_FOLDER}/*")


def _space_requirements() -> str:
    """The Space's requirements: the package's own dependencies (from its metadata when installed) and gradio."""
    try:
        requires = [r for r in (metadata.requires("vanilla-transformer") or []) if "extra ==" not in r]
        demo = [r.split(";")[0].strip() for r in (metadata.requires("vanilla-transformer") or [])
                if 'extra == "demo"' in r]
    except metadata.PackageNotFoundError:
        requires, demo = [], []
    requires = requires or ["torch>=2.13", "transformers>=5.18,<6", "tokenizers>=0.21", "safetensors>=0.4",
                            "huggingface_hub>=1.0", "Jinja2>=3.1", "tqdm>=4.66"]
    demo = demo or ["gradio>=6.0"]
    return "\n".join(requires + demo) + "\n"


def write_space(model_folder_or_id: str | os.PathLike, out_dir: str | os.PathLike, *, model_id: str | None = None,
                title: str | None = None) -> str:
    """Write a Hugging Face Space folder: README.md (front matter `sdk: gradio`, `app_file: app.py`), app.py,
    requirements.txt, a copy of this package (the Space runs the same explorer) and the model: a copy of the local
    folder's files under `model/`, or, with `model_id` (or a `model_folder_or_id` that is not a local folder), the
    Hub model id that app.py loads. Publish it with `huggingface_hub.upload_folder(folder_path=out_dir,
    repo_id=..., repo_type="space")`.

    `out_dir` must not exist or be empty; it is written whole in a staging folder beside it, then renamed.
    """
    source = os.fspath(model_folder_or_id)
    out_dir = os.fspath(out_dir)
    local = os.path.isdir(source)
    if model_id is None and not local:
        if os.path.exists(source) or source.startswith((".", "/")) or source.count("/") > 1:
            raise FileNotFoundError(f"model folder not found: {source}")
        model_id = source  # a Hub model id, e.g. user/name
    if local:
        if is_ctranslate2_folder(source):
            raise ValueError(f"{source} is a CTranslate2 folder: it exposes no per-head attention; give the "
                             "PyTorch checkpoint it was exported from")
        check_checkpoint(source, need_tokenizer=True)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise FileExistsError(f"{out_dir} exists and is not an empty folder; give a new folder for the Space")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"cannot write {out_dir}: the folder {parent} does not exist")

    name = model_id or os.path.basename(os.path.normpath(source))
    title = title or f"Attention explorer: {name}"[:60]
    staging = tempfile.mkdtemp(dir=parent, prefix=".space-")
    try:
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
            f.write(SPACE_README.format(title=title.replace(":", " -"), model_name=f"`{name}`"))
        with open(os.path.join(staging, "app.py"), "w", encoding="utf-8") as f:
            f.write(SPACE_APP.format(model_name=name, model_ref=repr(model_id) if model_id else
                                     'os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")'))
        with open(os.path.join(staging, "requirements.txt"), "w", encoding="utf-8") as f:
            f.write(_space_requirements())
        package = pathlib.Path(__file__).resolve().parent.parent  # vanilla_transformer/
        for pattern in _PACKAGE_FILES:
            for path in sorted(package.glob(pattern)):
                if path.is_file():
                    target = os.path.join(staging, "vanilla_transformer", os.fspath(path.relative_to(package)))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(path, target)
        if model_id is None:
            model_folder = os.path.join(staging, "model")
            os.makedirs(model_folder)
            for entry in sorted(os.listdir(source)):
                if os.path.isfile(os.path.join(source, entry)) and not entry.startswith("."):
                    shutil.copyfile(os.path.join(source, entry), os.path.join(model_folder, entry))
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir
