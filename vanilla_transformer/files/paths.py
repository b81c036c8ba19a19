"""Checking an output path before any work: the one rule of every command that writes.

An output folder or file must not be one of the command's inputs, lie inside one, or contain one; it must be
writable; an existing one is replaced only when the user asks (`--overwrite`), and then only when everything in it
is ours (`manifest.check_replaceable`). Each refusal is an `OutputError` whose message is one line naming the path.
"""

import os
import stat

from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.manifest import check_replaceable


def real_path(path) -> str:
    """`path` absolute, with symbolic links resolved."""
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def file_key(path):
    """What tells files apart: an existing regular file's (device, inode), which every name of it shares (hard links
    and symbolic links alike); for anything else (a name not there yet, a device, a pipe) its `real_path`."""
    try:
        status = os.stat(path)
    except (OSError, ValueError):
        return real_path(path)
    return (status.st_dev, status.st_ino) if stat.S_ISREG(status.st_mode) else real_path(path)


def _within(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def is_within(path, folder) -> bool:
    """Is `path` the folder `folder` itself or inside it (symbolic links and relative paths resolved)?"""
    return _within(real_path(path), real_path(folder))


def _check_against_inputs(shown: str, real: str, inputs) -> None:
    for given in inputs:
        if given is None:
            continue
        source = real_path(given)
        if real == source:
            raise OutputError(f"{shown} is one of the inputs; writing it would replace what is being read: choose "
                              "another output.")
        if _within(real, source):
            raise OutputError(f"{shown} is inside the input {os.fspath(given)}; choose an output outside it.")
        if _within(source, real):
            raise OutputError(f"{shown} contains the input {os.fspath(given)}; writing there would replace it, "
                              "choose another output.")


# what the hidden staging name `.NAME.staging-PID` adds to NAME (a process id has at most 7 digits on Linux)
STAGING_NAME_EXTRA = len("..staging-") + 7


def _check_name_lengths(shown: str, existing: str, names: list[str]) -> None:
    """Each of `names`, to be made in the existing folder `existing`, fits its file system with room for the staging
    name beside it."""
    try:
        name_max = os.pathconf(existing, "PC_NAME_MAX")
    except (OSError, ValueError):
        name_max = 255
    for name in names:
        if len(os.fsencode(name)) + STAGING_NAME_EXTRA > name_max:
            raise OutputError(f"{shown} cannot be written: the name {name[:24]}... is {len(os.fsencode(name))} bytes "
                              f"long, and an output here takes at most {name_max - STAGING_NAME_EXTRA} (room for "
                              "its staging name).")


def _check_writable_place(shown: str, real: str) -> str:
    """The nearest existing folder at or above `real`, which must be a writable folder; every name to be made below
    it must fit the file system."""
    existing = real
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputError(f"{shown} cannot be created: {existing} is a file, not a folder.")
    if real != existing:
        _check_name_lengths(shown, existing, os.path.relpath(real, existing).split(os.sep))
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{shown} cannot be written: {existing} is read-only or not writable by this user.")
    return existing


def check_output_folder(target, *, overwrite: bool = False, inputs=(), overwrite_flag: str = "--overwrite",
                        allow_existing: bool = False) -> None:
    """Raise `OutputError` (one line) unless `target` can become a new folder of our output.

    Refused: a target that is, contains or lies inside any of `inputs` (even with `overwrite`: replacing it would
    destroy what is being read); a file, or a place under a file; a folder that cannot be written; an existing
    non-empty folder unless `overwrite`, and with `overwrite` one holding anything this project did not write
    (`manifest.check_replaceable`: a folder without a manifest, or one with the user's own files added).
    `allow_existing`: the caller adds to the folder and checks it itself (a training run's --output_dir)."""
    shown = os.fspath(target)
    real = real_path(target)
    _check_against_inputs(shown, real, inputs)
    if os.path.lexists(real) and not os.path.isdir(real):
        raise OutputError(f"{shown} is a file, not a folder; choose a folder for the output.")
    existing = _check_writable_place(shown, real)
    if real != existing or allow_existing or not os.listdir(real):
        return
    if not overwrite:
        raise OutputError(f"{shown} already exists and is not empty; give {overwrite_flag} to replace it, or choose "
                          "another folder.")
    check_replaceable(shown, overwrite_flag)


def check_output_file(path, *, inputs=(), what: str = "--output", overwrite: bool = False,
                      overwrite_flag: str = "--overwrite") -> None:
    """Raise `OutputError` (one line) unless `path` can become a file of our output: none of the `inputs` (files or
    folders the command reads) and not inside one of those folders, not a folder, in an existing folder that can be
    written, and not an existing file unless `overwrite` (the user named that file: it is replaced whole)."""
    shown = f"{what} {os.fspath(path)}".strip()  # "--output out.txt"
    real = real_path(path)
    for given in inputs:
        if given is None:
            continue
        source = real_path(given)
        if real == source:
            raise OutputError(f"{shown} is one of the inputs ({os.fspath(given)}); writing it would replace "
                              "what is being read: choose another file.")
        if os.path.isdir(source) and _within(real, source):
            kind = "a file of" if os.path.lexists(real) else "inside"
            raise OutputError(f"{shown} is {kind} the input {os.fspath(given)}; writing it would change that "
                              "folder: choose a file outside it.")
    if os.path.isdir(real):
        raise OutputError(f"{shown} is a folder; give the name of a file to write.")
    parent = os.path.dirname(real)
    if not os.path.lexists(parent):
        raise OutputError(f"{shown} cannot be written: its folder {os.path.dirname(os.path.abspath(path))} does "
                          "not exist.")
    if not os.path.isdir(parent):
        raise OutputError(f"{shown} cannot be written: {parent} is a file, not a folder.")
    _check_name_lengths(shown, parent, [os.path.basename(real)])
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{shown} cannot be written: {parent} is read-only or not writable by this user.")
    if os.path.lexists(real) and not overwrite:
        raise OutputError(f"{shown} already exists; give {overwrite_flag} to replace it, or choose another file.")


__all__ = ["check_output_file", "check_output_folder", "is_within", "real_path"]
