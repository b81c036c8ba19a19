"""Reading text line by line, as `wc -l` and every editor count lines: the one line reader of the package (training
data of any size, plain or gzip'd, bzip2'd or xz'd, the tokenizer's training files, `translate --input`).

A file is read in chunks of `READ_CHUNK_BYTES`, decoded a whole number of lines at a time, so that a corpus of any
size streams through in constant memory; `read_text_lines` collects the lines of a small file into a list.
"""

import bz2
import gzip
import lzma
import os
import stat
import sys
import zlib
from collections.abc import Iterator
from typing import BinaryIO

from vanilla_transformer.files.errors import TextFileError

BOM = b"\xef\xbb\xbf"
GZIP_MAGIC = b"\x1f\x8b"
READ_CHUNK_BYTES = 1 << 22

# Compressed files told by their first bytes, whatever their names: (magic, name, opener over a binary stream).
# bzip2's magic is "BZh", the block size digit and the first block's own magic (pi in BCD), so no text is taken for it.
COMPRESSIONS = (
    (GZIP_MAGIC, "gzip", lambda stream: gzip.GzipFile(fileobj=stream, mode="rb")),
    (b"\xfd7zXZ\x00", "xz", lambda stream: lzma.LZMAFile(stream, "rb")),
    (b"BZh", "bzip2", lambda stream: bz2.BZ2File(stream, "rb")),
)
# Formats Python does not read: what to run first.
FOREIGN_FORMATS = (
    (b"\x28\xb5\x2f\xfd", "zstd-compressed", "decompress it first: zstd -d FILE"),
    (b"\x04\x22\x4d\x18", "lz4-compressed", "decompress it first: lz4 -d FILE"),
    (b"PK\x03\x04", "a zip archive", "unzip it first"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive", "extract it first: 7z x FILE"),
    (b"\x1f\x9d", "compress'd (.Z)", "decompress it first: uncompress FILE"),
)
MAGIC_BYTES = 10


def _is_bzip2(head: bytes) -> bool:
    return head[:3] == b"BZh" and head[3:4].isdigit() and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90")


def reads_once(path) -> bool:
    """Is `path` something that can be read only once: a pipe, a FIFO, process substitution (/dev/fd/N),
    /dev/stdin, a socket or a character device, anything but a regular file? Such an input is read in one pass,
    never opened twice (a second open would lose what the first one buffered, or wait for a writer that is gone)."""
    try:
        return not stat.S_ISREG(os.stat(os.fspath(path)).st_mode)
    except OSError:
        return False


def is_stream(path) -> bool:
    """Is `path` an existing device, FIFO or socket, or a link to one (/dev/null, /dev/stdout, a named pipe): what
    `reads_once` says of everything but a regular file, folders left out? Such an output is written into, never
    staged and renamed over (that would put a regular file in its place), and such an input cannot be read twice."""
    return reads_once(path) and not os.path.isdir(os.fspath(path))


class OpenedText:
    """A text input opened once: its decompressed bytes (`read`), what it is (`compression`), and the status
    (`os.fstat`) of the file that was opened, which names it in the corpus cache. Closed by `close` or `with`."""

    def __init__(self, name: str, file: BinaryIO, stream, compression: str | None, status):
        self.name, self.file, self.stream, self.compression, self.status = name, file, stream, compression, status

    def read(self, size: int = -1) -> bytes:
        return self.stream.read(size)

    def close(self) -> None:
        if self.stream is not self.file:
            self.stream.close()
        self.file.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _head(stream) -> bytes:
    """The first bytes of a buffered binary stream, left in it (`peek`; a pipe may give fewer than asked)."""
    if hasattr(stream, "peek"):
        return stream.peek(MAGIC_BYTES)[:MAGIC_BYTES]
    return b""


def _decompressed(stream, name: str, what: str):
    """-> (the stream of decompressed bytes, the compression's name or None) for the binary `stream`, told by its
    first bytes. A format Python does not read is one `TextFileError` line saying what to run first."""
    head = _head(stream)
    for magic, kind, opener in COMPRESSIONS:
        if head.startswith(magic) and (kind != "bzip2" or _is_bzip2(head)):
            return opener(stream), kind
    for magic, kind, advice in FOREIGN_FORMATS:
        if head.startswith(magic):
            raise TextFileError(f"The {what} {name} is {kind}, which is not read as text: {advice}.")
    return stream, None


def open_text(path, what: str = "input file") -> OpenedText:
    """Open the file `path` once: its bytes, decompressed where it is gzip'd, bzip2'd or xz'd (told by its first
    bytes, whatever its name). Raises `TextFileError` (one line naming the file) for a missing file, a folder, a file
    that cannot be opened, or a compressed format Python does not read (zstd, lz4, zip, 7z: with the command that
    decompresses it)."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise TextFileError(f"The {what} {path} does not exist.")
    if os.path.isdir(path):
        raise TextFileError(f"The {what} {path} is a folder, not a file.")
    try:
        file = open(path, "rb")
    except OSError as error:
        raise TextFileError(f"The {what} {path} cannot be read: {error.strerror}.") from None
    try:
        stream, compression = _decompressed(file, path, what)
        return OpenedText(path, file, stream, compression, os.fstat(file.fileno()))
    except OSError as error:
        file.close()
        raise TextFileError(f"The {what} {path} cannot be read: {error.strerror or error}.") from None
    except BaseException:
        file.close()
        raise


def open_text_file(path, what: str = "input file") -> OpenedText:
    """`open_text`: the bytes of the file `path`, decompressed where it is compressed; opened once."""
    return open_text(path, what)


def _open(path_or_stream, what: str) -> tuple[str, object, object, str | None]:
    """-> (the name messages give the input, what to close when done or None, the stream to read, compression)."""
    if isinstance(path_or_stream, OpenedText):
        return path_or_stream.name, path_or_stream, path_or_stream.stream, path_or_stream.compression
    if isinstance(path_or_stream, (str, bytes, os.PathLike)):
        opened = open_text(path_or_stream, what)
        return os.fsdecode(path_or_stream), opened, opened.stream, opened.compression
    stream = path_or_stream
    name = getattr(stream, "name", "<stream>")
    name = "standard input" if name == "<stdin>" or stream is sys.stdin else str(name)
    # a text stream (sys.stdin): read its bytes, not its decoding
    stream = getattr(stream, "buffer", None) or stream
    decompressed, compression = _decompressed(stream, name, what)  # compressed pipes need no zcat
    return name, None, decompressed, compression


def _read_chunk(stream, name: str, what: str, compression: str | None = None) -> bytes:
    try:
        chunk = stream.read(READ_CHUNK_BYTES)
    except (EOFError, gzip.BadGzipFile, zlib.error, lzma.LZMAError) as error:
        raise TextFileError(f"The {what} {name} is not a whole {compression or 'gzip'} file ({error}); download or "
                            "decompress it again.") from None
    except OSError as error:
        if compression is not None and error.errno is None:  # bz2's "Invalid data stream"
            raise TextFileError(f"The {what} {name} is not a whole {compression} file ({error}); download or "
                                "decompress it again.") from None
        raise TextFileError(f"The {what} {name} cannot be read: {error.strerror or error}.") from None
    return chunk.encode("utf-8", "surrogateescape") if isinstance(chunk, str) else bytes(chunk)


UTF16_HINT = " (it looks like UTF-16: convert it with iconv -f UTF-16 -t UTF-8)"
UTF32_HINT = " (it looks like UTF-32: convert it with iconv -f UTF-32 -t UTF-8)"
BINARY_HINT = " (it holds NUL bytes: it looks like a binary file, not text)"
LATIN1_HINT = "; convert it to UTF-8 (e.g. iconv -f latin1 -t UTF-8 for Latin-1 text)"
SAMPLE_BYTES = 4096


def _nul_share(data: bytes) -> float:
    return data.count(0) / len(data) if data else 0.0


def _unicode_form(head: bytes, strict: bool) -> str | None:
    """"UTF-16" or "UTF-32" when the first bytes are text in that form: a byte-order mark, or NULs where that form
    puts them and nowhere else. UTF-32 holds each character in 4 bytes whose highest is always 0 (and the next one for
    any character below U+10000), the lowest rarely; UTF-16 in 2 bytes whose high byte is 0 for ASCII and Latin-1, the
    low byte rarely. A binary file (a program, an image, a file of zeros) has its NULs at every position, so it is none
    of them. `strict`: the NULs must also be dense (a third of their positions or more, as ASCII text in UTF-16 makes
    them), for text that is valid UTF-8 apart from them; otherwise two NULs, all on one side, suffice (a hint for bytes
    that are no UTF-8 anyway: text in UTF-16 of a script without ASCII has a NUL at each newline only)."""
    if head.startswith((b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff")):
        return "UTF-32"
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return "UTF-16"
    sample = head[:SAMPLE_BYTES]
    quarters = [_nul_share(sample[: len(sample) // 4 * 4][i::4]) for i in range(4)]
    if len(sample) >= 8 and ((min(quarters[2:]) >= 0.9 and quarters[0] <= 0.1)  # little-endian: the high bytes last
                             or (min(quarters[:2]) >= 0.9 and quarters[3] <= 0.1)):
        return "UTF-32"
    pairs = sample[: len(sample) // 2 * 2]
    if len(pairs) < 4:
        return None
    even, odd = pairs[0::2].count(0), pairs[1::2].count(0)
    high, low = max(even, odd), min(even, odd)
    dense = high * 3 >= len(pairs) // 2
    if high >= 2 and low * 10 <= high and (dense or not strict):
        return "UTF-16"
    return None


def _full_of_nuls(head: bytes) -> bool:
    """A NUL in at least a third of the even or of the odd bytes: ASCII text in UTF-16, or a binary file."""
    sample = head[:SAMPLE_BYTES]
    return len(sample) >= 4 and max(sample[0::2].count(0), sample[1::2].count(0)) * 3 >= len(sample) // 2


def _looks_like_utf16_or_32(head: bytes) -> bool:
    """Text in UTF-16 or UTF-32 (`_unicode_form`, strict)."""
    return _unicode_form(head, strict=True) is not None


def _nul_hint(head: bytes, strict: bool) -> str:
    form = _unicode_form(head, strict)
    return UTF32_HINT if form == "UTF-32" else UTF16_HINT if form == "UTF-16" else BINARY_HINT


def _decoding_hint(head: bytes) -> str:
    if _unicode_form(head, strict=False) is not None or b"\x00" in head[:SAMPLE_BYTES]:
        return _nul_hint(head, strict=False)
    return LATIN1_HINT


def text_lines(path_or_stream, what: str = "input file", digest=None) -> Iterator[str]:
    """The lines of a UTF-8 text file (plain, gzip'd, bzip2'd or xz'd) or binary/text stream, one at a time, as
    `wc -l` and every editor count them: split on "\\n" only, a "\\r\\n" ending removed with it, a lone "\\r"
    (and "\\x0c", U+2028, U+0085, ...) kept inside its line, a leading byte-order mark removed; the last line needs
    no "\\n". The input is opened once (an `OpenedText` from `open_text` is read and closed), so a pipe loses
    nothing. `digest` (a hashlib object), if given, is updated with every decompressed byte read.

    Raises `TextFileError` (one line naming the file, `what` naming the input: "The train source file data/x.en
    ...") for a missing file, a folder, a read error, a truncated or corrupt compressed file, text in UTF-16 or
    UTF-32, or bytes that are not UTF-8 (naming the byte's offset in the uncompressed text, and how to convert it).
    Memory: one chunk of the file."""
    name, owned, stream, compression = _open(path_or_stream, what)
    try:
        offset, rest, head = 0, b"", None
        while True:
            chunk = _read_chunk(stream, name, what, compression)
            if digest is not None:
                digest.update(chunk)
            if head is None:
                head = chunk[:4096]
                # valid UTF-8 full of NULs (no byte-order mark, which is no UTF-8): UTF-16 or UTF-32, or binary
                if (b"\x00" in head and not head.startswith((b"\xff\xfe", b"\xfe\xff"))
                        and (_full_of_nuls(head) or _looks_like_utf16_or_32(head))):
                    raise TextFileError(f"The {what} {name} is not UTF-8 text: byte {head.index(0)} (0x00) is a "
                                        f"NUL{_nul_hint(head, strict=True)}.")
                if chunk.startswith(BOM):
                    chunk, offset = chunk[len(BOM):], len(BOM)
            data = rest + chunk
            end = data.rfind(b"\n") + 1 if chunk else len(data)  # whole lines; at the end, what is left
            whole, rest = data[:end], data[end:]
            try:
                text = whole.decode("utf-8")
            except UnicodeDecodeError as error:
                raise TextFileError(f"The {what} {name} is not UTF-8 text: byte {offset + error.start} "
                                    f"(0x{whole[error.start]:02x}) cannot be decoded{_decoding_hint(head)}.") from None
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


def count_text_lines(path, what: str = "input file") -> int | None:
    """How many lines `text_lines` finds in the file `path` (compressed or not), counted in chunks without decoding
    (a progress bar's total): its "\\n"s, and one more when the last line has none. None for an input that can be
    read only once (`reads_once`: a pipe), which counting would consume."""
    if reads_once(path):
        return None
    count, last = 0, b"\n"
    with open_text(path, what) as opened:
        while chunk := _read_chunk(opened.stream, os.fspath(path), what, opened.compression):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (last != b"\n")


def read_text_lines(path_or_stream, what: str = "input file") -> list[str]:
    """Every line of a text file or stream, as `text_lines` reads them (and with its errors)."""
    return list(text_lines(path_or_stream, what))


__all__ = ["BOM", "OpenedText", "count_text_lines", "is_stream", "open_text", "open_text_file", "read_text_lines",
           "reads_once", "text_lines"]
