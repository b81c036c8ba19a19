"""Writing atomically: a hidden staging folder (or file) beside the destination, renamed into place when whole.

- `staged_folder(target, overwrite=..., inputs=...)`: check the output folder first (`paths.check_output_folder`),
  write into `.NAME.staging-PID/NAME` beside it, write its manifest last, and rename it into place (an existing
  folder is swapped out atomically and removed only once the new one is in place). A killed run leaves only the
  hidden staging folder, removed by the next writer of NAME (or ignored: nothing reads hidden folders).
- `install_folder(staging, target)`: the manifest, the rename / atomic swap on their own (Trainer checkpoints).
- `staged_file(path, ...)`: the same for one file (`translate --output`, `explore --html`).
- `commit_files(staging, folder)`: the files of a finished model moved into a folder holding other things (a
  training run's --output_dir), weights last, and recorded in its manifest.

Files are created by `open` (mode 0666 less the user's umask) and folders by `os.mkdir` (0777 less the umask), as
`save_pretrained` makes them: no 0600 / 0700 files from `tempfile`.
"""

import contextlib
import ctypes
import errno
import fnmatch
import os
import shutil
import sys

from vanilla_transformer.files.manifest import HELD_BY, record_entries, record_pending, write_manifest
from vanilla_transformer.files.paths import check_output_file, check_output_folder
from vanilla_transformer.files.text import is_stream
from vanilla_transformer.files.write_errors import writing_errors

# The files whose presence makes a folder a loadable model: moved in last, so that `from_pretrained` finds either the
# old whole model or the new whole model, never new settings with old weights.
WEIGHT_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                "pytorch_model.bin.index.json")


def pid_alive(pid: int) -> bool:
    """Whether process `pid` of this machine runs (this process counts)."""
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # alive, another user's
        return True
    return True


def staging_name(name: str, pid: int | None = None) -> str:
    """The hidden name of the staging folder of `name` written by process `pid` (default: this one)."""
    return f".{name}.staging-{os.getpid() if pid is None else pid}"


def clean_stale_staging(parent, name: str | None = None) -> list[str]:
    """Remove the staging folders of killed runs in `parent` (of `name` only, if given) and put back a folder that a
    killed run had moved aside to swap in its own (when nothing took its place). Folders of live processes stay.
    Returns what was done, one line each."""
    parent = os.fspath(parent)
    done = []
    try:
        entries = os.listdir(parent)
    except OSError:
        return done
    for entry in sorted(entries):
        match = HELD_BY.match(entry)
        if not match or (name is not None and match["name"] != name) or pid_alive(int(match["pid"])):
            continue
        path = os.path.join(parent, entry)
        target = os.path.join(parent, match["name"])
        if match["kind"] == "old" and not os.path.lexists(target):
            os.rename(path, target)
            done.append(f"Restored {target} (a run killed while replacing it had moved it aside to {entry}).")
        else:
            if os.path.isdir(path) and not os.path.islink(path):
                shutil.rmtree(path, ignore_errors=True)
            else:  # the staging file of a `staged_file`
                with contextlib.suppress(OSError):
                    os.remove(path)
            done.append(f"Removed {path}, left by a run that was killed (process {match['pid']}).")
    return done


def _exchange(a: str, b: str) -> bool:
    """Atomically swap two paths (Linux renameat2 RENAME_EXCHANGE). False where the system cannot."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if renameat2(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP, errno.EOPNOTSUPP):
        return False  # a file system without the flag (e.g. some network file systems)
    raise OSError(code, os.strerror(code), a, None, b)


def current_umask() -> int:
    """The process's umask (read from /proc where it can be: setting it to read it races with other threads)."""
    with contextlib.suppress(OSError, ValueError):
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def apply_umask(folder) -> None:
    """Give the folder and everything we wrote under it the permissions `open` and `os.mkdir` give under the user's
    umask (0666 / 0777 less it): safetensors writes its files 0600 and `tempfile` makes 0700 folders, which would
    hide a saved model from the user's group where every other file of the folder is readable."""
    mask = current_umask()
    for root, folders, names in os.walk(os.fspath(folder)):
        os.chmod(root, 0o777 & ~mask)
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                executable = os.stat(path).st_mode & 0o111
                os.chmod(path, (0o777 if executable else 0o666) & ~mask)


