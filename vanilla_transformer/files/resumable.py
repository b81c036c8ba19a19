"""An output file written chunk by chunk that a killed run continues: `translate --input big.en --output big.de`.

The lines go to `OUT.partial`; after each chunk the file is flushed to disk, and then `OUT.progress.json` records how
many input lines are done, how many bytes of `OUT.partial` hold them, which input they came from (its path, size,
modification time, inode) and a digest of the options that made them. A run with the same input and options finds
the record, cuts `OUT.partial` back to the recorded bytes (a chunk written after the last record is written again)
and continues after the recorded lines; a changed input or other options are refused in one line, or started again
with `--overwrite`. `OUT` itself appears only when every line is done, by renaming the finished `OUT.partial`: a
file named `OUT` is always whole. An output named `*.gz` is gzip'd, one gzip member per chunk (a valid gzip file at
every record; `gzip -d` and Python read the members as one text).

Nothing is removed that this module did not make: an `OUT.partial` without a record beside it (not ours) is refused,
a record that is not ours too. One run at a time writes an output (a lock on `OUT.partial`).
"""

import contextlib
import fcntl
import gzip
import hashlib
import json
import os

from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.paths import check_output_file
from vanilla_transformer.files.staging import fsync_folder
from vanilla_transformer.files.write_errors import writing_errors

PARTIAL_SUFFIX = ".partial"
PROGRESS_SUFFIX = ".progress.json"
RECORD_FORMAT = "vanilla-transformer resumable output"


def file_identity(path) -> dict:
    """What tells a file from a changed one without reading it: its real path, size, modification time, inode."""
    info = os.stat(path)
    return {"path": os.path.realpath(path), "size": info.st_size, "mtime_ns": info.st_mtime_ns,
            "inode": info.st_ino, "device": info.st_dev}


def options_digest(options: dict) -> str:
    """SHA-256 of the options (a JSON-able dict), in a stable order."""
    return hashlib.sha256(json.dumps(options, sort_keys=True, default=str).encode()).hexdigest()


class ResumableOutput:
    """`path` written in appended chunks of lines, resumable after a kill (see the module's docstring).

        output = ResumableOutput(args.output, source=args.input, options={...}, overwrite=args.overwrite)
        done = output.check()            # lines already done (0 for a new run); OutputError when refused
        with output:                     # the lock; OUT.partial cut back to the record
            for lines in chunks_after(done):
                output.append(lines)     # on disk, then recorded
            output.finish()              # OUT.partial renamed to OUT
    """

    def __init__(self, path, *, source, options: dict, overwrite: bool = False, inputs=(), what: str = "--output"):
        self.shown = os.fspath(path)
        self.path = os.path.realpath(self.shown)  # a link's target is replaced when whole, the link kept
        self.partial = self.path + PARTIAL_SUFFIX
        self.record_path = self.path + PROGRESS_SUFFIX
        self.source = os.fspath(source)
        self.digest = options_digest(options)
        self.overwrite, self.inputs, self.what = overwrite, [*inputs, source], what
        self.gzip = self.path.endswith(".gz")
        self.lines = self.bytes = 0
        self.fd = None

    # ------------------------------------------------------------------------------------------------------------
    # before any work

    def check(self) -> int:
        """How many input lines an interrupted run already did (0: none, or started again with `overwrite`); raises
        `OutputError` (one line) for an output that cannot be written, another program's `OUT.partial`, a changed
        input or other options (without `overwrite`)."""
        check_output_file(self.shown, inputs=self.inputs, what=self.what, overwrite=self.overwrite)
        for path in (self.partial, self.record_path):  # not the input either (whether they exist is seen below)
            check_output_file(path, inputs=self.inputs, what=self.what, overwrite=True)
        record = self._read_record()
        partial_size = os.path.getsize(self.partial) if os.path.isfile(self.partial) else None
        if record is None:
            if partial_size:
                raise OutputError(f"{self.what} {self.shown}: {self.partial} exists and no interrupted run of this "
                                  f"command made it (there is no {os.path.basename(self.record_path)}); move it "
                                  "away, or choose another output.")
            self.lines = self.bytes = 0
            return 0
        problem = None
        if record["input"] != file_identity(self.source):
            problem = f"--input {self.source} changed since (its size, time or inode)"
        elif record["options"] != self.digest:
            problem = "it was started with other options (or another model)"
        elif partial_size is None or partial_size < record["bytes"]:
            problem = f"{self.partial} is missing or shorter than recorded"
        if problem is None:
            self.lines, self.bytes = record["lines"], record["bytes"]
            return self.lines
        if not self.overwrite:
            raise OutputError(f"{self.what} {self.shown}: an interrupted run left {record['lines']} lines in "
                              f"{self.partial}, but {problem}; run it again as it was to continue, or give "
                              "--overwrite to start again.")
        self.lines = self.bytes = 0
        return 0

    def _read_record(self) -> dict | None:
        if not os.path.lexists(self.record_path):
            return None
        try:
            with open(self.record_path, encoding="utf-8") as f:
                record = json.load(f)
            if record.get("format") != RECORD_FORMAT:
                raise ValueError("not a record of this project")
            if not (isinstance(record["lines"], int) and isinstance(record["bytes"], int)
                    and isinstance(record["input"], dict) and isinstance(record["options"], str)):
                raise ValueError("not a record of this project")
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            raise OutputError(f"{self.what} {self.shown}: {self.record_path} is not a progress record of this "
                              "command; move it away, or choose another output.") from None
        return record

    # ------------------------------------------------------------------------------------------------------------
    # writing

    def __enter__(self) -> "ResumableOutput":
        with writing_errors(self.shown):
            fd = os.open(self.partial, os.O_RDWR | os.O_CREAT, 0o666)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputError(f"{self.what} {self.shown} is being written by another run ({self.partial} is "
                                  "locked); wait for it to finish, or choose another output.") from None
            self.fd = fd
            os.ftruncate(fd, self.bytes)  # a chunk written after the last record goes again
            os.lseek(fd, self.bytes, os.SEEK_SET)
            self._write_record()
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # the lock goes with it
            self.fd = None

    def append(self, lines: list[str]) -> None:
        """Add `lines` (each written with a "\\n"), flush them to disk, then record them as done: one input line
        each."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if self.gzip:
            data = gzip.compress(data, compresslevel=6, mtime=0)  # one member per chunk
        with writing_errors(self.shown):
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
            self.lines += len(lines)
            self.bytes += len(data)
            self._write_record()

    def _write_record(self) -> None:
        record = {"format": RECORD_FORMAT, "lines": self.lines, "bytes": self.bytes,
                  "input": file_identity(self.source), "options": self.digest}
        staging = os.path.join(os.path.dirname(self.record_path), f".{os.path.basename(self.record_path)}.tmp")
        with open(staging, "w", encoding="utf-8") as f:
            json.dump(record, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(staging, self.record_path)
        fsync_folder(os.path.dirname(self.path))

    def finish(self) -> None:
        """Every line is done: `OUT.partial` becomes `OUT` (checked again: nothing may have taken its place without
        `overwrite`), and the record goes."""
        check_output_file(self.shown, inputs=self.inputs, what=self.what, overwrite=self.overwrite)
        with writing_errors(self.shown):
            os.replace(self.partial, self.path)
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.record_path)
            fsync_folder(os.path.dirname(self.path))


__all__ = ["PARTIAL_SUFFIX", "PROGRESS_SUFFIX", "ResumableOutput", "file_identity", "options_digest"]
