"""The explorer's page: one renderer (the HTML, CSS and JavaScript of `explore_assets/`) with the data inline, used
by the static page (`write_html`) and shown inside the live app."""

import html
import json
import math
import os
import tempfile
from importlib import resources

ASSETS_FOLDER = "explore_assets"


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


def page_json(data_list: list[dict]) -> str:
    """The data as the page embeds it: attention weights and probabilities to 6 decimals, positional encodings to 4,
    and `</` escaped so that no text of the data can end the script element."""
    text = json.dumps(_rounded(list(data_list), 6), ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(data_list: list[dict], title: str = "Attention explorer") -> str:
    """The self-contained page (HTML with inline CSS, JS and data) for `data_list` (one `attention_data` per text)."""
    if not data_list:
        raise ValueError("no texts to show: give at least one attention_data")
    page = _asset("page.html")
    # each placeholder is replaced once, data last, so nothing in the data is taken for a placeholder
    page = page.replace("{{TITLE}}", html.escape(title))
    page = page.replace("/*{{STYLE}}*/", _asset("explore.css"))
    page = page.replace("/*{{SCRIPT}}*/", _asset("explore.js"))
    return page.replace("{{DATA}}", page_json(data_list))


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
