"""Safe file handling for every command that reads text or writes files: nothing a user saved is lost.

One module per job:

| module | job |
|---|---|
| `paths` | the output path checked before any work: not an input, not inside or above one, writable, an existing one only with `--overwrite` |
| `manifest` | what this project wrote into a folder (files and SHA-256), so that `--overwrite` replaces only that |
| `staging` | hidden staging folders and files, renamed into place when whole; a kill leaves the old state or the new |
| `resumable` | an output file written chunk by chunk (`translate --input --output`) that a killed run continues, renamed into place when whole |
| `lock` | one run at a time per output folder; what a run made there is recorded |
| `write_errors` | a full disk, a read-only place, a name too long: one line naming the user's path |
| `text` | the one line reader: text (plain, gzip'd, bzip2'd or xz'd; a pipe opened once) read line for line as `wc -l` counts, UTF-8 or one line naming the byte |
| `hashing` | SHA-256 of files |
| `errors` | `OutputError`, `TextFileError` and the one-line form of every message |

The names below are the package's public interface (docs/your-files.md describes the promises they keep).
"""  # noqa: E501  (the table's rows)

from vanilla_transformer.files.errors import OutputError, TextFileError, one_line
from vanilla_transformer.files.hashing import sha256_of_file
from vanilla_transformer.files.lock import LOCK_NAME, RunLock, check_run_folder
from vanilla_transformer.files.manifest import (
    MANIFEST_NAME,
    check_replaceable,
    foreign_entries,
    read_manifest,
    record_entries,
    remove_ours,
    write_manifest,
)
from vanilla_transformer.files.paths import check_output_file, check_output_folder, is_within
from vanilla_transformer.files.resumable import ResumableOutput
from vanilla_transformer.files.staging import (
    WEIGHT_FILES,
    clean_stale_staging,
    commit_files,
    has_model,
    install_folder,
    staged_file,
    staged_folder,
    staging_name,
)
from vanilla_transformer.files.text import (
    OpenedText,
    count_text_lines,
    is_stream,
    open_text,
    open_text_file,
    read_text_lines,
    reads_once,
    text_lines,
)
from vanilla_transformer.files.write_errors import write_error_message, writing_errors

__all__ = [
    "LOCK_NAME",
    "MANIFEST_NAME",
    "WEIGHT_FILES",
    "OpenedText",
    "OutputError",
    "ResumableOutput",
    "RunLock",
    "TextFileError",
    "check_output_file",
    "check_output_folder",
    "check_replaceable",
    "check_run_folder",
    "clean_stale_staging",
    "commit_files",
    "count_text_lines",
    "foreign_entries",
    "has_model",
    "install_folder",
    "is_within",
    "one_line",
    "open_text",
    "open_text_file",
    "read_manifest",
    "read_text_lines",
    "reads_once",
    "record_entries",
    "remove_ours",
    "sha256_of_file",
    "is_stream",
    "staged_file",
    "staged_folder",
    "staging_name",
    "text_lines",
    "write_error_message",
    "write_manifest",
    "writing_errors",
]