def install_folder(staging, target) -> None:
    """Put the finished folder `staging` at `target` (same file system), its manifest written last. A missing or
    empty `target` is replaced by one rename. An existing one is swapped with the new folder in one atomic step where
    the system allows it (otherwise moved aside to `.NAME.old-PID` first, and put back by `clean_stale_staging` if
    the run dies before the new folder is in place), and removed only once the new folder is in place."""
    staging, target = os.fspath(staging), os.fspath(target)
    write_manifest(staging)
    apply_umask(staging)
    fsync_tree(staging)  # the new files are on disk before the rename makes them the target (power loss)
    try:
        os.rename(staging, target)  # atomic; replaces a missing target or an empty folder
        return
    except OSError as error:
        if error.errno not in (errno.ENOTEMPTY, errno.EEXIST):
            raise
    if _exchange(staging, target):
        shutil.rmtree(staging)  # the old folder, now under the staging name
        return
    parent, name = os.path.split(target)
    aside = os.path.join(parent, f".{name}.old-{os.getpid()}")
    os.rename(target, aside)
    os.rename(staging, target)
    shutil.rmtree(aside)


@contextlib.contextmanager
def staged_folder(target, *, overwrite: bool = False, inputs=(), overwrite_flag: str = "--overwrite"):
    """Write a folder so that `target` is always either its old whole state or the new whole state.

    Checks `target` first (`check_output_folder`), then yields a fresh folder to write into:
    `.NAME.staging-PID/NAME` beside `target` (the inner folder carries the target's own name, for writers that name
    things after their folder). When the body finishes, `target` is checked again (nothing foreign may have arrived
    meanwhile) and the folder, with its manifest, replaces it (`install_folder`); when the body raises, or the
    process is killed, `target` is untouched and the staging folder is removed (now, or by the next
    `staged_folder` of NAME). A full disk or an unwritable place is an `OutputError` naming `target`.

        with staged_folder(args.output_dir, overwrite=args.overwrite, inputs=args.checkpoints) as folder:
            model.save_pretrained(folder)
    """
    check_output_folder(target, overwrite=overwrite, inputs=inputs, overwrite_flag=overwrite_flag)
    shown = os.fspath(target)
    target = os.path.abspath(shown)
    parent, name = os.path.split(target)
    holder = os.path.join(parent, staging_name(name))
    with writing_errors(shown, every_os_error=True):  # every call here makes the output's place
        os.makedirs(parent, exist_ok=True)
        for line in clean_stale_staging(parent, name):
            print(line, file=sys.stderr)
        shutil.rmtree(holder, ignore_errors=True)
        os.mkdir(holder)
    staging = os.path.join(holder, name)
    try:
        with writing_errors(shown, owned=(holder, target)):
            os.mkdir(staging)
            yield staging
            check_output_folder(shown, overwrite=overwrite, inputs=inputs, overwrite_flag=overwrite_flag)  # again
            install_folder(staging, target)
    finally:
        shutil.rmtree(holder, ignore_errors=True)


