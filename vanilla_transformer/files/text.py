"""Reading text line by line, as `wc -l` and every editor count lines (training data, `translate --input`)."""

import os
import sys

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


__all__ = ["BOM", "read_text_lines"]
