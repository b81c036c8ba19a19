"""One run at a time per output folder, and the record of what a run made there.

    with RunLock(output_dir):
        ...  # train

A second run into the same folder while the first holds the lock is refused with one line. The kernel releases the
lock (`flock`) when the process dies however it dies, so the lock of a killed run is free; its file, left behind,
tells whose it was (taking it over says so) and which top-level entries were there before that run, so that what the
killed run made (checkpoints, TensorBoard logs) counts as ours (`manifest.foreign_entries`). When the run ends, what
it made is added to the folder's manifest and the lock file removed.
"""

import contextlib
import fcntl
import json
import os
import socket
import sys

from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.manifest import (
    HELD_BY,
    LOCK_NAME,
    MANIFEST_NAME,
    describe,
    foreign_entries,
    read_manifest,
    record_entries,
    run_entries,
)
from vanilla_transformer.files.write_errors import writing_errors


class RunLock:
    """A lock file in an output folder (see the module's docstring)."""

    def __init__(self, folder, what: str = "--output_dir"):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.what = what
        self.fd = None
        self.found = None  # the top-level entries there before this run
        self.found_inside = {}  # of those that are folders of ours, the files under each
        self.message = None  # set when a stale lock was taken over

    def acquire(self) -> "RunLock":
        with writing_errors(self.folder):
            os.makedirs(self.folder, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _holder(_read_all(fd))
                    os.close(fd)
                    raise OutputError(f"{self.folder} is in use by another run ({holder or 'a running process'}); "
                                      f"wait for it to finish or choose another {self.what}.") from None
                try:
                    same = os.fstat(fd).st_ino == os.stat(self.path).st_ino
                except FileNotFoundError:
                    same = False
                if same:
                    break
                os.close(fd)  # the file was removed by its holder as we opened it: try again with the new one
            previous = _read_all(fd)
            if previous:
                self.message = (f"Took over the lock of {self.folder} from {_holder(previous)}, which is no longer "
                                "running (killed?).")
                print(self.message, file=sys.stderr)
            # what is there before this run; what a killed run made there (its lock says) counts as this run's
            before_killed_run = run_entries(self.folder)
            self.found = sorted(name for name in os.listdir(self.folder) if name != LOCK_NAME and (
                before_killed_run is None or name in before_killed_run))
            # and the files in those of them a run adds to (TensorBoard's runs/ of the earlier runs)
            self.found_inside = {name: _files_under(os.path.join(self.folder, name))
                                 for name in _recorded_folders(self.folder, self.found)}
            os.ftruncate(fd, 0)
            os.lseek(fd, 0, os.SEEK_SET)
            record = {"process": os.getpid(), "host": socket.gethostname(), "found": self.found}
            os.write(fd, json.dumps(record).encode())
            os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        """Record what this run made in the folder (at its top, and inside the folders it found there) in its
        manifest, then remove the lock."""
        if self.fd is None:
            return
        with contextlib.suppress(OSError):  # a folder that cannot take the record keeps its lock file: still ours
            made = [name for name in os.listdir(self.folder) if name not in self.found
                    and name not in (LOCK_NAME, MANIFEST_NAME) and not HELD_BY.match(name)
                    and read_manifest(os.path.join(self.folder, name)) is None]
            for name, before in self.found_inside.items():  # what this run added inside a folder of ours it found
                path = os.path.join(self.folder, name)
                if os.path.isdir(path):
                    made += [os.path.join(name, entry) for entry in sorted(_files_under(path) - before)]
            if made:
                record_entries(self.folder, made)
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def check_run_folder(folder, *, resuming: bool, what: str = "--output_dir",
                     overwrite_flag: str = "--overwrite_output_dir") -> None:
    """Raise `OutputError` (one line naming them) when the training output `folder` holds files this project did
    not write: a new run (or one started again with `overwrite_flag`) refuses anything foreign in it, a resumed run
    refuses foreign files at its top (its final save writes the model there, and would replace them)."""
    foreign = foreign_entries(folder, top_files_only=resuming)
    if not foreign:
        return
    if resuming:
        raise OutputError(f"{what} {os.fspath(folder)} holds files this project did not write (or that changed "
                          f"since): {describe(foreign)}; the resumed run's final save would replace them: move them "
                          f"away, or choose another {what}.")
    raise OutputError(f"{what} {os.fspath(folder)} holds files this project did not write (or that changed since): "
                      f"{describe(foreign)}; a run writes its model there, and {overwrite_flag} removes only what "
                      f"this project wrote: move them away, or choose another {what}.")


def _recorded_folders(folder: str, names: list[str]) -> list[str]:
    """Those of the entries `names` at the top of `folder` that are folders whose files its manifest records (not a
    link, nor a folder with a manifest of its own, such as a checkpoint): the folders of ours a run may add to."""
    recorded = read_manifest(folder) or {}
    return [name for name in names if os.path.isdir(os.path.join(folder, name))
            and not os.path.islink(os.path.join(folder, name)) and read_manifest(os.path.join(folder, name)) is None
            and any(key.startswith(name + "/") for key in recorded)]


def _files_under(folder: str) -> set[str]:
    """The files under `folder`, as paths relative to it (a run may add one to a subfolder of an earlier run's:
    TensorBoard writes the runs of one second into one folder)."""
    return {os.path.relpath(os.path.join(root, name), folder) for root, _, names in os.walk(folder) for name in names}


def _holder(text: str) -> str:
    """ "process PID on HOST" from a lock file's text."""
    try:
        record = json.loads(text)
        return f"process {record['process']} on {record['host']}"
    except (ValueError, KeyError, TypeError):
        return text


def _read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 1 << 20).decode("utf-8", "replace").strip()


__all__ = ["LOCK_NAME", "RunLock", "check_run_folder"]
