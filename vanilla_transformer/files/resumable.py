"""An output file written chunk by chunk that a killed run continues: `translate --input big.en --output big.de`.

The lines go to `OUT.partial`; after each chunk the file is flushed to disk, and then `OUT.progress.json` records how
many input lines are done, how many bytes of `OUT.partial` hold them and their SHA-256, which input they came from
(its path, size, modification time, inode, as the run found it before reading) and a digest of the options that made
them. A run with the same input and options finds the record, checks that `OUT.partial` still holds the recorded
lines (as many, the same bytes: an edited file would misalign every line after it), cuts it back to the recorded
bytes (a chunk written after the last record is written again) and continues after the recorded lines; a changed
input, other options or a changed `OUT.partial` are refused in one line, or started again with `--overwrite`. A
record of 0 lines holds nothing to lose: a changed input or other options simply start again. `OUT` itself appears
only when every line is done, by renaming the finished `OUT.partial`: a file named `OUT` is always whole. An output
named `*.gz` is gzip'd, one gzip member per chunk (a valid gzip file at every record; `gzip -d` and Python read the
members as one text).

A run that stops (an error, Ctrl-C) before any line is recorded removes the `OUT.partial` and the record it created
itself, so that an input it could not read leaves nothing behind; what an earlier run left is never removed. Every
error writing the output's files is one line naming the output the user gave (`writing_errors`).

Nothing is removed that this module did not make: an `OUT.partial` without a record beside it (not ours) is refused,
a record that is not ours too. One run at a time writes an output (a lock on `OUT.partial`).
"""

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import stat
import sys
import zlib

from vanilla_transformer.files.errors import OutputError
from vanilla_transformer.files.paths import check_output_file
from vanilla_transformer.files.staging import fsync_folder
from vanilla_transformer.files.write_errors import writing_errors

