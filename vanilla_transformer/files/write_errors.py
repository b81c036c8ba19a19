"""Errors while writing: a full disk, a read-only or unwritable folder, a path too long become one line naming the
user's path (`Cannot write to PATH: REASON.`), whatever library raised them (Python, torch.save, safetensors,
tokenizers); so does any error on the output's own hidden files (its staging file or folder, `OUT.partial`), which
the user never named."""

import contextlib
import errno
import os
import re

from vanilla_transformer.files.errors import OutputError, TextFileError, one_line

# errno values that mean "this place cannot take the output": full disk or quota, file size limit, read-only file
# system, no permission, a path component that is a file, a name or path too long
WRITE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOTDIR,
                errno.ENAMETOOLONG}
# The same problems as other libraries word them: torch.save (PytorchStreamWriter / iostream), safetensors (Rust
# io::Error names).
WRITE_ERROR_TEXTS = ("PytorchStreamWriter failed", "basic_ios::clear", "iostream error", "No space left",
                     "inline_container.cc",  # torch.save on a full disk: "[enforce fail at inline_container.cc:...]"
                     "File too large", "StorageFull", "FileTooLarge", "ReadOnlyFilesystem", "PermissionDenied",
                     "Read-only file system", "Permission denied", "Disk quota exceeded", "File name too long",
                     "InvalidFilename")
# A Rust io::Error as `tokenizers` raises it (a plain Exception): "No space left on device (os error 28)".
RUST_OS_ERROR = re.compile(r"\(os error (\d+)\)")


def _names_one_of(error: OSError, owned) -> bool:
    """Does `error` name one of the paths `owned` (the files and folders of an output: its hidden staging file or
    folder, `OUT.partial`), or a file inside one of them?"""
    places = [os.path.realpath(os.path.abspath(os.fspath(place))) for place in owned]
    for name in (error.filename, error.filename2):
        if not isinstance(name, (str, bytes, os.PathLike)):
            continue
        named = os.path.realpath(os.path.abspath(os.fsdecode(name)))
        if any(named == place or named.startswith(place.rstrip(os.sep) + os.sep) for place in places):
            return True
    return False


def write_error_message(error: BaseException, path, owned=(), every_os_error: bool = False) -> str | None:
    """One line for an error that means `path` (the user's output file or folder) cannot be written (full disk,
    read-only, no permission, name too long), else None. The hidden staging files it may name are left out: the
    user's path is what the user knows.

    Any OSError that names one of `owned` (the output's own hidden files and folders, or a file inside one) is such an
    error whatever its errno (a folder that vanished, /proc, an I/O error), and so is every OSError when
    `every_os_error` (a block whose every system call is on the output)."""
    if isinstance(error, OSError) and (error.errno in WRITE_ERRNOS or every_os_error or _names_one_of(error, owned)):
        reason = error.strerror or (os.strerror(error.errno) if error.errno else one_line(error))
        return f"Cannot write to {os.fspath(path)}: {reason}."
    rust = RUST_OS_ERROR.search(one_line(error))
    if rust and int(rust.group(1)) in WRITE_ERRNOS:
        return f"Cannot write to {os.fspath(path)}: {os.strerror(int(rust.group(1)))}."
    if isinstance(error, (OSError, RuntimeError)) or type(error).__name__ == "SafetensorError":
        text = one_line(error)
        for marker in WRITE_ERROR_TEXTS:
            if marker in text:
                return (f"Cannot write to {os.fspath(path)}: the disk is full or the folder is not writable "
                        f"({marker}).")
    return None


@contextlib.contextmanager
def writing_errors(path, *, owned=(), every_os_error: bool = False):
    """Turn an error that means `path` cannot be written (OSError ENOSPC, EDQUOT, EFBIG, EROFS, EACCES, EPERM,
    ENOTDIR, ENAMETOOLONG; torch's, safetensors' and tokenizers' words for them; any OSError naming one of `owned`, or
    any OSError at all with `every_os_error`: see `write_error_message`) into an `OutputError` naming `path`, in one
    line."""
    try:
        yield
    except Exception as error:  # re-raised unless it means the path cannot be written
        if isinstance(error, (OutputError, TextFileError)):
            raise
        message = write_error_message(error, path, owned, every_os_error)
        if message is None:
            raise
        raise OutputError(message) from None


__all__ = ["WRITE_ERRNOS", "write_error_message", "writing_errors"]
