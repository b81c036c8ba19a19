"""Safe file handling for every command that reads text or writes a folder: nothing a user saved is lost.

- `staged_folder(target, overwrite=..., inputs=...)`: validate the output folder first, write into a hidden staging
  folder beside it, rename it into place only when the writing finished (an existing folder is swapped out
  atomically and removed only once the new one is in place). A killed run leaves only a hidden `.NAME.staging-PID`
  folder, removed by the next writer of NAME (or ignored: nothing reads hidden folders).
- `install_folder(staging, target)`: the rename / atomic swap on its own (used for Trainer checkpoints).
- `staged_file(path, inputs=...)`: the same for one file (`translate --output`): checked first (`check_output_file`),
  written to a hidden `.NAME.staging-PID` file beside it, flushed and renamed over `path` when whole.
- `read_text_lines(path_or_stream, what)`: one sentence per line, split on "\\n" only ("\\r\\n" too), BOM removed;
  input that is not UTF-8 is one line naming the file and the byte offset.
- `RunLock(folder)`: a lock file that refuses a second concurrent run into the same folder; the lock of a run that
  died (SIGKILL, power loss) is taken over with a message.
- `writing_errors(folder)`: a full disk, a read-only or unwritable folder becomes one line naming the folder.

Every problem is an `OutputError` / `TextFileError` (both `ValueError`s) whose message is one line.
"""

import contextlib
import ctypes
import errno
import fcntl
import os
import re
import shutil
import socket
import sys


class OutputError(ValueError):
    """An output folder that cannot be written (as asked); the message is one line naming the folder."""


class TextFileError(ValueError):
    """A text file that cannot be read as UTF-8 lines; the message is one line naming the file."""


# ---------------------------------------------------------------------------------------------------------------
# Checking an output folder before anything is written


def _real(path) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _is_within(path: str, folder: str) -> bool:
    """Is `path` `folder` itself or inside it (both real, absolute paths)?"""
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def is_within(path, folder) -> bool:
    """Is `path` the folder `folder` itself or inside it (symbolic links and relative paths resolved)?"""
    return _is_within(_real(path), _real(folder))


def check_output_folder(target, *, overwrite: bool = False, inputs=(), overwrite_flag: str = "--overwrite",
                        allow_existing: bool = False) -> None:
    """Raise `OutputError` (one line) unless `target` can become a new folder of our output.

    Refused: a target that is a file or lies under a file; one that is, contains or lies inside any of `inputs`
    (replacing it would destroy what is being read); an existing non-empty folder unless `overwrite` (or
    `allow_existing`: the caller adds to it, e.g. a training run's checkpoints); a folder that cannot be written."""
    shown = os.fspath(target)
    real = _real(target)
    for given in inputs:
        if given is None:
            continue
        source = _real(given)
        if real == source:
            raise OutputError(f"{shown} is one of the inputs; choose another output folder.")
        if _is_within(real, source):
            raise OutputError(f"{shown} is inside the input {os.fspath(given)}; choose an output folder outside it.")
        if _is_within(source, real):
            raise OutputError(f"{shown} contains the input {os.fspath(given)}; writing there would replace it, "
                              "choose another output folder.")
    if os.path.lexists(real) and not os.path.isdir(real):
        raise OutputError(f"{shown} is a file, not a folder; choose a folder for the output.")
    existing = real
    while not os.path.lexists(existing):  # the nearest existing ancestor must be a writable folder
        existing = os.path.dirname(existing)
    if not os.path.isdir(existing):
        raise OutputError(f"{shown} cannot be created: {existing} is a file, not a folder.")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise OutputError(f"{shown} cannot be written: {existing} is read-only or not writable by this user.")
    if real == existing and not overwrite and not allow_existing and os.listdir(real):
        raise OutputError(f"{shown} already exists and is not empty; give {overwrite_flag} to replace it, or choose "
                          "another folder.")


# ---------------------------------------------------------------------------------------------------------------
# Staging folders and atomic installation

_HELD_BY = re.compile(r"^\.(?P<name>.+)\.(?P<kind>staging|old)-(?P<pid>\d+)$")


def _pid_alive(pid: int) -> bool:
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
        match = _HELD_BY.match(entry)
        if not match or (name is not None and match["name"] != name) or _pid_alive(int(match["pid"])):
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


