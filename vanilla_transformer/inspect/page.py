"""The explorer's page: one renderer (the HTML, CSS and JavaScript of `explore_assets/`) with the data inline, used
by the static page (`write_html`) and shown inside the live app."""

import base64
import gzip
import html
import json
import math
import os
import tempfile
from importlib import resources

import numpy as np

ASSETS_FOLDER = "explore_assets"
SCRIPTS = ("walkthrough.js", "walkthrough_steps.js", "explore.js")  # in this order: each uses the ones before it
# the walk-through's matrices in the page: integers of this many bits, one scale per row (see `packed`)
WALKTHROUGH_BITS = {"scores": 16}
DEFAULT_BITS = 8


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(ASSETS_FOLDER, name).read_text(encoding="utf-8")


def _rounded(value, digits: int):
    """`value` with its floats rounded to `digits` decimals (the page's JSON stays small)."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, list):
        return [_rounded(item, digits) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item, 4 if key == "positional_encoding" else digits) for key, item in value.items()}
    return value


class Packer:
    """The walk-through's matrices as the page embeds them: each row (the last axis) as integers of `bits` bits times
    one float32 scale per row, all in one gzip-compressed little-endian buffer (base64 in the page; the browser
    inflates it with its own DecompressionStream). A value is then within 1/(2^bits - 2) of its row's largest
    magnitude: 8 bits keep a d_model vector to 3 significant digits of its largest entry, in about a byte a value
    where decimal text takes 8 or more, and keep the page of a 20-token sentence under 1 MB."""

    def __init__(self):
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, array: np.ndarray) -> int:
        """Append `array`'s bytes at an offset that is a multiple of 4 (typed arrays need aligned views)."""
        offset = self.size
        raw = array.tobytes()
        self.parts.append(raw + b"\0" * (-len(raw) % 4))
        self.size += len(self.parts[-1])
        return offset

    def matrix(self, matrix: list, bits: int = DEFAULT_BITS) -> dict:
        """`{"shape", "bits", "data", "scale"}`: the shape, and the offsets of the integers and of the row scales."""
        values = np.asarray(matrix, dtype=np.float32)
        rows = values.reshape(-1, values.shape[-1]) if values.size else values.reshape(0, 1)
        top = (1 << (bits - 1)) - 1
        scale = np.abs(rows).max(axis=1, initial=0.0) / top
        safe = np.where(scale > 0, scale, 1.0)[:, None]
        integers = np.clip(np.rint(rows / safe), -top, top).astype("<i1" if bits == 8 else "<i2")
        return {"shape": list(values.shape), "bits": bits, "data": self.add(integers),
                "scale": self.add(scale.astype("<f4"))}

    def attention(self, attention: dict) -> dict:
        """One attention sub-layer. `weights` are left out: they are the page's `*_attentions` (the same numbers, at 6
        decimals); `mask` stays a list of 0 and 1."""
        return {key: value if key == "mask" else self.matrix(value, WALKTHROUGH_BITS.get(key, DEFAULT_BITS))
                for key, value in attention.items() if key != "weights"}

    def layer(self, layer: dict) -> dict:
        out = {}
        for key, value in layer.items():
            if key.endswith("attention"):
                out[key] = self.attention(value)
            elif key == "add_norm_2" and value == layer["layer_output"]:  # a layer without encoder-decoder attention
                out[key] = {"same_as": "layer_output"}
            else:
                out[key] = self.matrix(value)
        return out

    def blob(self) -> str:
        return base64.b64encode(gzip.compress(b"".join(self.parts), compresslevel=9, mtime=0)).decode("ascii")


def packed_walkthrough(walkthrough: dict | None) -> dict | None:
    """The walk-through for the page: its matrices packed (`Packer`, the buffer in `packed`), its logits (token, id,
    logit, probability) to 6 decimals."""
    if walkthrough is None:
        return None
    packer = Packer()
    out = dict(walkthrough)
    out["embeddings"] = {side: {key: packer.matrix(value) for key, value in parts.items()}
                         for side, parts in walkthrough["embeddings"].items()}
    for stack in ("encoder", "decoder"):
        out[stack] = [packer.layer(layer) for layer in walkthrough[stack]]
    out["logits"] = _rounded(walkthrough["logits"], 6)
    out["packed"] = packer.blob()
    return out


def page_data(data: dict) -> dict:
    """One `attention_data` as the page embeds it: attention weights and probabilities to 6 decimals, positional
    encodings to 4, the walk-through's matrices packed (`packed_walkthrough`)."""
    out = _rounded({key: value for key, value in data.items() if key != "walkthrough"}, 6)
    out["walkthrough"] = packed_walkthrough(data.get("walkthrough"))
    return out


def page_json(data_list: list[dict]) -> str:
    """The data as the page embeds it (`page_data` of each), with `</` escaped so that no text of the data can end
    the script element."""
    return script_json([page_data(data) for data in data_list])


def script_json(value) -> str:
    """`value` as compact JSON with `</` and `<!--` escaped, so that no text of it can end the script element."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(data_list: list[dict], title: str = "Attention explorer") -> str:
    """The self-contained page (HTML with inline CSS, JS and data) for `data_list` (one `attention_data` per text)."""
    if not data_list:
        raise ValueError("no texts to show: give at least one attention_data")
    return assemble_page(page_json(data_list), SCRIPTS, title)


def assemble_page(data_json: str, scripts, title: str) -> str:
    """page.html with the CSS, the `scripts` of `explore_assets/` (in order) and `data_json` (already escaped for a
    script element, as `page_json` makes it) inline: the explorer's page and its training view share it."""
    page = _asset("page.html")
    # each placeholder is replaced once, data last, so nothing in the data is taken for a placeholder
    page = page.replace("{{TITLE}}", html.escape(title))
    page = page.replace("/*{{STYLE}}*/", _asset("explore.css"))
    page = page.replace("/*{{SCRIPT}}*/", "\n".join(_asset(name) for name in scripts))
    return page.replace("{{DATA}}", data_json)


def write_html(path: str | os.PathLike, data_list: list[dict], title: str = "Attention explorer") -> str:
    """Write the page for `data_list` to `path` (atomically: a temporary file beside it, then a rename); returns the
    path. The data are embedded as JSON in `<script type="application/json" id="attention-data">`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path}: it is a folder; give a file name such as explore.html")
    page = render_page(data_list, title)
    handle, staging = tempfile.mkstemp(dir=folder, prefix=".explore-", suffix=".html")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.remove(staging)
        raise
    return path
