"""The manifest of what this project wrote into a folder: how `--overwrite` knows what it may replace.

Every folder a command writes whole (`staging.install_folder`: exports, conversions, averages, Spaces, each training
checkpoint) gets `.vanilla-transformer-manifest.json` last, listing each file it wrote with its SHA-256 (as
huggingface_hub's cache records the hash of each file it downloads); a training run's `--output_dir` gets one for the
files of its final model and what else the run created there (`lock.RunLock`). A file is ours when a manifest in
its folder or above it lists its path with its current hash. Anything else is foreign: a file the user added, one we
wrote but the user has since changed, a folder without a manifest (a folder saved before manifests existed, a data
folder, a thesis). `--overwrite` replaces a folder only when nothing in it is foreign, and otherwise refuses with one
line naming what is (`foreign_entries`, `check_replaceable`); the folder is known by its manifest, never by the names
of the files in it.
"""

import contextlib
import json
import os
import re
import shutil

from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.hashing import sha256_of_file

MANIFEST_NAME = ".vanilla-transformer-manifest.json"
LOCK_NAME = ".vanilla-transformer.lock"  # a run's lock (`lock.RunLock`); its own file, never foreign
MANIFEST_FORMAT = "vanilla-transformer manifest 1"
# hidden staging folders and files of a command at work, and folders a command moved aside to swap in its own:
# `.NAME.staging-PID`, `.NAME.old-PID` (removed or put back by `staging.clean_stale_staging`)
HELD_BY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>staging|old)-(?P<pid>\d+)$")
SHOWN = 4  # foreign entries named in a message


def _entry_hash(path: str) -> str:
    """What the manifest records for one entry: the SHA-256 of a file's bytes, or the target of a symbolic link."""
    if os.path.islink(path):
        return "link:" + os.readlink(path)
    return sha256_of_file(path)


def _walk(folder: str):
    """(relative path, absolute path, is a folder) of every entry under `folder`, folders before what they hold;
    symbolic links are entries, never followed; staging entries are left out."""
    for root, dirs, files in os.walk(folder):
        relative = os.path.relpath(root, folder)
        relative = "" if relative == "." else relative
        links = [name for name in dirs if os.path.islink(os.path.join(root, name))]
        dirs[:] = sorted(name for name in dirs if name not in links and not HELD_BY.match(name))
        for name in dirs:
            yield os.path.join(relative, name), os.path.join(root, name), True
        for name in sorted(files + links):
            if not HELD_BY.match(name):
                yield os.path.join(relative, name), os.path.join(root, name), False


def manifest_entries(folder) -> dict[str, str]:
    """{relative path: hash} of everything under `folder` except manifests and the run lock: files by SHA-256,
    empty folders as "folder"."""
    folder = os.fspath(folder)
    entries = {}
    for relative, path, is_folder in _walk(folder):
        name = os.path.basename(relative)
        if name == MANIFEST_NAME or relative == LOCK_NAME:
            continue
        if is_folder:
            if not os.listdir(path):
                entries[relative + "/"] = "folder"
        else:
            entries[relative] = _entry_hash(path)
    return entries