def install_folder(staging, target) -> None:
    """Put the finished folder `staging` at `target` (same file system). A missing or empty `target` is replaced by
    one rename. An existing one is swapped with the new folder in one atomic step where the system allows it
    (otherwise moved aside to `.NAME.old-PID` first, and put back by `clean_stale_staging` if the run dies before
    the new folder is in place), and removed only once the new folder is in place."""
    staging, target = os.fspath(staging), os.fspath(target)
    _fsync_tree(staging)  # the new files are on disk before the rename makes them the target (power loss)
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

    Checks `target` first (`check_output_folder`: refused if it exists and is not empty unless `overwrite`, if it is
    or contains or lies inside one of `inputs`, if it is a file, lies under a file or cannot be written), then
    yields a fresh folder to write into: `.NAME.staging-PID/NAME` beside `target` (the inner folder carries the
    target's own name, for writers that name things after their folder). When the body finishes, that folder
    replaces `target` (`install_folder`); when it raises, or the process is killed, `target` is untouched and the
    staging folder is removed (now, or by the next `staged_folder` of NAME).

        with staged_folder(args.output_dir, overwrite=args.overwrite, inputs=args.checkpoints) as folder:
            model.save_pretrained(folder)
    """
    check_output_folder(target, overwrite=overwrite, inputs=inputs, overwrite_flag=overwrite_flag)
    target = os.path.abspath(os.fspath(target))
    parent, name = os.path.split(target)
    with writing_errors(parent):
        os.makedirs(parent, exist_ok=True)
        for line in clean_stale_staging(parent, name):
            print(line, file=sys.stderr)
        holder = os.path.join(parent, staging_name(name))
        shutil.rmtree(holder, ignore_errors=True)
        os.mkdir(holder)
    staging = os.path.join(holder, name)
    try:
        with writing_errors(target):
            os.mkdir(staging)
            yield staging
            install_folder(staging, target)
    finally:
        shutil.rmtree(holder, ignore_errors=True)


def check_output_file(path, *, inputs=(), what: str = "--output") -> None:
    """Raise `OutputError` (one line) unless `path` can become a file of our output: not a folder, in an existing
    folder that can be written, and none of the `inputs` (files or folders the command reads: the file itself, or an
    existing file inside one of those folders, would be replaced). An existing file is replaced (as `> FILE`)."""
    shown = f"{what} {os.fspath(path)}".strip()  # "--output out.txt"
    real = _real(path)
    for given in inputs:
        if given is None:
            continue
        source = _real(given)
        if real == source:
            raise OutputError(f"{shown} is one of the inputs ({os.fspath(given)}); writing it would replace "
                              "what is being read: choose another file.")
        if os.path.isdir(source) and _is_within(real, source) and os.path.lexists(real):
            raise OutputError(f"{shown} is a file of the input {os.fspath(given)}; writing it would replace "
                              "it: choose another file.")
    if os.path.isdir(real):
        raise OutputError(f"{shown} is a folder; give the name of a file to write.")
    parent = os.path.dirname(real)
    if not os.path.lexists(parent):
        raise OutputError(f"{shown} cannot be written: its folder {os.path.dirname(os.path.abspath(path))} does "
                          "not exist.")
    if not os.path.isdir(parent):
        raise OutputError(f"{shown} cannot be written: {parent} is a file, not a folder.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OutputError(f"{shown} cannot be written: {parent} is read-only or not writable by this user.")


@contextlib.contextmanager
def staged_file(path, *, inputs=(), what: str = "--output", encoding: str | None = "utf-8"):
    """Write a file so that `path` is always either its old whole content or the new whole content: checks it
    (`check_output_file`), yields a file object open for writing `.NAME.staging-PID` beside it (text with
    `encoding`, bytes when `encoding` is None; mode 0666 less the umask, as `open` makes files), and when the body
    finishes, flushes it to disk and renames it over `path` (`os.replace`). When the body raises or the process is
    killed, `path` is untouched and the staging file is removed (now, or by the next `staged_file` of NAME). A full
    disk or an unwritable folder is an `OutputError` naming the file.

        with staged_file(args.output) as f:
            f.writelines(line + "\\n" for line in translations)
    """
    check_output_file(path, inputs=inputs, what=what)
    path = os.path.abspath(os.fspath(path))
    parent, name = os.path.split(path)
    staging = os.path.join(parent, staging_name(name))
    try:
        with writing_errors(path):
            for line in clean_stale_staging(parent, name):
                print(line, file=sys.stderr)
            with open(staging, "w" if encoding else "wb", encoding=encoding) as f:
                yield f
                f.flush()
                os.fsync(f.fileno())
            os.replace(staging, path)
            _fsync_dir(parent)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.remove(staging)


def sha256_of_file(path) -> str:
    """The SHA-256 of a file's bytes, as hex (what `sha256sum` prints)."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


# ---------------------------------------------------------------------------------------------------------------
# Errors while writing

# errno values that mean "this folder cannot take the output": full disk or quota, file size limit, read-only file
# system, no permission, a path component that is a file
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR}
# The same problems as other libraries word them: torch.save (PytorchStreamWriter / iostream), safetensors (Rust
# io::Error names).
WRITE_ERROR_TEXTS = ("PytorchStreamWriter failed", "basic_ios::clear", "iostream error", "No space left",
                     "inline_container.cc",  # torch.save on a full disk: "[enforce fail at inline_container.cc:...]"
                     "File too large", "StorageFull", "FileTooLarge", "ReadOnlyFilesystem", "PermissionDenied",
                     "Read-only file system", "Permission denied", "Disk quota exceeded")


