"""Reading text line by line, as `wc -l` and every editor count lines (training data, `translate --input`).

`read_text_lines` reads a whole file; `iter_text_lines` streams one (gzip'd or plain) in the memory of a line.
"""

import contextlib
import gzip
import io
import os
import sys
import zlib

from vanilla_transformer.files.errors import TextFileError

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


GZIP_MAGIC = b"\x1f\x8b"


def iter_text_lines(path_or_stream, what: str = "input file"):
    """The lines of a UTF-8 text file or binary/text stream as `read_text_lines` gives them, one at a time: a file
    of any size is read in the memory of its longest line. A gzip'd file or stream (its first two bytes gzip's
    magic number) is decompressed on the way. Raises `TextFileError` (one line) as `read_text_lines` does, and for a
    damaged or cut-short gzip file."""
    with _open_binary(path_or_stream, what) as (name, stream):
        position = 0  # bytes read so far (of the decompressed text)
        try:
            for number, data in enumerate(stream):
                start = position
                position += len(data)
                if number == 0 and data.startswith(BOM):
                    data, start = data[len(BOM):], start + len(BOM)
                data = data[:-1] if data.endswith(b"\n") else data
                try:
                    line = data.decode("utf-8")
                except UnicodeDecodeError as error:
                    raise TextFileError(f"The {what} {name} is not UTF-8 text: byte {start + error.start} "
                                        f"(0x{data[error.start]:02x}) cannot be decoded{_hint(data, start)}.") from None
                yield line.removesuffix("\r")
        except (EOFError, OSError, zlib.error) as error:  # gzip.BadGzipFile is an OSError
            raise TextFileError(f"The {what} {name} cannot be read after byte {position}: {error}.") from None


def count_text_lines(path) -> int:
    """How many lines `iter_text_lines` finds in the (gzip'd) file `path`, counted in blocks (for a progress bar's
    total): its "\\n"s, and one more when the last line has none."""
    with open(path, "rb") as raw:
        gzipped = raw.read(2) == GZIP_MAGIC
    count, last = 0, b"\n"
    with (gzip.open if gzipped else open)(path, "rb") as f:
        while block := f.read(1 << 20):
            count += block.count(b"\n")
            last = block[-1:]
    return count + (last != b"\n")


def _hint(data: bytes, start: int) -> str:
    if start == 0 and data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return " (it looks like UTF-16: convert it with iconv -f UTF-16 -t UTF-8)"
    return "; convert it to UTF-8 (e.g. iconv -f latin1 -t UTF-8)"


@contextlib.contextmanager
def _open_binary(path_or_stream, what: str):
    """(name, binary stream with `peek`) of a path or a stream, a gzip'd one decompressed."""
    if isinstance(path_or_stream, (str, bytes, os.PathLike)):
        name = os.fspath(path_or_stream)
        if not os.path.exists(name):
            raise TextFileError(f"The {what} {name} does not exist.")
        if os.path.isdir(name):
            raise TextFileError(f"The {what} {name} is a folder, not a file.")
        try:
            raw = open(name, "rb")  # noqa: SIM115  (closed below)
        except OSError as error:
            raise TextFileError(f"The {what} {name} cannot be read: {error.strerror}.") from None
    else:
        name = getattr(path_or_stream, "name", "<stream>")
        name = "standard input" if name == "<stdin>" or path_or_stream is sys.stdin else str(name)
        raw = getattr(path_or_stream, "buffer", path_or_stream)  # a text stream (sys.stdin): its bytes
        if isinstance(raw, io.TextIOBase):  # a text stream without bytes (io.StringIO): already in memory
            raw = io.BytesIO(raw.read().encode("utf-8", "surrogateescape"))
        if not hasattr(raw, "peek"):
            raw = io.BufferedReader(_RawReader(raw))
    try:
        yield name, (gzip.GzipFile(fileobj=raw, mode="rb") if raw.peek(2)[:2] == GZIP_MAGIC else raw)
    finally:
        if isinstance(path_or_stream, (str, bytes, os.PathLike)):
            raw.close()


class _RawReader(io.RawIOBase):
    """A binary stream's `read` as the raw stream `io.BufferedReader` buffers (for `peek` and lines)."""

    def __init__(self, stream):
        self.stream = stream

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        data = self.stream.read(len(buffer))
        buffer[: len(data)] = data
        return len(data)


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


__all__ = ["BOM", "GZIP_MAGIC", "count_text_lines", "iter_text_lines", "read_text_lines"]
