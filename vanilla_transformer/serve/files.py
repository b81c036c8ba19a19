"""LibreTranslate's file translation: POST /translate_file takes a .txt or .html file and answers the URL of its
translation, which GET /download_file/NAME serves.

A file is read as UTF-8 text (a byte order mark is dropped) and translated as a request's text would be: a .txt
file as `format=text` (each line on its own, its line breaks and spacing kept), an .html file as `format=html`
(the text nodes translated, the markup kept byte for byte). The translations live in a folder the server makes for
itself when it starts and removes when it stops (`TranslatedFiles`; with `--workers`, one folder for all the
workers), under a name no one can guess (a random 128-bit hex, then the file's name made safe), for `KEEP_S`
seconds, at most `MOST_FILES` at a time (the oldest go first): a download link is for the client that asked, soon
after it asked.
"""

import os
import re
import secrets
import shutil
import tempfile
import threading
import time

from vanilla_transformer.serve.protocol import ApiError

FORMATS = {".txt": "text", ".html": "html", ".htm": "html"}
KEEP_S = 30 * 60.0
MOST_FILES = 1000
_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
STORED_NAME = re.compile(r"[0-9a-f]{32}\.[A-Za-z0-9._-]{1,100}")
MEDIA_TYPES = {"text": "text/plain; charset=utf-8", "html": "text/html; charset=utf-8"}


def file_format(filename: str) -> str:
    """"text" or "html" for a file name of `FORMATS`; an `ApiError` (400) for any other."""
    extension = os.path.splitext(filename)[1].lower()
    if extension not in FORMATS:
        shown = extension if extension.isascii() and extension.isprintable() and len(extension) <= 20 else "its"
        raise ApiError(400, f"Invalid request: file format not supported ({shown or 'no'} extension; this server "
                            f"translates {', '.join(sorted(set(FORMATS) - {'.htm'}))} files)")
    return FORMATS[extension]


def safe_name(filename: str) -> str:
    """`filename` without its folders, each run of characters other than letters, digits, ".", "_" and "-"
    replaced by "_", no leading dots, at most 100 characters with its extension kept."""
    name = _UNSAFE.sub("_", filename.replace("\\", "/").rsplit("/", 1)[-1]).lstrip(".") or "file"
    stem, extension = os.path.splitext(name)
    return stem[: 100 - len(extension)] + extension if len(name) > 100 else name


def read_text(data: bytes) -> str:
    """The file's bytes as text; an `ApiError` (400) for bytes that are not UTF-8 or hold a NUL (binary)."""
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        raise ApiError(400, f"Invalid request: the file is not UTF-8 text (byte {error.start} cannot be "
                            "decoded)") from None
    if "\0" in text:
        raise ApiError(400, "Invalid request: the file holds NUL characters: it is not a text file")
    return text


class TranslatedFiles:
    """The translated files of a running server, in a folder: its own (`open` makes it, `close` removes it), or
    `folder`, shared by the worker processes of `--workers` (their supervisor makes and removes it). What is kept is
    read from the folder itself (each file's modification time), so that any worker serves any worker's file."""

    def __init__(self, folder: str | None = None, keep_s: float = KEEP_S, most_files: int = MOST_FILES):
        self.keep_s, self.most_files = keep_s, most_files
        self.shared = folder
        self.folder: str | None = None
        self._lock = threading.Lock()

    def open(self) -> None:
        self.folder = self.shared if self.shared is not None else tempfile.mkdtemp(prefix="vanilla-transformer-files-")

    def close(self) -> None:
        if self.folder is not None and self.shared is None:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None

    def store(self, filename: str, text: str) -> str:
        """Write `text` (UTF-8) as a translation of `filename`; returns the name to download it by."""
        name = f"{secrets.token_hex(16)}.{safe_name(filename)}"
        path = os.path.join(self.folder, name)
        partial = os.path.join(self.folder, f".{name}.partial")
        with open(partial, "w", encoding="utf-8", newline="") as f:
            f.write(text)
        os.replace(partial, path)  # a download finds the whole file or none
        with self._lock:
            self._expire()
        return name

    def _expire(self) -> None:
        """Remove the files older than `keep_s`, and the oldest beyond `most_files`."""
        stored = []
        for entry in os.scandir(self.folder):
            try:
                stored.append((entry.stat().st_mtime, entry.name))
            except OSError:  # removed meanwhile by another worker
                continue
        stored.sort()
        now = time.time()
        for position, (modified, name) in enumerate(stored):
            if now - modified <= self.keep_s and len(stored) - position <= self.most_files:
                break
            try:
                os.remove(os.path.join(self.folder, name))
            except OSError:
                pass

    def path(self, name: str) -> str | None:
        """The file stored as `name`, or None (an unknown, expired or malformed name)."""
        if not STORED_NAME.fullmatch(name) or self.folder is None:
            return None
        path = os.path.join(self.folder, name)
        try:
            modified = os.stat(path).st_mtime
        except OSError:
            return None
        return path if time.time() - modified <= self.keep_s else None

    @staticmethod
    def download_name(name: str) -> str:
        """The name the client saves the file as: the stored name without its random part."""
        return name.split(".", 1)[1]


__all__ = ["FORMATS", "MEDIA_TYPES", "TranslatedFiles", "file_format", "read_text", "safe_name"]