def write_error_message(error: BaseException, folder) -> str | None:
    """One line for an error that means `folder` cannot be written (full disk, read-only, no permission), else
    None."""
    if isinstance(error, OSError) and error.errno in WRITE_ERRNOS:
        reason = error.strerror or os.strerror(error.errno)
        where = f" ({error.filename})" if error.filename else ""
        return f"Cannot write to {os.fspath(folder)}: {reason}{where}."
    text = " ".join(str(error).split())
    if isinstance(error, (OSError, RuntimeError)) or type(error).__name__ == "SafetensorError":
        for marker in WRITE_ERROR_TEXTS:
            if marker in text:
                return (f"Cannot write to {os.fspath(folder)}: the disk is full or the folder is not writable "
                        f"({text[:200]}).")
    return None


@contextlib.contextmanager
def writing_errors(folder):
    """Turn an error that means `folder` cannot be written (OSError ENOSPC, EDQUOT, EFBIG, EROFS, EACCES, EPERM,
    ENOTDIR; torch's and safetensors' words for them) into an `OutputError` naming the folder, in one line."""
    try:
        yield
    except Exception as error:  # re-raised unless it means the folder cannot be written
        if isinstance(error, (OutputError, TextFileError)):
            raise
        message = write_error_message(error, folder)
        if message is None:
            raise
        raise OutputError(message) from None


# ---------------------------------------------------------------------------------------------------------------
# One run at a time per output folder

LOCK_NAME = ".vanilla-transformer.lock"


