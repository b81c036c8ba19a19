"""The automatic CTranslate2 export: a PyTorch folder exported once into a cache, so that a corpus is translated by
CTranslate2 without an export step of the user's (`vanilla-transformer translate --input big.en --engine auto`).

    folder, exported = cached_export("outputs/multi30k", "float32")   # exported: False when the cache had it

An entry lives in `$HF_HOME/vanilla-transformer/ct2/KEY`, KEY a fingerprint of what makes the export: the SHA-256 of
every file at the top of the checkpoint folder (a copied folder finds the same entry; a retrained or edited one
another), the weights' type (`quantization`), and the versions of CTranslate2 and of this package (whose exporter
wrote it). It is written by `export_ctranslate2.to_ctranslate2`, which stages the folder beside the entry and
renames it into place when whole, its manifest (the SHA-256 of each file) last: a killed export leaves no entry, only a
hidden staging folder that the next export of the same entry removes. Before an entry is used its files are checked
against its manifest; a damaged one (a file changed, cut short or missing) is removed and exported again. The cache
holds only what this module wrote: deleting it costs an export.
"""

import hashlib
import json
import os
import shutil

from huggingface_hub import constants as hub_constants

from vanilla_transformer import __version__
from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.hashing import sha256_of_file
from vanilla_transformer.files.manifest import LOCK_NAME, MANIFEST_NAME, manifest_entries, read_manifest
from vanilla_transformer.interop import QUANTIZATIONS
from vanilla_transformer.interop.ctranslate2_runtime import import_ctranslate2
from vanilla_transformer.interop.export_ctranslate2 import ExportError, to_ctranslate2

CACHE_FORMAT = 1  # part of every key: a new layout of the entries never reads an old one


def cache_root() -> str:
    """`$HF_HOME/vanilla-transformer/ct2` (huggingface_hub's HF_HOME, ~/.cache/huggingface by default)."""
    return os.path.join(hub_constants.HF_HOME, "vanilla-transformer", "ct2")


def export_quantization(compute_type: str) -> str:
    """The weights' type an automatic export writes for the translator's `compute_type`: that type when the exporter
    writes it (int8, float16, ...), else float32, which CTranslate2 converts to any type when it loads."""
    return compute_type if compute_type in QUANTIZATIONS else "float32"


def folder_fingerprint(folder: str | os.PathLike) -> dict[str, str]:
    """{name: SHA-256} of the regular files at the top of `folder` (its manifest and run lock left out: they say who
    wrote the files, not what the model is)."""
    folder = os.fspath(folder)
    names = sorted(entry.name for entry in os.scandir(folder)
                   if entry.is_file() and entry.name not in (MANIFEST_NAME, LOCK_NAME))
    return {name: sha256_of_file(os.path.join(folder, name)) for name in names}


def cache_key(folder: str | os.PathLike, quantization: str) -> str:
    """The name of the entry of `folder` exported with `quantization` (see the module's docstring)."""
    described = {"format": CACHE_FORMAT, "files": folder_fingerprint(folder), "quantization": quantization,
                 "ctranslate2": import_ctranslate2().__version__, "vanilla_transformer": __version__}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:32]


def entry_is_whole(entry: str) -> bool:
    """Does the entry hold exactly the files its manifest lists, each with its recorded SHA-256?"""
    recorded = read_manifest(entry)
    if not recorded:
        return False
    try:
        return manifest_entries(entry) == recorded
    except OSError:
        return False


def cached_export(folder: str | os.PathLike, quantization: str = "float32", log=None) -> tuple[str, bool]:
    """The cached CTranslate2 export of the PyTorch checkpoint `folder` with weights in `quantization`, exported now
    when the cache has no whole entry. Returns (the entry's folder, whether it was exported now). `log` (one line) is
    told about a damaged entry exported again. Raises `ExportError` (one line) for a folder CTranslate2 cannot
    express or that cannot be read, `OutputError` when the cache cannot be written."""
    if quantization not in QUANTIZATIONS:
        raise ExportError(f"quantization={quantization!r} is not one of {', '.join(QUANTIZATIONS)}.")
    try:
        entry = os.path.join(cache_root(), cache_key(folder, quantization))
    except OSError as error:
        raise ExportError(f"{folder} cannot be read: {error}") from None
    if entry_is_whole(entry):
        return entry, False
    if os.path.lexists(entry):
        if log is not None:
            log(f"The cached CTranslate2 export {entry} is damaged (its files are not those it was written with); "
                "exporting again.")
        _remove(entry)
    try:
        to_ctranslate2(folder, entry, quantization)
    except OutputError:
        if entry_is_whole(entry):  # another process exported the same entry meanwhile
            return entry, True
        raise
    return entry, True


def _remove(entry: str) -> None:
    """Remove a damaged entry of the cache (a folder under `cache_root` named by a key, or whatever took its
    place)."""
    if os.path.isdir(entry) and not os.path.islink(entry):
        shutil.rmtree(entry)
    else:
        os.remove(entry)


__all__ = ["cache_key", "cache_root", "cached_export", "entry_is_whole", "export_quantization", "folder_fingerprint"]