def write_manifest(folder, entries: dict[str, str] | None = None) -> None:
    """Write the manifest of `folder`: `entries` ({relative path: hash}) or everything under it now. Written to a
    hidden file beside it and renamed, so a reader finds the old manifest or the new one."""
    folder = os.fspath(folder)
    entries = manifest_entries(folder) if entries is None else entries
    path = os.path.join(folder, MANIFEST_NAME)
    partial = os.path.join(folder, f".{MANIFEST_NAME}.staging-{os.getpid()}")
    with open(partial, "w", encoding="utf-8") as f:  # 0666 less the umask, as every file we write
        json.dump({"format": MANIFEST_FORMAT, "files": dict(sorted(entries.items()))}, f, indent=1)
        f.write("\n")
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def read_manifest(folder) -> dict[str, str] | None:
    """{relative path: hash} of the manifest in `folder`, or None when it has none (or one that is not ours). A hash
    may be several, separated by spaces, while a commit is moving new files over old ones (`record_pending`)."""
    try:
        with open(os.path.join(os.fspath(folder), MANIFEST_NAME), encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("format") != MANIFEST_FORMAT or not isinstance(data.get("files"), dict):
        return None
    return {str(key): str(value) for key, value in data["files"].items()}


def record_entries(folder, relative_paths) -> None:
    """Add the entries at `relative_paths` (files, or folders with everything under them) to the manifest of
    `folder`, with their hashes now."""
    folder = os.fspath(folder)
    entries = read_manifest(folder) or {}
    for relative in relative_paths:
        path = os.path.join(folder, relative)
        if os.path.isdir(path) and not os.path.islink(path):
            entries.update({os.path.join(relative, key): value for key, value in manifest_entries(path).items()})
            if not os.listdir(path):
                entries[relative.rstrip("/") + "/"] = "folder"
        elif os.path.lexists(path):
            entries[relative] = _entry_hash(path)
    write_manifest(folder, entries)


def record_pending(folder, staging, names) -> None:
    """Before the files `names` of `staging` are moved into `folder` one by one: let the manifest of `folder` accept
    each of them with its old hash or its new one, so that a kill in the middle of the moves leaves every file
    ours. `record_entries` afterwards keeps the new hashes only."""
    folder, staging = os.fspath(folder), os.fspath(staging)
    entries = read_manifest(folder) or {}
    for name in names:
        path = os.path.join(staging, name)
        if os.path.isfile(path) or os.path.islink(path):
            hashes = {*entries.get(name, "").split(" "), _entry_hash(path)} - {""}
            entries[name] = " ".join(sorted(hashes))
    write_manifest(folder, entries)


def run_entries(folder) -> set[str] | None:
    """The top-level entries that the run holding (or, killed, last holding) the lock of `folder` found there when
    it started; everything else at the top was made by that run. None without a lock file of ours."""
    try:
        with open(os.path.join(os.fspath(folder), LOCK_NAME), encoding="utf-8") as f:
            data = json.load(f)
        return set(data["found"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def foreign_entries(folder, *, top_files_only: bool = False) -> list[str]:
    """What under `folder` this project did not write, as relative paths (a folder ends with "/"): files no manifest
    lists with their current hash, folders with nothing of ours in them. With `top_files_only`, only the files at
    the top (what a training run's final save may replace). A missing folder holds nothing foreign."""
    folder = os.fspath(folder)
    if not os.path.isdir(folder):
        return []
    manifests = {"": read_manifest(folder)}  # relative folder -> its manifest (None: it has none)
    made_by_run = run_entries(folder)
    foreign, ours_in = [], set()  # ours_in: folders holding something of ours
    for relative, path, is_folder in _walk(folder):
        top = relative.split(os.sep)[0]
        if made_by_run is not None and top not in made_by_run:
            continue  # made by the run that holds (or last held) the lock
        if is_folder:
            manifests[relative] = read_manifest(path)
            continue
        name, parent = os.path.basename(relative), os.path.dirname(relative)
        if top_files_only and parent:
            continue
        if relative == LOCK_NAME or (name == MANIFEST_NAME and manifests.get(parent) is not None):
            ours_in.update(_ancestors(relative))
        elif _is_ours(relative, path, manifests):
            ours_in.update(_ancestors(relative))
        else:
            foreign.append(relative)
    if not top_files_only:
        foreign += _foreign_folders(folder, manifests, ours_in, foreign, made_by_run)
    return sorted(foreign)


def _ancestors(relative: str) -> list[str]:
    """The folders `relative` lies in, outermost first ("a/b/c" -> ["a", "a/b"])."""
    parts = relative.split(os.sep)[:-1]
    return [os.sep.join(parts[:i]) for i in range(1, len(parts) + 1)]


def _is_ours(relative: str, path: str, manifests: dict) -> bool:
    """Does a manifest in `relative`'s folder or above list it with its current hash? (The nearest that lists it
    decides.)"""
    for base in reversed(["", *_ancestors(relative)]):
        manifest = manifests.get(base)
        key = os.path.relpath(relative, base) if base else relative
        if manifest is not None and key in manifest:
            current, listed = _entry_hash(path), manifest[key]
            return current == listed or current in listed.split(" ")  # one hash, or several during a commit
    return False


def _foreign_folders(folder: str, manifests: dict, ours_in: set, foreign: list, made_by_run) -> list[str]:
    """The outermost folders with nothing of ours and nothing foreign in them (empty, or holding only empty folders)
    that no manifest lists."""
    inside_foreign = {ancestor for relative in foreign for ancestor in _ancestors(relative)}
    found = []
    for relative, _, is_folder in _walk(folder):
        if not is_folder or relative in ours_in or relative in inside_foreign or manifests.get(relative) is not None:
            continue
        if made_by_run is not None and relative.split(os.sep)[0] not in made_by_run:
            continue
        if any(relative.startswith(outer[:-1] + os.sep) for outer in found):
            continue
        listed = False
        for base in ["", *_ancestors(relative)]:
            manifest = manifests.get(base)
            key = (os.path.relpath(relative, base) if base else relative) + "/"
            listed = listed or (manifest is not None and manifest.get(key) == "folder")
        if not listed:
            found.append(relative + "/")
    return found


def has_manifest(folder) -> bool:
    """Is there a manifest of ours in `folder` or in any folder under it?"""
    folder = os.fspath(folder)
    return read_manifest(folder) is not None or any(
        is_folder and read_manifest(path) is not None for _, path, is_folder in _walk(folder))


def describe(entries: list[str]) -> str:
    """ "a, b, c and 3 more": the first few of `entries`, for a message."""
    shown = ", ".join(entries[:SHOWN])
    return shown + (f" and {len(entries) - SHOWN} more" if len(entries) > SHOWN else "")


def check_replaceable(target, overwrite_flag: str = "--overwrite") -> None:
    """Raise `OutputError` (one line naming them) unless everything in the existing folder `target` is ours, so
    that `overwrite_flag` may replace it: a folder without a manifest (saved before manifests existed, or not ours
    at all) is refused, and so is one holding anything its manifest does not list with the same hash."""
    target = os.fspath(target)
    foreign = foreign_entries(target)
    if not foreign:
        return
    if not has_manifest(target):
        raise OutputError(f"{target} has no {MANIFEST_NAME}, so it was not written by this project (or was written "
                          f"before manifests existed); it holds {describe(foreign)}. {overwrite_flag} replaces only "
                          "what this project wrote: move or delete it yourself, or choose another folder.")
    raise OutputError(f"{target} holds files this project did not write (or that changed since): "
                      f"{describe(foreign)}. {overwrite_flag} replaces only what this project wrote there "
                      f"({MANIFEST_NAME} lists it): move them away, or choose another folder.")


def remove_ours(folder, entries=None, *, overwrite_flag: str = "--overwrite") -> None:
    """Remove the top-level `entries` of `folder` (default: all but the run lock) after checking that nothing in them
    is foreign (`OutputError` naming what is, and nothing removed); the manifest forgets them."""
    folder = os.fspath(folder)
    names = sorted(os.listdir(folder)) if entries is None else sorted(entries)
    names = [name for name in names if name not in (LOCK_NAME, MANIFEST_NAME) and not HELD_BY.match(name)]
    foreign = [entry for entry in foreign_entries(folder) if entry.split(os.sep)[0].rstrip("/") in names]
    if foreign:
        raise OutputError(f"{folder} holds files this project did not write (or that changed since): "
                          f"{describe(foreign)}. {overwrite_flag} removes only what this project wrote: move them "
                          "away, or choose another folder.")
    manifest = read_manifest(folder)
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.remove(path)
    if manifest is not None:
        kept = {key: value for key, value in manifest.items() if key.split(os.sep)[0].rstrip("/") not in names}
        write_manifest(folder, kept)


__all__ = ["HELD_BY", "LOCK_NAME", "MANIFEST_NAME", "check_replaceable", "describe", "foreign_entries", "has_manifest",
           "manifest_entries", "read_manifest", "record_entries", "record_pending", "remove_ours", "run_entries",
           "write_manifest"]