class RunLock:
    """A lock file in an output folder: a second run into the same folder while this one holds it is refused with
    one line. The kernel releases the lock (`flock`) when the process dies however it dies, so the lock of a killed
    run is free; its file, left behind, only tells whose it was, and taking it over says so.

        with RunLock(output_dir):
            ...  # train
    """

    def __init__(self, folder, what: str = "--output_dir"):
        self.folder = os.fspath(folder)
        self.path = os.path.join(self.folder, LOCK_NAME)
        self.what = what
        self.fd = None
        self.message = None  # set when a stale lock was taken over

    def acquire(self) -> "RunLock":
        with writing_errors(self.folder):
            os.makedirs(self.folder, exist_ok=True)
            while True:
                fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    holder = _read_all(fd)
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
                self.message = (f"Took over the lock of {self.folder} from {previous}, which is no longer running "
                                "(killed?).")
                print(self.message, file=sys.stderr)
            os.ftruncate(fd, 0)
            os.write(fd, f"process {os.getpid()} on {socket.gethostname()}".encode())
            os.fsync(fd)
        self.fd = fd
        return self

    def release(self) -> None:
        if self.fd is None:
            return
        with contextlib.suppress(OSError):
            os.unlink(self.path)
        os.close(self.fd)
        self.fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def _read_all(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace").strip()


# ---------------------------------------------------------------------------------------------------------------
# Reading text line by line

BOM = b"\xef\xbb\xbf"


def read_text_lines(path_or_stream, what: str = "input file") -> list[str]:
    """The lines of a UTF-8 text file or binary/text stream, as `wc -l` and every editor count them: split on "\\n"
    only, a "\\r\\n" ending removed with it, a lone "\\r" (and "\\x0c", U+2028, U+0085, ...) kept inside its line, a
    leading byte-order mark removed; the last line needs no "\\n". Raises `TextFileError` (one line) for a missing
    file, a folder, or bytes that are not UTF-8 (naming the byte offset). `what` names the input in messages."""
    name, data = _read_bytes(path_or_stream, what)
    offset = 0
    if data.startswith(BOM):
        data, offset = data[len(BOM):], len(BOM)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        position = error.start + offset
        hint = (" (it looks like UTF-16: convert it with iconv -f UTF-16 -t UTF-8)"
                if data[:2] in (b"\xff\xfe", b"\xfe\xff") else "; convert it to UTF-8 (e.g. iconv -f latin1 -t UTF-8)")
        raise TextFileError(f"The {what} {name} is not UTF-8 text: byte {position} "
                            f"(0x{data[error.start]:02x}) cannot be decoded{hint}.") from None
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()  # the "\n" ending the last line starts no new one
    return [line.removesuffix("\r") for line in lines]


def _read_bytes(path_or_stream, what: str) -> tuple[str, bytes]:
    if isinstance(path_or_stream, (str, bytes, os.PathLike)):
        path = os.fspath(path_or_stream)
        if not os.path.exists(path):
            raise TextFileError(f"The {what} {path} does not exist.")
        if os.path.isdir(path):
            raise TextFileError(f"The {what} {path} is a folder, not a file.")
        try:
            with open(path, "rb") as f:
                return path, f.read()
        except OSError as error:
            raise TextFileError(f"The {what} {path} cannot be read: {error.strerror}.") from None
    stream = path_or_stream
    name = getattr(stream, "name", "<stream>")
    name = "standard input" if name == "<stdin>" or stream is sys.stdin else str(name)
    raw = getattr(stream, "buffer", None)  # a text stream (sys.stdin): read its bytes, not its decoding
    if raw is not None:
        return name, raw.read()
    data = stream.read()
    if isinstance(data, str):
        return name, data.encode("utf-8", "surrogateescape")
    return name, bytes(data)




# ---------------------------------------------------------------------------------------------------------------
# Committing a set of files into a folder that holds other things (a training run's final model)

# The files whose presence makes a folder a loadable model: moved in last, so that `from_pretrained` finds either the
# old whole model or the new whole model, never new settings with old weights.
WEIGHT_FILES = ("model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json", "pytorch_model*.bin",
                "pytorch_model.bin.index.json")


def _is_weight_file(name: str) -> bool:
    import fnmatch

    return any(fnmatch.fnmatch(name, pattern) for pattern in WEIGHT_FILES)


def _fsync_file(path: str) -> None:
    with open(path, "rb") as f:
        os.fsync(f.fileno())


def commit_files(staging, folder) -> None:
    """Move the files of the finished folder `staging` into `folder` (same file system) so that a kill at any point
    leaves either the old model or the new one loadable, never a mix: first the old weight files are removed (the
    user asked to replace the model), then every other file is moved in, then the new weights, index files last.
    Each file is flushed to disk before it is moved. `staging` is removed."""
    staging, folder = os.fspath(staging), os.fspath(folder)
    names = sorted(os.listdir(staging))
    for name in names:
        path = os.path.join(staging, name)
        if os.path.isfile(path):
            _fsync_file(path)
    for name in os.listdir(folder):  # un-commit the old model: its weights go first
        path = os.path.join(folder, name)
        if _is_weight_file(name) and os.path.isfile(path):
            os.unlink(path)
    weights = sorted((n for n in names if _is_weight_file(n)), key=lambda n: (n.endswith(".json"), n))
    for name in [n for n in names if not _is_weight_file(n)] + weights:
        source, destination = os.path.join(staging, name), os.path.join(folder, name)
        if os.path.isdir(source):
            install_folder(source, destination)
        else:
            os.replace(source, destination)
    _fsync_dir(folder)
    shutil.rmtree(staging, ignore_errors=True)


def _fsync_tree(folder: str) -> None:
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            if os.path.isfile(path) and not os.path.islink(path):
                _fsync_file(path)


def _fsync_dir(folder: str) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def has_model(folder) -> bool:
    """Does `folder` hold a saved model (config.json and weight files) at its top level?"""
    folder = os.fspath(folder)
    if not os.path.isfile(os.path.join(folder, "config.json")):
        return False
    return any(_is_weight_file(name) for name in os.listdir(folder))


__all__ = [
    "WEIGHT_FILES",
    "OutputError",
    "RunLock",
    "TextFileError",
    "check_output_file",
    "check_output_folder",
    "clean_stale_staging",
    "commit_files",
    "has_model",
    "install_folder",
    "sha256_of_file",
    "is_within",
    "read_text_lines",
    "staged_file",
    "staged_folder",
    "staging_name",
    "write_error_message",
    "writing_errors",
]