@contextlib.contextmanager
def staged_file(path, *, inputs=(), what: str = "--output", overwrite: bool = False,
                overwrite_flag: str = "--overwrite", encoding: str | None = "utf-8"):
    """Write a file so that `path` is always either its old whole content or the new whole content: checks it
    (`check_output_file`: an existing file only with `overwrite`), yields a file object open for writing
    `.NAME.staging-PID` beside it (text with `encoding`, bytes when `encoding` is None; mode 0666 less the umask, as
    `open` makes files), and when the body finishes, flushes it to disk and renames it over `path` (over the file a
    link at `path` points to, the link kept); a device or pipe (`is_stream`) is written into directly. When the body
    raises or the process is killed, `path` is untouched and the staging file is removed (now, or by the next
    `staged_file` of NAME). A full disk or an unwritable folder is an `OutputError` naming the file.

        with staged_file(args.output, overwrite=args.overwrite) as f:
            f.writelines(line + "\\n" for line in translations)
    """
    shown = os.fspath(path)
    if is_stream(shown):  # a device or a pipe is written into as it goes: renaming over it would replace it
        with writing_errors(shown), open(shown, "w" if encoding else "wb", encoding=encoding) as f:
            yield f
        return
    check_output_file(path, inputs=inputs, what=what, overwrite=overwrite, overwrite_flag=overwrite_flag)
    path = os.path.realpath(shown)  # a link's target is replaced, the link kept
    parent, name = os.path.split(path)
    staging = os.path.join(parent, staging_name(name))
    try:
        with writing_errors(shown, every_os_error=True):  # the staging file made: every call here is on the output
            for line in clean_stale_staging(parent, name):
                print(line, file=sys.stderr)
            f = open(staging, "w" if encoding else "wb", encoding=encoding)
        try:
            with writing_errors(shown, owned=(staging, path)):  # the body reads its inputs too: errno or name
                yield f
            with writing_errors(shown, every_os_error=True):
                f.flush()
                os.fsync(f.fileno())
                f.close()
        finally:
            if not f.closed:  # after an error, which is what the user is told: closing must not replace it
                with contextlib.suppress(OSError):
                    f.close()
        with writing_errors(shown, every_os_error=True):
            os.replace(staging, path)
            fsync_folder(parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


def is_weight_file(name: str) -> bool:
    """Is `name` one of the `WEIGHT_FILES` of a saved model?"""
    return any(fnmatch.fnmatch(name, pattern) for pattern in WEIGHT_FILES)


def commit_files(staging, folder) -> None:
    """Move the files of the finished folder `staging` into `folder` (same file system) so that a kill at any point
    leaves either the old model or the new one loadable, never a mix: first the old weight files are removed (the
    user asked to replace the model), then every other file is moved in, then the new weights, index files last.
    Meanwhile the manifest of `folder` accepts each file old or new; then it records the new ones. Each file is
    flushed to disk before it is moved. `staging` is removed."""
    staging, folder = os.fspath(staging), os.fspath(folder)
    names = sorted(os.listdir(staging))
    apply_umask(staging)
    for name in names:
        path = os.path.join(staging, name)
        if os.path.isfile(path):
            _fsync_file(path)
    record_pending(folder, staging, names)  # old or new, each file stays ours while they are moved
    for name in os.listdir(folder):  # un-commit the old model: its weights go first
        path = os.path.join(folder, name)
        if is_weight_file(name) and os.path.isfile(path):
            os.unlink(path)
    weights = sorted((n for n in names if is_weight_file(n)), key=lambda n: (n.endswith(".json"), n))
    for name in [n for n in names if not is_weight_file(n)] + weights:
        source, destination = os.path.join(staging, name), os.path.join(folder, name)
        if os.path.isdir(source):
            install_folder(source, destination)
        else:
            os.replace(source, destination)
    fsync_folder(folder)
    record_entries(folder, names)
    shutil.rmtree(staging, ignore_errors=True)


def has_model(folder) -> bool:
    """Does `folder` hold a saved model (config.json and weight files) at its top level?"""
    folder = os.fspath(folder)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        return False
    return any(is_weight_file(name) for name in os.listdir(folder))


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def fsync_tree(folder) -> None:
    """Flush every file under `folder` to disk."""
    for root, _, names in os.walk(os.fspath(folder)):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                _fsync_file(path)


def fsync_folder(folder) -> None:
    """Flush a folder's entries (a rename into it) to disk, where the system allows it."""
    with contextlib.suppress(OSError):
        fd = os.open(os.fspath(folder), os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


__all__ = ["WEIGHT_FILES", "apply_umask", "clean_stale_staging", "commit_files", "current_umask", "fsync_folder",
           "fsync_tree", "has_model", "install_folder", "is_weight_file", "pid_alive", "staged_file",
           "staged_folder", "staging_name"]
