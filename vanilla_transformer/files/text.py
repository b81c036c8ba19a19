"""Reading text line by line, as `wc -l` and every editor count lines: the one line reader of the package (training
data of any size, gzip'd or not, the tokenizer's training files, `translate --input`).

A file is read in chunks of `READ_CHUNK_BYTES`, decoded a whole number of lines at a time, so that a corpus of any
size streams through in constant memory; `read_text_lines` collects the lines of a small file into a list.
"""

import gzip
import os
import sys
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from vanilla_transformer.files.errors import TextFileError

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK_BYTES = 1 << 22


def open_text_file(path, what: str = "input file") -> BinaryIO:
    """The bytes of the file `path`, decompressed where it is gzip'd (told by its first bytes, whatever its name).
    Raises `TextFileError` (one line naming the file) for a missing file, a folder or a file that cannot be opened."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TextFileError(f"The {what} {path} does not exist.")
    if os.path.isdir(path):
        raise TextFileError(f"The {what} {path} is a folder, not a file.")
    try:
        with open(path, "rb") as f:
            gzipped = f.read(len(GZIP_MAGIC)) == GZIP_MAGIC
        return gzip.open(path, "rb") if gzipped else open(path, "rb")
    except OSError as error:
        raise TextFileError(f"The {what} {path} cannot be read: {error.strerror}.") from None


def _open(path_or_stream, what: str) -> tuple[str, BinaryIO | None, object]:
    """-> (the name messages give the input, a binary stream to close when done or None, the stream to read)."""
    if isinstance(path_or_stream, (str, bytes, os.PathLike)):
        stream = open_text_file(path_or_stream, what)
        return os.fsdecode(path_or_stream), stream, stream
    stream = path_or_stream
    name = getattr(stream, "name", "<stream>")
    name = "standard input" if name == "<stdin>" or stream is sys.stdin else str(name)
    # a text stream (sys.stdin): read its bytes, not its decoding
    stream = getattr(stream, "buffer", None) or stream
    if hasattr(stream, "peek") and stream.peek(len(GZIP_MAGIC))[:len(GZIP_MAGIC)] == GZIP_MAGIC:
        return name, None, gzip.GzipFile(fileobj=stream, mode="rb")  # a gzip'd stream (zcat-less pipes)
    return name, None, stream


def _read_chunk(stream, name: str, what: str) -> bytes:
    try:
        chunk = stream.read(READ_CHUNK_BYTES)
    except (EOFError, gzip.BadGzipFile, zlib.error) as error:
        raise TextFileError(f"The {what} {name} is not a whole gzip file ({error}); download or decompress it "
                            "again.") from None
    except OSError as error:
        raise TextFileError(f"The {what} {name} cannot be read: {error.strerror or error}.") from None
    return chunk.encode("utf-8", "surrogateescape") if isinstance(chunk, str) else bytes(chunk)


def text_lines(path_or_stream, what: str = "input file") -> Iterator[str]:
    """The lines of a UTF-8 text file (gzip'd or not) or binary/text stream, one at a time, as `wc -l` and every
    editor count them: split on "\\n" only, a "\\r\\n" ending removed with it, a lone "\\r" (and "\\x0c", U+2028,
    U+0085, ...) kept inside its line, a leading byte-order mark removed; the last line needs no "\\n".

    Raises `TextFileError` (one line naming the file, `what` naming the input: "The train source file data/x.en
    ...") for a missing file, a folder, a read error, a truncated or corrupt gzip file, or bytes that are not UTF-8
    (naming the byte's offset in the uncompressed text, and how to convert it). Memory: one chunk of the file."""
    name, owned, stream = _open(path_or_stream, what)
    try:
        offset, rest, head = 0, b"", None
        while True:
            chunk = _read_chunk(stream, name, what)
            if head is None:
                head = chunk[:2]
                if chunk.startswith(BOM):
                    chunk, offset = chunk[len(BOM):], len(BOM)
            data = rest + chunk
            end = data.rfind(b"\n") + 1 if chunk else len(data)  # whole lines; at the end, what is left
            whole, rest = data[:end], data[end:]
            try:
                text = whole.decode("utf-8")
            except UnicodeDecodeError as error:
                hint = (" (it looks like UTF-16: convert it with iconv -f UTF-16 -t UTF-8)"
                        if head in (b"\xff\xfe", b"\xfe\xff") else
                        "; convert it to UTF-8 (e.g. iconv -f latin1 -t UTF-8)")
                raise TextFileError(f"The {what} {name} is not UTF-8 text: byte {offset + error.start} "
                                    f"(0x{whole[error.start]:02x}) cannot be decoded{hint}.") from None
            offset += len(whole)
            if text:
                lines = text.split("\n")
                if lines[-1] == "":
                    lines.pop()  # the "\n" ending the last line starts no new one
                for line in lines:
                    yield line.removesuffix("\r")
            if not chunk:
                return
    finally:
        if owned is not None:
            owned.close()


def count_text_lines(path, what: str = "input file") -> int:
    """How many lines `text_lines` finds in the file `path` (gzip'd or not), counted in chunks without decoding (a
    progress bar's total): its "\\n"s, and one more when the last line has none."""
    count, last = 0, b"\n"
    with open_text_file(path, what) as stream:
        while chunk := _read_chunk(stream, os.fspath(path), what):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_text_lines(path_or_stream, what: str = "input file") -> list[str]:
    """Every line of a text file or stream, as `text_lines` reads them (and with its errors)."""
    return list(text_lines(path_or_stream, what))


__all__ = ["BOM", "count_text_lines", "open_text_file", "read_text_lines", "text_lines"]