PARTIAL_SUFFIX = ".partial"
PROGRESS_SUFFIX = ".progress.json"
RECORD_FORMAT = "vanilla-transformer resumable output"
READ_BYTES = 1 << 22


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
        self.sha256 = hashlib.sha256()  # of the recorded bytes of OUT.partial
        self.identity = None  # the input as this run found it, before reading it: what the record says it read
        self.verified = None  # the status of OUT.partial when `check` found its recorded bytes as recorded
        self.made = []  # OUT.partial and the record, where this run created them
        self.fd = None

    def _writing(self):
        """Every system call of this class's writing blocks is on the output's own files: any OSError there is one
        line naming the user's path."""
        return writing_errors(self.shown, owned=(self.partial, self.record_path), every_os_error=True)

    # ------------------------------------------------------------------------------------------------------------
    # before any work

    def check(self) -> int:
        """How many input lines an interrupted run already did (0: none, or started again with `overwrite`); raises
        `OutputError` (one line) for an output that cannot be written, another program's `OUT.partial`, a changed
        input, other options or an `OUT.partial` changed since it was recorded (without `overwrite`)."""
        check_output_file(self.shown, inputs=self.inputs, what=self.what, overwrite=self.overwrite)
        for path in (self.partial, self.record_path):  # not the input either (whether they exist is seen below)
            check_output_file(path, inputs=self.inputs, what=self.what, overwrite=True)
        if os.path.lexists(self.partial) and not stat.S_ISREG(os.lstat(self.partial).st_mode):
            raise OutputError(f"{self.what} {self.shown}: {self.partial} exists and is not a file this command "
                              "wrote (a folder, a link or a device); move it away, or choose another output.")
        record = self._read_record()
        self.identity = file_identity(self.source)
        # what an earlier `check` of this output read back: the same file, unchanged, is not read again
        earlier = (self.verified, self.bytes, self.sha256)
        self.lines = self.bytes = 0
        self.sha256, self.verified = hashlib.sha256(), None
        partial_size = os.path.getsize(self.partial) if os.path.isfile(self.partial) else None
        if record is None:
            if partial_size:
                raise OutputError(f"{self.what} {self.shown}: {self.partial} exists and no interrupted run of this "
                                  f"command made it (there is no {os.path.basename(self.record_path)}); move it "
                                  "away, or choose another output.")
            return 0
        if record["lines"] == 0:  # nothing done, nothing to lose: whatever changed, the run starts again
            return 0
        problem, advice = None, "run it again as it was to continue, or give --overwrite to start again"
        if record["input"] != self.identity:
            problem = f"--input {self.source} changed since (its size, time or inode)"
        elif record["options"] != self.digest:
            problem = "it was started with other options (or another model)"
        elif partial_size is None or partial_size < record["bytes"]:
            problem = f"{self.partial} is missing or shorter than recorded"
        elif earlier[:2] == (_status_key(os.stat(self.partial)), record["bytes"]) and (
                record.get("sha256") in (None, earlier[2].hexdigest())):
            self.sha256, self.verified = earlier[2], earlier[0]
        else:
            problem = self._recorded_part_problem(record)
            advice = "move it away to keep it, or give --overwrite to start again"
        if problem is None:
            self.lines, self.bytes = record["lines"], record["bytes"]
            return self.lines
        if not self.overwrite:
            raise OutputError(f"{self.what} {self.shown}: an interrupted run left {record['lines']} lines in "
                              f"{self.partial}, but {problem}; {advice}.")
        self.sha256, self.verified = hashlib.sha256(), None
        return 0

    def _recorded_part_problem(self, record: dict) -> str | None:
        """Why the first `record["bytes"]` bytes of OUT.partial are not the recorded lines (a line count other than
        the record's, a last line cut, gzip members broken, another SHA-256), or None; then `sha256` holds their
        digest, to go on with, and `verified` the status of the file it was read from."""
        digest, newlines, last, pending = hashlib.sha256(), 0, b"\n", False
        inflate = zlib.decompressobj(wbits=31) if self.gzip else None
        changed = f"{self.partial} was changed since it was recorded"
        try:
            with open(self.partial, "rb") as f:
                status = os.fstat(f.fileno())
                left = record["bytes"]
                while left > 0:
                    data = f.read(min(left, READ_BYTES))
                    if not data:
                        return f"{self.partial} is shorter than recorded"
                    left -= len(data)
                    digest.update(data)
                    while data and inflate is not None:  # one gzip member per chunk
                        pending = True
                        text = inflate.decompress(data)
                        newlines, last = newlines + text.count(b"\n"), text[-1:] or last
                        data = b""
                        if inflate.eof:
                            data, pending = inflate.unused_data, False
                            inflate = zlib.decompressobj(wbits=31)
                    if data:
                        newlines, last = newlines + data.count(b"\n"), data[-1:]
        except OSError as error:
            return f"{self.partial} cannot be read back ({error.strerror or error})"
        except zlib.error:
            return f"{changed} (it is no longer the gzip data that was written)"
        if pending or last != b"\n":
            return f"{changed} (its recorded part no longer ends with a whole line)"
        if newlines != record["lines"]:
            return (f"{changed} (its first {record['bytes']:,} bytes held the {record['lines']:,} recorded lines, "
                    f"and now hold {newlines:,})")
        if record.get("sha256") not in (None, digest.hexdigest()):
            return f"{changed} (its recorded lines are no longer the same bytes)"
        self.sha256, self.verified = digest, _status_key(status)
        return None

    def _read_record(self) -> dict | None:
        if not os.path.lexists(self.record_path):
            return None
        try:
            with open(self.record_path, encoding="utf-8") as f:
                record = json.load(f)
            if record.get("format") != RECORD_FORMAT:
                raise ValueError("not a record of this project")
            if not (isinstance(record["lines"], int) and isinstance(record["bytes"], int)
                    and isinstance(record["input"], dict) and isinstance(record["options"], str)
                    and isinstance(record.get("sha256", ""), str) and record["lines"] >= 0 and record["bytes"] >= 0):
                raise ValueError("not a record of this project")
        except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError):
            raise OutputError(f"{self.what} {self.shown}: {self.record_path} is not a progress record of this "
                              "command; move it away, or choose another output.") from None
        return record

    # ------------------------------------------------------------------------------------------------------------
    # writing

    def __enter__(self) -> "ResumableOutput":
        if self.identity is None:
            self.identity = file_identity(self.source)
        made_record = not os.path.lexists(self.record_path)
        with self._writing():
            try:  # O_EXCL: was it this run that made it (and may remove it)?
                fd = os.open(self.partial, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
                self.made = [self.partial]
            except FileExistsError:
                fd = os.open(self.partial, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
                self.made = []
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                raise OutputError(f"{self.what} {self.shown} is being written by another run ({self.partial} is "
                                  "locked); wait for it to finish, or choose another output.") from None
            self.fd = fd
        try:
            if self.bytes and self.verified != _status_key(os.fstat(fd)):  # changed between `check` and the lock
                problem = self._recorded_part_problem({"lines": self.lines, "bytes": self.bytes,
                                                       "sha256": self.sha256.hexdigest()})
                if problem is not None:
                    raise OutputError(f"{self.what} {self.shown}: an interrupted run left {self.lines} lines in "
                                      f"{self.partial}, but {problem}; move it away to keep it, or give --overwrite "
                                      "to start again.")
            with self._writing():
                os.ftruncate(fd, self.bytes)  # a chunk written after the last record goes again
                os.lseek(fd, self.bytes, os.SEEK_SET)
                if made_record:
                    self.made.append(self.record_path)
                self._write_record()
        except BaseException:
            self.__exit__(*sys.exc_info())
            raise
        return self

    def __exit__(self, *exc) -> None:
        """The lock goes. A run stopped (an error, Ctrl-C) before any line was recorded leaves nothing of its own
        behind: the OUT.partial and record it created are removed (nothing in them is worth keeping), the partial
        first, so that no moment has a partial without its record."""
        if self.fd is None:
            return
        try:
            if exc[0] is not None and self.lines == 0:
                for path in self.made:
                    with contextlib.suppress(OSError):
                        os.remove(path)
                self.made = []
                fsync_folder(os.path.dirname(self.path))
        finally:
            os.close(self.fd)  # the lock goes with it
            self.fd = None

    def append(self, lines: list[str]) -> None:
        """Add `lines` (each written with a "\\n"), flush them to disk, then record them as done: one input line
        each."""
        data = "".join(line + "\n" for line in lines).encode("utf-8")
        if self.gzip:
            data = gzip.compress(data, compresslevel=6, mtime=0)  # one member per chunk
        with self._writing():
            view = memoryview(data)
            while view:
                view = view[os.write(self.fd, view):]
            os.fsync(self.fd)
            self.lines += len(lines)
            self.bytes += len(data)
            self.sha256.update(data)
            self._write_record()

    def _write_record(self) -> None:
        record = {"format": RECORD_FORMAT, "lines": self.lines, "bytes": self.bytes,
                  "sha256": self.sha256.hexdigest(), "input": self.identity, "options": self.digest}
        staging = os.path.join(os.path.dirname(self.record_path), f".{os.path.basename(self.record_path)}.tmp")
        try:
            with open(staging, "w", encoding="utf-8") as f:
                json.dump(record, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(staging, self.record_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.remove(staging)
            raise
        fsync_folder(os.path.dirname(self.path))

    def finish(self) -> None:
        """Every line is done: `OUT.partial` becomes `OUT` (checked again: nothing may have taken its place without
        `overwrite`), and the record goes."""
        check_output_file(self.shown, inputs=self.inputs, what=self.what, overwrite=self.overwrite)
        with self._writing():
            os.replace(self.partial, self.path)
            self.made = []
            with contextlib.suppress(FileNotFoundError):
                os.remove(self.record_path)
            fsync_folder(os.path.dirname(self.path))


def _status_key(status: os.stat_result) -> tuple:
    """What tells a file from a changed one: its device, inode, size and modification time."""
    return status.st_dev, status.st_ino, status.st_size, status.st_mtime_ns


__all__ = ["PARTIAL_SUFFIX", "PROGRESS_SUFFIX", "ResumableOutput", "file_identity", "options_digest"]
