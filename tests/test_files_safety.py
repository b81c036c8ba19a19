"""Nothing a user saved is lost: safe output folders, atomic saves, resumable after any kill, text read line
for line — proven by fault injection.

Kills are real SIGKILLs: a forked copy of this process runs the command and kills itself at the k-th file-system
event (Python's audit hooks: open for writing, mkdir, rename/replace, remove, rmtree) that touches the save under
test, so every kill point between "staging folder made" and "renamed into place" is hit exactly. A full disk is
RLIMIT_FSIZE in the forked copy (writes past the limit fail with EFBIG). The oracles: an uninterrupted run of the
same training (weights read from the safetensors files), `wc -l`, the bytes of the files that were there before.
"""

import errno
import faulthandler
import gc
import hashlib
import json
import os
import pathlib
import random
import resource
import shutil
import signal
import subprocess
import sys

import pytest
import torch
from safetensors.torch import load_file
from test_cli_translate import SENTENCES, one_at_a_time, save_tiny_translator

from helpers import TRAIN_ERROR, made_once_per_run, run_main, train_command, train_error, train_usage_error
from vanilla_transformer.files import (
    MANIFEST_NAME,
    OutputError,
    RunLock,
    TextFileError,
    has_model,
    read_text_lines,
    staged_folder,
)
from vanilla_transformer.training.average_checkpoints import main as average_main
from vanilla_transformer.training.data_sources import read_parallel_files
from vanilla_transformer.training.messages import DataError
from vanilla_transformer.training.run_folder import checkpoint_problem
from vanilla_transformer.training.train import main as train_main

TINY_OPTIONS = dict(
    d_model=32, encoder_layers=1, decoder_layers=1, attention_heads=2, ffn_dim=64, vocab_size=90,
    demo_train_size=120, max_tokens=250, max_test_samples=8, per_device_eval_batch_size=8,
    config_overrides="max_position_embeddings=20", report_to="none", disable_tqdm="true", num_sample_translations=0,
    warmup_steps=4, max_steps=6, save_steps=2, logging_steps=1, dropout=0.0, save_total_limit=3,
)


MODEL_OPTIONS = ("d_model", "encoder_layers", "decoder_layers", "attention_heads", "ffn_dim", "config_overrides",
                 "dropout")


def tiny(**options) -> list[str]:
    return [item for name, value in {**TINY_OPTIONS, **options}.items() for item in (f"--{name}", str(value))]


def tree_digest(folder) -> dict[str, str]:
    """{relative path: sha256} of every file under `folder` (hidden ones too: manifests, locks, staging)."""
    digest = {}
    for root, _, names in os.walk(folder):
        for name in names:
            path = os.path.join(root, name)
            with open(path, "rb") as f:
                digest[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return digest


def run_forked(function, *, kill_at: int | None = None, watch: str = "", fsize: int | None = None, log=None):
    """Run `function()` in a forked copy of this process. With `kill_at`, the copy SIGKILLs itself just before its
    `kill_at`-th file-system event whose path contains `watch`; with `fsize`, no file may grow past that many bytes.
    Returns (exit status: the exit code, or -signal; stderr, and the list of events seen)."""
    read_end, write_end = os.pipe()
    events_path = f"{log or '/tmp'}.events" if log else None
    # The child must never collect what it inherits: an object whose threads live in this process only (an earlier
    # test's CTranslate2 translator, left in a reference cycle) would wait for them forever in its destructor. So this
    # process collects its garbage first and freezes the rest, which the child's collections then leave alone.
    gc.collect()
    gc.freeze()
    pid = os.fork()
    if pid != 0:
        gc.unfreeze()
    if pid == 0:  # the child: never returns into pytest
        code = 1
        try:
            os.close(read_end)
            os.dup2(write_end, 2)
            # what the function prints to sys.stderr (the command's error line) reaches the pipe, not pytest's capture
            sys.stderr = open(2, "w", buffering=1, encoding="utf-8", closefd=False)
            # a child that hangs (a lock another thread of the parent held at the fork) ends with its stacks on the
            # pipe, so that the test fails with them instead of waiting for the child forever
            faulthandler.dump_traceback_later(120, exit=True, file=sys.stderr)
            # the parent's OpenMP thread pool (torch's, once a test ran it with several threads) does not survive the
            # fork: a parallel region in the child would wait for it forever; with one thread torch runs none
            if "torch" in sys.modules:
                sys.modules["torch"].set_num_threads(1)
            if fsize is not None:
                signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # writes past the limit fail with EFBIG
                resource.setrlimit(resource.RLIMIT_FSIZE, (fsize, fsize))
            seen = []

            def hook(event, args):
                if event not in ("open", "os.mkdir", "os.rename", "os.remove", "shutil.rmtree"):
                    return
                if event == "open" and not (isinstance(args[1], str) and args[1][:1] in "wax"):
                    return
                path = os.fspath(args[0]) if isinstance(args[0], (str, bytes, os.PathLike)) else ""
                path = path.decode() if isinstance(path, bytes) else path
                if watch not in path or path == events_path:
                    return
                seen.append(f"{event} {path}")
                if events_path:
                    with open(events_path, "a") as f:
                        f.write(f"{event} {path}\n")
                if kill_at is not None and len(seen) >= kill_at:
                    os.kill(os.getpid(), signal.SIGKILL)

            if kill_at is not None or events_path:
                sys.addaudithook(hook)
            function()
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
            if isinstance(exit.code, str):
                os.write(2, exit.code.encode() + b"\n")
        except BaseException as error:  # noqa: BLE001
            os.write(2, f"child raised {type(error).__name__}: {error}\n".encode())
        finally:
            sys.stderr.flush()
            os._exit(code)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as f:
        stderr = f.read().decode("utf-8", "replace")
    _, status = os.waitpid(pid, 0)
    code = -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
    return code, stderr


def assert_whole_checkpoints(out) -> list[str]:
    """Every visible checkpoint-STEP folder can be resumed from; returns their names."""
    names = sorted(n for n in os.listdir(out) if n.startswith("checkpoint-"))
    for name in names:
        assert checkpoint_problem(os.path.join(out, name)) is None, name
    return names


def assert_same_weights(folder, reference):
    ours, theirs = load_file(os.path.join(folder, "model.safetensors")), load_file(os.path.join(reference,
                                                                                                "model.safetensors"))
    assert set(ours) == set(theirs)
    for name in theirs:
        torch.testing.assert_close(ours[name], theirs[name], rtol=1e-4, atol=1e-5, msg=name)


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """An uninterrupted tiny run (6 steps, checkpoints at 2, 4, 6): the oracle of every resumed run. Made once per test
    run (pytest-xdist's workers share it); tests copy it before changing anything."""
    reference = made_once_per_run(tmp_path_factory, "files-safety-finished",
                                  lambda folder: train_main(["--output_dir", str(folder / "run"), *tiny()]))
    return reference / "run"


# ---------------------------------------------------------------------------------------------------------------
# kill -9 at every point of a checkpoint save and of the final save; a full disk


# The 22 file-system events of saving checkpoint-4 (measured on transformers 5.24): 1-3 makedirs of the staging
# folder, 4-11 the remote-code files and config.json (the weights follow), 13 generation_config.json, 15 tokenizer
# files, 17-18 trainer_state.json (after the optimizer, scheduler and RNG states), 19-20 the manifest, 21 the rename
# into place, 22 the staging folder's removal. Kill points: before the first write, after the weights, after the
# optimizer state, while the manifest is written, before and after the rename.
CHECKPOINT_KILL_POINTS = (1, 4, 11, 15, 19, 21, 22)


@pytest.mark.slow  # a training and its resumption each
@pytest.mark.parametrize("kill_at", CHECKPOINT_KILL_POINTS)
def test_kill_during_a_checkpoint_save_leaves_whole_checkpoints_and_resume_ends_as_an_uninterrupted_run(
        tmp_path, finished, kill_at, capsys):
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny()]
    code, stderr = run_forked(lambda: train_main(argv), kill_at=kill_at, watch="checkpoint-4")
    assert code == -signal.SIGKILL, stderr
    names = assert_whole_checkpoints(out)
    assert names in (["checkpoint-2"], ["checkpoint-2", "checkpoint-4"])  # the old whole state or the new one
    assert not has_model(out)
    train_main([*argv, "--resume_from_checkpoint", "true"])
    assert_same_weights(out, finished)
    assert not [n for n in os.listdir(out) if ".staging-" in n]  # the killed run's staging folder is gone
    assert assert_whole_checkpoints(out) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]


# The 36 events of the final save: 3 test_predictions.txt, 13 config.json, 18 trainer_state.json, 22-35 files moved
# into --output_dir (the manifest there accepts each file old or new meanwhile), 35 the weights (the commit), 36 the
# staging folder's removal.
FINAL_KILL_POINTS = (3, 18, 22, 30, 35, 36)


@pytest.mark.slow  # a training and its resumption each
@pytest.mark.parametrize("kill_at", FINAL_KILL_POINTS)
def test_kill_during_the_final_save_leaves_no_model_or_the_whole_model_and_resume_ends_as_uninterrupted(
        tmp_path, finished, kill_at):
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny()]
    code, stderr = run_forked(lambda: train_main(argv), kill_at=kill_at, watch="final-model")
    assert code == -signal.SIGKILL, stderr
    assert assert_whole_checkpoints(out) == ["checkpoint-2", "checkpoint-4", "checkpoint-6"]
    if has_model(out):  # the weights are the commit point: whatever is there is the whole new model
        assert_same_weights(out, finished)
        from vanilla_transformer.checkpoints.validate import check_checkpoint

        check_checkpoint(out)
    train_main([*argv, "--resume_from_checkpoint", "true"])
    assert_same_weights(out, finished)
    assert not [n for n in os.listdir(out) if ".staging-" in n]


def test_resume_skips_an_incomplete_checkpoint_and_says_which(tmp_path, finished, capsys):
    """A half-written checkpoint (as a kill can leave one: weights and optimizer, no trainer_state.json)."""
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny()]
    code, stderr = run_forked(lambda: train_main(argv), kill_at=1, watch="checkpoint-6")
    assert code == -signal.SIGKILL, stderr
    shutil.copytree(out / "checkpoint-4", out / "checkpoint-6")
    os.remove(out / "checkpoint-6" / "trainer_state.json")
    code, stdout, stderr = run_main(train_main, [*argv, "--resume_from_checkpoint", "true"], capsys)
    assert code == 0, stderr
    assert f"Skipping {out / 'checkpoint-6'}: incomplete (no trainer_state.json)" in stdout
    assert_same_weights(out, finished)


@pytest.mark.slow  # training runs
def test_a_full_disk_is_one_line_naming_the_folder_and_what_was_there_stays_whole(tmp_path, finished, capsys):
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny()]
    code, stderr = run_forked(lambda: train_main(argv), kill_at=1, watch="checkpoint-4")
    before = tree_digest(out / "checkpoint-2")
    # the next run may write no file larger than 20 kB: the model's weights (~100 kB) fail with EFBIG
    code, stderr = run_forked(lambda: train_command([*argv, "--resume_from_checkpoint", "true"]), fsize=20_000)
    assert code == 1, stderr
    last = stderr.strip().splitlines()[-1]
    assert last.startswith(f"{TRAIN_ERROR}Cannot write to {out}") and "Traceback" not in stderr, stderr
    assert tree_digest(out / "checkpoint-2") == before
    assert assert_whole_checkpoints(out) == ["checkpoint-2"]
    train_main([*argv, "--resume_from_checkpoint", "true"])  # with room again, the run ends as it would have
    assert_same_weights(out, finished)


# ---------------------------------------------------------------------------------------------------------------
# a finished model in --output_dir is never replaced by a run that fails or was not asked to replace it


def test_a_bad_option_into_a_finished_model_folder_writes_nothing(tmp_path, finished, capsys):
    model = tmp_path / "M"
    shutil.copytree(finished, model, ignore=shutil.ignore_patterns("checkpoint-*"))
    before = tree_digest(model)
    code, _, stderr = run_main(train_command, ["--output_dir", str(model), *tiny(warmup_steps=0, vocab_size=300)],
                               capsys)
    assert "--warmup_steps" in train_usage_error(code, stderr)
    assert tree_digest(model) == before  # tokenizer.json not replaced by the 300-token vocabulary


def test_a_finished_model_is_refused_like_checkpoints_are(tmp_path, finished, capsys):
    model = tmp_path / "M"
    shutil.copytree(finished, model, ignore=shutil.ignore_patterns("checkpoint-*"))
    before = tree_digest(model)
    code, _, stderr = run_main(train_command, ["--output_dir", str(model), *tiny(max_steps=2)], capsys)
    line = train_usage_error(code, stderr)
    assert "already holds a finished model" in line and "--resume_from_checkpoint" in line
    assert "--overwrite_output_dir" in line
    assert tree_digest(model) == before


def test_overwrite_deletes_nothing_before_every_option_is_checked(tmp_path, finished, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = tree_digest(run)
    code, _, stderr = run_main(train_command, ["--output_dir", str(run), "--overwrite_output_dir", "true",
                                               *tiny(warmup_steps=0)], capsys)
    assert "--warmup_steps" in train_usage_error(code, stderr)
    assert tree_digest(run) == before  # the old checkpoints are all still there
    # a bad data file is found before anything is deleted, too
    code, _, stderr = run_main(train_command, ["--output_dir", str(run), "--overwrite_output_dir", "true",
                                               "--preset", "multi30k", "--train_source", str(tmp_path / "no.en"),
                                               "--train_target", str(tmp_path / "no.de"),
                                               *tiny(average_last_n_checkpoints=0)], capsys)
    assert "does not exist" in train_error(code, stderr)
    assert tree_digest(run) == before


# ---------------------------------------------------------------------------------------------------------------
# concurrent runs, resuming a finished run, output folders that cannot be written


def test_a_second_concurrent_run_into_the_same_folder_is_refused(tmp_path, capsys):
    out = tmp_path / "run"
    with RunLock(out):  # another run holds the folder
        code, _, stderr = run_main(train_command, ["--output_dir", str(out), *tiny(max_steps=2)], capsys)
    assert code == 1 and "Traceback" not in stderr
    assert stderr.strip().splitlines()[-1].startswith(f"{TRAIN_ERROR}{out} is in use by another run (process "
                                                      f"{os.getpid()}")
    assert f"{out} is in use by another run (process {os.getpid()}" in stderr
    assert not [n for n in os.listdir(out) if n.startswith("checkpoint-")]


def test_the_lock_of_a_killed_run_is_taken_over_with_a_message(tmp_path, capsys):
    out = tmp_path / "run"
    code, _ = run_forked(lambda: train_main(["--output_dir", str(out), *tiny(max_steps=2)]), kill_at=1,
                         watch="checkpoint-2")
    assert code == -signal.SIGKILL
    lock = out / ".vanilla-transformer.lock"
    assert lock.is_file()  # left behind by the killed run
    code, _, stderr = run_main(train_main, ["--output_dir", str(out), "--overwrite_output_dir", "true",
                                            *tiny(max_steps=2)], capsys)
    assert code == 0
    assert f"Took over the lock of {out} from process" in stderr and "no longer running" in stderr
    assert not lock.exists()


def test_resuming_a_finished_run_changes_nothing(tmp_path, finished, capsys):
    out = tmp_path / "run"
    shutil.copytree(finished, out)
    before = tree_digest(out)
    code, stdout, stderr = run_main(train_main, ["--output_dir", str(out), "--resume_from_checkpoint", "true",
                                                 *tiny()], capsys)
    assert code == 0, stderr
    assert "holds the finished run (step 6 of 6)" in stdout
    assert tree_digest(out) == before  # no step 7, no checkpoint rotated away, the final model untouched


@pytest.mark.parametrize("where", ["file", "under_file", "read_only"])
def test_an_output_dir_that_cannot_be_written_is_one_line(tmp_path, where, capsys):
    (tmp_path / "a_file").write_text("x")
    if where == "read_only":
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only folders; a read-only file system needs a mount")
        (tmp_path / "ro").mkdir()
        os.chmod(tmp_path / "ro", 0o555)
    out = {"file": tmp_path / "a_file", "under_file": tmp_path / "a_file" / "run",
           "read_only": tmp_path / "ro" / "run"}[where]
    code, _, stderr = run_main(train_command, ["--output_dir", str(out), *tiny(max_steps=2)], capsys)
    assert train_usage_error(code, stderr).startswith(f"{TRAIN_ERROR}--output_dir: "), stderr
    assert (tmp_path / "a_file").read_text() == "x"


# ---------------------------------------------------------------------------------------------------------------
# the training text reader reads lines as `wc -l` counts them


def wc_l(path) -> int:
    return int(subprocess.run(["wc", "-l", str(path)], capture_output=True, text=True, check=True).stdout.split()[0])


def test_training_text_is_split_on_newlines_only_as_wc_counts(tmp_path):
    odd = ["\x0c", "\u2028", "\u0085", "\u2029", "\x1c", "\x0b", "\r"]
    sources = [f"line {i} {ch} rest" for i, ch in enumerate(odd)]
    targets = [f"Zeile {i}" for i in range(len(odd))]
    src, tgt = tmp_path / "train.en", tmp_path / "train.de"
    src.write_bytes(("\ufeff" + "".join(s + "\n" for s in sources)).encode())
    tgt.write_bytes("".join(t + "\r\n" for t in targets).encode())
    pairs = read_parallel_files(str(src), str(tgt), "train")
    assert len(pairs["source"]) == wc_l(src) == len(pairs["target"]) == wc_l(tgt) == 7
    assert pairs["source"] == sources and pairs["target"] == targets  # aligned, BOM and \r\n endings removed

    short = tmp_path / "short.de"
    short.write_text("".join(t + "\n" for t in targets[:5]), encoding="utf-8")
    with pytest.raises(DataError) as raised:
        read_parallel_files(str(src), str(short), "train")
    assert f"has {wc_l(src)} lines" in str(raised.value) and f"has {wc_l(short)}" in str(raised.value)


def test_text_that_is_not_utf8_is_one_line_naming_the_file_and_byte(tmp_path):
    latin = tmp_path / "latin.en"
    latin.write_bytes("eins\nzwei drei\nfür\n".encode("latin-1"))
    with pytest.raises(TextFileError) as raised:
        read_text_lines(latin, "train source file")
    message = str(raised.value)
    assert "\n" not in message and str(latin) in message and "byte 16 (0xfc)" in message
    utf16 = tmp_path / "utf16.en"
    utf16.write_bytes("one\ntwo\n".encode("utf-16"))
    with pytest.raises(TextFileError, match="UTF-16"):
        read_text_lines(utf16, "train source file")


def test_one_reader_reads_gzip_and_chunk_by_chunk_as_a_whole_plain_file(tmp_path, monkeypatch):
    """Every text input (training files, the tokenizer's files, --input) goes through `files.text_lines`: a file
    gzip'd, or read in chunks that cut lines and characters, gives the lines of the plain file read whole; a bad
    byte is named at its offset in the uncompressed text (the oracle: `bytes.index`)."""
    import gzip

    from vanilla_transformer.files import text
    from vanilla_transformer.training.tokenizer import train_tokenizer

    monkeypatch.setattr(text, "READ_CHUNK_BYTES", 5)  # chunks end inside lines and inside "ü"
    raw = "\ufeffeins zwei\r\ndrei\x0cvier für\nfünf\u2028sechs\n\nsieben".encode()
    plain, packed = tmp_path / "a.txt", tmp_path / "a.txt.gz"
    plain.write_bytes(raw)
    packed.write_bytes(gzip.compress(raw))
    expected = ["eins zwei", "drei\x0cvier für", "fünf\u2028sechs", "", "sieben"]
    assert read_text_lines(plain) == read_text_lines(packed) == expected
    assert (train_tokenizer(files=[packed], vocab_size=40, min_frequency=1).get_vocab()
            == train_tokenizer(files=[plain], vocab_size=40, min_frequency=1).get_vocab())

    bad = raw + "\nacht neun zehn für\n".encode("latin-1")
    offset = bad.index(b"\xfc")
    for path, data in ((plain, bad), (packed, gzip.compress(bad))):
        path.write_bytes(data)
        with pytest.raises(TextFileError) as raised:
            read_text_lines(path, "train source file")
        assert str(raised.value).startswith(f"The train source file {path} is not UTF-8 text: byte {offset} (0xfc) ")


# ---------------------------------------------------------------------------------------------------------------
# staged_folder on its own


def test_staged_folder_refuses_inputs_files_and_existing_folders(tmp_path):
    source = tmp_path / "in"
    (source / "sub").mkdir(parents=True)
    (tmp_path / "file").write_text("x")
    for target, words in [(source, "is one of the inputs"), (source / "sub", "inside the input"),
                          (tmp_path, "contains the input"), (tmp_path / "file", "is a file"),
                          (tmp_path / "file" / "x", "is a file, not a folder")]:
        with pytest.raises(OutputError, match=words), staged_folder(target, inputs=[source], overwrite=True):
            pass
    with pytest.raises(OutputError, match="already exists and is not empty"), staged_folder(source / ".."):
        pass


def test_staged_folder_keeps_the_old_folder_until_the_new_one_is_whole(tmp_path):
    target = tmp_path / "out"
    with staged_folder(target) as folder:
        pathlib.Path(folder, "old.txt").write_text("old")
    old = tree_digest(target)
    assert old["old.txt"] == hashlib.sha256(b"old").hexdigest() and sorted(old) == [MANIFEST_NAME, "old.txt"]
    with pytest.raises(RuntimeError), staged_folder(target, overwrite=True) as folder:
        pathlib.Path(folder, "new.txt").write_text("half")
        raise RuntimeError("killed mid-write")
    assert sorted(os.listdir(tmp_path)) == ["out"] and tree_digest(target) == old
    # a killed writer's staging folder is cleaned up by the next one
    code, _ = run_forked(lambda: _write_forever(target), kill_at=3, watch=".out.staging")  # after the first file
    assert code == -signal.SIGKILL and [n for n in os.listdir(tmp_path) if ".staging-" in n]
    assert (target / "old.txt").read_text() == "old"
    with staged_folder(target, overwrite=True) as folder:
        pathlib.Path(folder, "new.txt").write_text("new")
    assert sorted(os.listdir(tmp_path)) == ["out"] and sorted(os.listdir(target)) == [MANIFEST_NAME, "new.txt"]


def _write_forever(target):
    with staged_folder(target, overwrite=True) as folder:
        for i in range(10):
            with open(os.path.join(folder, f"{i}.txt"), "w") as f:
                f.write("x")


# ---------------------------------------------------------------------------------------------------------------
# average_checkpoints


@pytest.fixture
def two_checkpoints(tmp_path, finished):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    return run


def test_averaging_into_an_input_or_a_finished_model_or_a_file_is_refused(two_checkpoints, tmp_path, capsys):
    run = two_checkpoints
    before = tree_digest(run)
    inputs = ["--checkpoints", str(run / "checkpoint-4"), str(run / "checkpoint-6")]
    (tmp_path / "a_file").write_text("x")
    for output, words in [(run / "checkpoint-6", "is one of the inputs"),
                          (run / "checkpoint-6" / "avg", "is inside the input"),
                          (run, "contains the input"),
                          (tmp_path / "a_file", "is a file")]:
        code, _, stderr = run_main(average_main, [*inputs, "--output_dir", str(output), "--overwrite"], capsys)
        assert code == 2 and stderr.count("\n") == 1 and words in stderr, (output, stderr)
    model = tmp_path / "M"
    shutil.copytree(run, model, ignore=shutil.ignore_patterns("checkpoint-*"))
    model_before = tree_digest(model)
    code, _, stderr = run_main(average_main, [*inputs, "--output_dir", str(model)], capsys)
    assert code == 2 and "already exists and is not empty; give --overwrite" in stderr
    assert tree_digest(model) == model_before and tree_digest(run) == before
    assert (tmp_path / "a_file").read_text() == "x"
    code, _, stderr = run_main(average_main, [*inputs, "--output_dir", str(model), "--overwrite"], capsys)
    assert code == 0, stderr
    averaged = load_file(model / "model.safetensors")
    four, six = load_file(run / "checkpoint-4" / "model.safetensors"), load_file(run / "checkpoint-6" /
                                                                                   "model.safetensors")
    for name in averaged:
        torch.testing.assert_close(averaged[name], (four[name] + six[name]) / 2)


def test_averaging_checkpoints_of_different_runs_is_refused(two_checkpoints, tmp_path, capsys):
    run = two_checkpoints
    other = tmp_path / "other"
    train_main(["--output_dir", str(other), *tiny(max_steps=2, vocab_size=90, seed=7, demo_train_size=130)])
    # same shapes (same vocabulary size and architecture), different tokenizer
    code, _, stderr = run_main(average_main, ["--checkpoints", str(run / "checkpoint-6"), str(other / "checkpoint-2"),
                                              "--output_dir", str(tmp_path / "avg")], capsys)
    assert code == 2 and "not checkpoints of one run" in stderr and "tokenizer" in stderr, stderr
    assert not (tmp_path / "avg").exists()
    # same tokenizer, different config
    changed = tmp_path / "changed"
    shutil.copytree(run / "checkpoint-4", changed)
    config = json.loads((changed / "config.json").read_text())
    config["activation_function"] = "gelu"  # the same weights, a different model
    (changed / "config.json").write_text(json.dumps(config))
    code, _, stderr = run_main(average_main, ["--checkpoints", str(run / "checkpoint-6"), str(changed),
                                              "--output_dir", str(tmp_path / "avg")], capsys)
    assert code == 2 and "config.json differs in activation_function ('gelu' vs 'relu')" in stderr, stderr


def test_averaging_a_decoder_only_folder_is_one_line(two_checkpoints, tmp_path, capsys):
    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForCausalLM

    lm = tmp_path / "lm"
    VanillaTransformerForCausalLM(tiny_config()).save_pretrained(lm)
    capsys.readouterr()
    code, _, stderr = run_main(average_main, ["--checkpoints", str(two_checkpoints / "checkpoint-6"), str(lm),
                                              "--output_dir", str(tmp_path / "avg")], capsys)
    assert code == 2 and stderr.count("\n") == 1 and "decoder-only" in stderr and "Traceback" not in stderr, stderr


@pytest.mark.parametrize("kill_at", [1, 3, 5, 7])
def test_kill_during_averaging_leaves_the_old_folder_or_the_new_one(two_checkpoints, tmp_path, kill_at):
    run = two_checkpoints
    target = tmp_path / "avg"
    argv = ["--checkpoints", str(run / "checkpoint-2"), str(run / "checkpoint-4"), "--output_dir", str(target)]
    average_main(argv)  # the old average
    old = tree_digest(target)
    argv[1:3] = [str(run / "checkpoint-4"), str(run / "checkpoint-6")]
    code, stderr = run_forked(lambda: average_main([*argv, "--overwrite"]), kill_at=kill_at, watch="avg")
    assert code == -signal.SIGKILL, stderr
    assert sorted(n for n in os.listdir(tmp_path) if not n.startswith(".")) == ["avg", "run"]
    state = tree_digest(target)
    average_main([*argv, "--overwrite"])  # the new average, run to the end
    assert state in (old, tree_digest(target))
    assert not [n for n in os.listdir(tmp_path) if ".staging-" in n or ".old-" in n]


# ---------------------------------------------------------------------------------------------------------------
# transformers' own pipelines with our models: what our models refuse themselves, and what transformers answers


def _word_tokenizer():
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    words = ["<pad>", "<s>", "</s>", "<unk>", "[MASK]", "one", "two", "three", "four", "five", "six", "seven"]
    tokenizer = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tokenizer, pad_token="<pad>", bos_token="<s>", eos_token="</s>",
                                   unk_token="<unk>", mask_token="[MASK]")


def test_the_classifier_refuses_a_text_without_tokens_with_one_clear_error():
    from transformers import pipeline

    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForSequenceClassification

    tokenizer = _word_tokenizer()
    torch.manual_seed(0)
    model = VanillaTransformerForSequenceClassification(tiny_config(vocab_size=len(tokenizer))).eval()
    runner = pipeline("text-classification", model=model, tokenizer=tokenizer)
    for empty in ("", "   "):
        assert tokenizer(empty)["input_ids"] == []  # this tokenizer adds no special tokens: nothing to classify
        with pytest.raises(ValueError, match=r"^input_ids is empty \(shape \(1, 0\)\): there is nothing to encode\.$"):
            runner(empty)
    assert runner("one two")  # still served


def test_text_generation_from_an_empty_prompt_starts_from_the_models_bos_token():
    """transformers' text-generation pipeline turns a prompt without tokens into `generate()` without inputs, for
    every causal LM: generation from the model's `bos_token_id` alone. Ours does the same as `generate()` itself."""
    from transformers import pipeline

    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForCausalLM

    tokenizer = _word_tokenizer()
    torch.manual_seed(0)
    model = VanillaTransformerForCausalLM(tiny_config(vocab_size=len(tokenizer))).eval()
    with torch.no_grad():
        expected = model.generate(max_new_tokens=4, do_sample=False)[0].tolist()
    assert expected[0] == model.config.bos_token_id and len(expected) == 5
    runner = pipeline("text-generation", model=model, tokenizer=tokenizer)
    for empty in ("", "   "):
        assert runner(empty, max_new_tokens=4, do_sample=False, return_tensors=True) == [
            {"generated_token_ids": expected}]


def test_fill_mask_replaces_a_target_outside_the_vocabulary_and_says_so():
    """transformers' own handling, the same for every model: a target that is not a token of the vocabulary is
    replaced by the first token of its tokenization, with a logged warning naming both; every score is the model's
    own probability of a token at the mask."""
    from transformers import pipeline
    from transformers.testing_utils import CaptureLogger
    from transformers.utils import logging

    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForMaskedLM

    tokenizer = _word_tokenizer()
    torch.manual_seed(0)
    fill = pipeline("fill-mask", model=VanillaTransformerForMaskedLM(tiny_config(vocab_size=len(tokenizer))).eval(),
                    tokenizer=tokenizer)
    with CaptureLogger(logging.get_logger("transformers.pipelines.fill_mask")) as captured:
        scores = fill("one [MASK] three", targets=["two", "zebra"])
    assert "The specified target token `zebra` does not exist in the model vocabulary. Replacing with `<unk>`." \
        in captured.out
    assert sorted(s["token_str"] for s in scores) == ["<unk>", "two"]
    scores += fill("one [MASK] three", targets=["two", "four"])
    with torch.no_grad():
        inputs = tokenizer("one [MASK] three", return_tensors="pt")
        probabilities = fill.model(**inputs).logits[0, 1].softmax(-1)
    for s in scores:
        assert s["score"] == pytest.approx(probabilities[s["token"]].item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# A real full disk and a read-only file system: small tmpfs mounts (CI runs as root; skipped where mounting is not
# allowed)


@pytest.fixture
def tmpfs(tmp_path):
    """mount(size) -> a fresh tmpfs of that size (e.g. "800k") at a folder of tmp_path; remount(options) changes it."""
    point = tmp_path / "tmpfs"
    point.mkdir()
    mounted = []

    def mount(options: str):
        command = ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(point)]
        if mounted:
            command = ["mount", "-o", f"remount,{options}", str(point)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({result.stderr.strip() or result.returncode})")
        mounted.append(point)
        return point

    yield mount
    if mounted:
        subprocess.run(["umount", "-l", str(point)], capture_output=True, check=False)


@pytest.mark.parametrize("seed", [0, 1])
def test_a_tokenizer_saved_to_a_full_disk_is_one_line_naming_the_folder(tmpfs, seed):
    """`tokenizers` raises a plain Exception with Rust's words ("No space left on device (os error 28)") where
    Python raises OSError: a checkpoint whose weights fit but whose tokenizer does not must still be one line."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    from vanilla_transformer.files import OutputError, writing_errors

    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(3, 12)))
             for _ in range(3000)]
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    tokenizer.train_from_iterator([" ".join(words[i:i + 20]) for i in range(0, len(words), 20)],
                                  trainers.BpeTrainer(vocab_size=2000, special_tokens=["<unk>"], show_progress=False))
    folder = tmpfs("size=8k")
    with pytest.raises(Exception) as raw:  # the library's own error, as it reaches us
        tokenizer.save(str(folder / "tokenizer.json"))
    assert not isinstance(raw.value, OSError) and "os error" in str(raw.value)
    with pytest.raises(OutputError) as raised, writing_errors(folder):
        tokenizer.save(str(folder / "tokenizer.json"))
    assert str(raised.value) == f"Cannot write to {folder}: {os.strerror(errno.ENOSPC)}."


@pytest.mark.slow  # training runs
def test_a_full_tmpfs_is_one_line_and_the_earlier_checkpoint_stays_whole(tmpfs, finished, capsys):
    # a checkpoint of the tiny run takes ~480 kB: the first fits in 800 kB, the second cannot
    out = tmpfs("size=800k") / "run"
    argv = ["--output_dir", str(out), *tiny()]
    code, stderr = run_forked(lambda: train_command(argv))
    last = stderr.strip().splitlines()[-1]
    assert code == 1 and last.startswith(f"{TRAIN_ERROR}Cannot write to {out}: "), stderr
    assert "No space left" in last or "the disk is full" in last, last
    assert "Traceback" not in stderr
    assert assert_whole_checkpoints(out) == ["checkpoint-2"]
    assert not [n for n in os.listdir(out) if ".staging-" in n]  # the half-written checkpoint is removed
    tmpfs("size=16m")  # room again: the run resumes and ends as an uninterrupted one
    train_main([*argv, "--resume_from_checkpoint", "true"])
    assert_same_weights(out, finished)


def test_an_output_dir_on_a_read_only_file_system_is_one_line(tmpfs, capsys):
    folder = tmpfs("size=1m")
    (folder / "old").mkdir()
    tmpfs("ro,size=1m")
    code, _, stderr = run_main(train_command, ["--output_dir", str(folder / "old" / "run"), *tiny(max_steps=2)],
                               capsys)
    line = train_usage_error(code, stderr)
    assert line.startswith(f"{TRAIN_ERROR}--output_dir: {folder / 'old' / 'run'} cannot be written: {folder / 'old'} "
                           "is read-only"), stderr


def test_overwriting_never_deletes_the_model_a_run_starts_from(tmp_path, finished, capsys):
    run = tmp_path / "run"
    shutil.copytree(finished, run)
    before = tree_digest(run)
    for argv, words in [
        (["--output_dir", str(run), "--overwrite_output_dir", "true", "--model_name_or_path", str(run / "checkpoint-6")],
         f"--overwrite_output_dir would delete {run / 'checkpoint-6'}"),
        (["--output_dir", str(run / "checkpoint-6" / "more"), "--model_name_or_path", str(run / "checkpoint-6")],
         "lies inside"),
    ]:
        keep = [item for name, value in TINY_OPTIONS.items() if name not in MODEL_OPTIONS
                for item in (f"--{name}", str(value))]
        code, _, stderr = run_main(train_command, [*argv, *keep], capsys)
        assert words in train_usage_error(code, stderr), stderr
    assert tree_digest(run) == before


def _dead_pid() -> int:
    """The id of a process that has exited (and been reaped)."""
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    return child.pid


def test_a_folder_moved_aside_by_a_killed_run_is_put_back(tmp_path, monkeypatch):
    import vanilla_transformer.files.staging as files

    # without an atomic swap (other systems), the old folder is moved aside, the new one renamed in, the old removed
    target = tmp_path / "out"
    with staged_folder(target) as folder:
        pathlib.Path(folder, "old.txt").write_text("old")
    monkeypatch.setattr(files, "_exchange", lambda a, b: False)
    with staged_folder(target, overwrite=True) as folder:
        pathlib.Path(folder, "new.txt").write_text("new")
    assert os.listdir(tmp_path) == ["out"] and sorted(os.listdir(target)) == [MANIFEST_NAME, "new.txt"]
    # a run killed between moving the old folder aside and renaming the new one in: the next writer puts it back
    pid = _dead_pid()
    os.rename(target, tmp_path / f".out.old-{pid}")
    (tmp_path / f".out.staging-{pid}" / "out").mkdir(parents=True)
    assert files.clean_stale_staging(tmp_path, "out") == [
        f"Restored {target} (a run killed while replacing it had moved it aside to .out.old-{pid}).",
        f"Removed {tmp_path / f'.out.staging-{pid}'}, left by a run that was killed (process {pid})."]
    assert os.listdir(tmp_path) == ["out"] and (target / "new.txt").read_text() == "new"
    # a live process's staging folder is left alone
    (tmp_path / f".out.staging-{os.getppid()}").mkdir()
    assert files.clean_stale_staging(tmp_path, "out") == []


# ---------------------------------------------------------------------------------------------------------------
# `translate --output` checked before any work and written atomically; `translate --input` read by
# the one text reader (files and standard input)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    """test_cli_translate's tiny translator: its translations are noise, but deterministic."""
    return save_tiny_translator(str(tmp_path_factory.mktemp("tiny-translator")))


def _refuse_loading(monkeypatch):
    """Make loading a model fail the test: a refusal must come before any work."""
    import vanilla_transformer.checkpoints.load as loading

    def load_checkpoint(*args, **kwargs):
        raise AssertionError("the model was loaded before --output was checked")

    monkeypatch.setattr(loading, "load_checkpoint", load_checkpoint)


def _translate(argv, capsys):
    from vanilla_transformer.cli.main import main as cli_main

    return run_main(cli_main, ["translate", *map(str, argv)], capsys)


def _one_error_line(code, out, err) -> str:
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if "error:" in line] == [lines[-1]] and out == "", err[-2000:]
    return lines[-1]


def test_translate_output_is_refused_before_any_work(model_dir, tmp_path, monkeypatch, capsys):
    _refuse_loading(monkeypatch)
    (tmp_path / "a_folder").mkdir()
    (tmp_path / "a_file").write_text("x")
    source = tmp_path / "in.txt"
    source.write_text("seventeen\n")
    model_file = os.path.join(model_dir, "tokenizer.json")
    for output, words in [(tmp_path / "a_folder", "--output {} is a folder"),
                          (tmp_path / "a_file" / "out.txt", "is a file, not a folder"),
                          (tmp_path / "no_such_folder" / "out.txt", "does not exist"),
                          (source, "is one of the inputs"),
                          (model_file, "is a file of the input")]:
        code, out, err = _translate(["--model", model_dir, "--input", source, "--output", output], capsys)
        line = _one_error_line(code, out, err)
        assert code == 2 and words.format(output) in line, line
    assert source.read_text() == "seventeen\n" and (tmp_path / "a_file").read_text() == "x"
    if os.geteuid() != 0:  # root writes into read-only folders
        (tmp_path / "ro").mkdir(mode=0o555)
        code, out, err = _translate(["--model", model_dir, "seven", "--output", tmp_path / "ro" / "o.txt"], capsys)
        assert code == 2 and "read-only" in _one_error_line(code, out, err)


def test_translate_output_is_written_atomically(model_dir, tmp_path, capsys):
    from vanilla_transformer.cli.main import main as cli_main

    out = tmp_path / "out.txt"
    out.write_text("the translations of yesterday\n")
    argv = ["translate", "--model", model_dir, "--output", str(out), "--overwrite", "--no-progress", *SENTENCES[:4]]
    # killed with the new file written beside the old one, before the rename (the 2nd event: open, rename): the old
    # file stays whole, and the staging file is removed by the next run
    code, stderr = run_forked(lambda: cli_main(argv), kill_at=2, watch=".out.txt.staging-")
    assert code == -signal.SIGKILL, stderr
    assert out.read_text() == "the translations of yesterday\n"
    left = [name for name in os.listdir(tmp_path) if name != "out.txt"]
    assert len(left) == 1 and left[0].startswith(".out.txt.staging-"), left
    assert (tmp_path / left[0]).read_text().count("\n") == 4  # it was written whole: the kill came before the rename
    # a full disk: one line naming the file, the old file whole, nothing left beside it
    code, stderr = run_forked(lambda: _on_fd2(cli_main, argv), fsize=8)
    line = stderr.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in stderr, stderr
    assert line.startswith(f"vanilla-transformer translate: error: Cannot write to {out}: File too large"), line
    assert out.read_text() == "the translations of yesterday\n"
    assert os.listdir(tmp_path) == ["out.txt"]  # the killed run's staging file was removed too
    code, _, err = run_main(cli_main, argv, capsys)
    assert code == 0, err
    assert out.read_text().splitlines() == one_at_a_time(model_dir, SENTENCES[:4])
    assert os.listdir(tmp_path) == ["out.txt"]
    assert (out.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _on_fd2(function, *args):
    """Call `function` with sys.stderr writing to file descriptor 2 (which `run_forked` reads; pytest's capture
    replaced sys.stderr with a buffer of its own)."""
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115  (the forked copy exits right after)
    function(*args)


@pytest.mark.parametrize("how", ["--input", "sentences"])
def test_an_output_where_no_file_can_be_made_is_one_line_naming_the_users_path(model_dir, tmp_path, capsys, how):
    """/proc takes no new files (ENOENT, an errno no full disk gives): the line names --output, never OUT.partial
    or a staging file."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("needs Linux's /proc")
    source = tmp_path / "in.txt"
    source.write_text("seventeen\neleven\n")
    what = ["--input", source] if how == "--input" else ["seventeen"]
    code, out, err = _translate(["--model", model_dir, *what, "--output", "/proc/x.de", "--no-progress"], capsys)
    line = _one_error_line(code, out, err)
    assert ".partial" not in line and ".staging-" not in line and "/proc/x.de" in line, line
    if code == 1:  # root passes the check of a writable folder, and then cannot make the file
        assert line.endswith("error: Cannot write to /proc/x.de: No such file or directory."), line
    else:
        assert code == 2 and "cannot be written" in line, line


def test_every_write_error_of_a_resumable_or_staged_output_names_the_users_path(tmp_path, monkeypatch):
    """Whatever the errno (a folder removed meanwhile, an I/O error), an error on the output's own files is one
    line naming the output the user gave."""
    from vanilla_transformer.files import resumable, staged_file, staging
    from vanilla_transformer.files.resumable import ResumableOutput

    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\n")
    folder = tmp_path / "gone"
    folder.mkdir()
    output = ResumableOutput(folder / "out.txt", source=source, options={})
    assert output.check() == 0
    folder.rmdir()  # between the check and the work
    with pytest.raises(OutputError) as raised:
        output.__enter__()
    assert str(raised.value) == f"Cannot write to {folder / 'out.txt'}: No such file or directory."
    folder.mkdir()
    real_write = os.write

    def broken_disk(fd, data):
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".partial"):
            raise OSError(errno.EIO, os.strerror(errno.EIO))
        return real_write(fd, data)

    monkeypatch.setattr(resumable.os, "write", broken_disk)
    output = ResumableOutput(folder / "out.txt", source=source, options={})
    output.check()
    with pytest.raises(OutputError) as raised, output:
        output.append(["eins"])
    assert str(raised.value) == f"Cannot write to {folder / 'out.txt'}: Input/output error."
    assert os.listdir(folder) == []  # nothing recorded: what it made is gone
    monkeypatch.setattr(staging, "check_output_file", lambda *args, **kwargs: None)
    with pytest.raises(OutputError) as raised, staged_file(tmp_path / "missing" / "out.txt") as f:
        f.write("never")
    assert str(raised.value) == f"Cannot write to {tmp_path / 'missing' / 'out.txt'}: No such file or directory."


def test_a_resumable_output_removes_only_what_a_run_that_did_nothing_made(tmp_path):
    """A run stopped before any line is recorded removes the OUT.partial and record it made; an earlier run's, or
    a run's that recorded lines, stay."""
    from vanilla_transformer.files.resumable import ResumableOutput

    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\nthree\n")
    out = tmp_path / "out.txt"

    def stopped(lines_first: list[str]):
        output = ResumableOutput(out, source=source, options={})
        output.check()
        with pytest.raises(KeyboardInterrupt), output:
            if lines_first:
                output.append(lines_first)
            raise KeyboardInterrupt

    stopped([])
    assert sorted(os.listdir(tmp_path)) == ["in.txt"]
    (tmp_path / "out.txt.partial").write_bytes(b"")  # an empty file of the user's: taken over, never removed
    stopped([])
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt.partial"]
    stopped(["eins"])
    assert sorted(os.listdir(tmp_path)) == ["in.txt", "out.txt.partial", "out.txt.progress.json"]
    assert (tmp_path / "out.txt.partial").read_bytes() == b"eins\n"


def test_a_record_without_a_digest_still_refuses_a_partial_with_other_lines(tmp_path):
    """A record written before records held the partial's SHA-256: the line count is still checked."""
    from vanilla_transformer.files.resumable import ResumableOutput

    source = tmp_path / "in.txt"
    source.write_text("one\ntwo\nthree\n")
    out = tmp_path / "out.txt"
    output = ResumableOutput(out, source=source, options={})
    output.check()
    with output:
        output.append(["eins", "zwei"])
    record_path = tmp_path / "out.txt.progress.json"
    record = json.loads(record_path.read_text())
    del record["sha256"]
    record_path.write_text(json.dumps(record))
    assert ResumableOutput(out, source=source, options={}).check() == 2  # as recorded: continued
    (tmp_path / "out.txt.partial").write_bytes(b"e\nzs\nzwei\n")  # as large, one line more
    with pytest.raises(OutputError, match="now hold 3"):
        ResumableOutput(out, source=source, options={}).check()
    assert ResumableOutput(out, source=source, options={}, overwrite=True).check() == 0


def test_translate_input_is_split_on_newlines_only_as_wc_counts(model_dir, tmp_path, capsys):
    lines = ["two hundred\rand five", "seventeen\x0c eleven", "ninety\u2028nine", "", "eleven\u0085twelve", "six"]
    source = tmp_path / "in.txt"
    source.write_bytes(("\ufeff" + "\r\n".join(lines) + "\n").encode("utf-8"))
    out = tmp_path / "out.txt"
    code, _, err = _translate(["--model", model_dir, "--input", source, "--output", out, "--no-progress"], capsys)
    assert code == 0, err
    translations = out.read_text(encoding="utf-8").split("\n")[:-1]
    assert len(translations) == wc_l(source) == len(lines)
    assert translations == one_at_a_time(model_dir, lines)  # line for line, BOM and \r\n endings removed


def test_translate_standard_input_loses_its_byte_order_mark(model_dir, monkeypatch, capsys):
    import io

    assert one_at_a_time(model_dir, ["\ufeffseventeen"]) != one_at_a_time(model_dir, ["seventeen"])  # it matters
    stdin = io.TextIOWrapper(io.BytesIO("\ufeffseventeen\r\n\neleven\n".encode()), encoding="utf-8")
    monkeypatch.setattr("sys.stdin", stdin)
    code, out, err = _translate(["--model", model_dir, "--input", "-"], capsys)
    assert code == 0, err
    assert out.split("\n")[:-1] == one_at_a_time(model_dir, ["seventeen", "", "eleven"])


@pytest.mark.parametrize("encoding, offset, hint", [("latin-1", 11, "0xfc"), ("utf-16", 0, "UTF-16"),
                                                    ("cp1252", 10, "0x93")])
def test_translate_input_that_is_not_utf8_is_one_line_naming_the_file_and_byte(model_dir, tmp_path, monkeypatch,
                                                                              capsys, encoding, offset, hint):
    import io

    text = {"cp1252": "seventeen\n\u201celeven\u201d\n"}.get(encoding, "seventeen\nfür\n")
    source = tmp_path / "in.txt"
    source.write_bytes(text.encode(encoding))  # "seventeen\n" is 10 bytes; "f" is byte 10 of the latin-1 text
    code, out, err = _translate(["--model", model_dir, "--input", source], capsys)
    line = _one_error_line(code, out, err)
    assert code == 1 and f"The --input file {source} is not UTF-8 text: byte {offset} " in line and hint in line, line
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(text.encode(encoding)), encoding="utf-8"))
    code, out, err = _translate(["--model", model_dir, "--input", "-"], capsys)
    line = _one_error_line(code, out, err)
    assert code == 1 and f"The standard input (--input -) is not UTF-8 text: byte {offset} " in line, line


# ---------------------------------------------------------------------------------------------------------------
# folders of the wrong kind are one line saying what they hold and what is needed (translate, export,
# average_checkpoints and plot attention are in test_commands.py and above)


@pytest.fixture(scope="module")
def single_stack_folders(tmp_path_factory):
    from helpers import tiny_config
    from translation_fixtures import tiny_tokenizer
    from vanilla_transformer import VanillaTransformerForCausalLM, VanillaTransformerForMaskedLM

    root = tmp_path_factory.mktemp("single-stack")
    tokenizer = tiny_tokenizer()
    folders = {}
    for seed, (name, cls) in enumerate({"decoder-only": VanillaTransformerForCausalLM,
                                        "encoder-only": VanillaTransformerForMaskedLM}.items()):
        torch.manual_seed(seed)
        folders[name] = root / name
        cls(tiny_config(vocab_size=len(tokenizer))).save_pretrained(folders[name])
        tokenizer.save_pretrained(folders[name])
    return folders


def last_line_of_the_error(raised) -> str:
    """`pipeline(task, model=folder)` reports an error of `from_pretrained` in transformers' own message ("Could not
    load model ... See the original errors:", the tracebacks); its last line is the error's own."""
    return str(raised.value).strip().splitlines()[-1]


@pytest.mark.parametrize("kind", ["decoder-only", "encoder-only"])
def test_the_translation_pipeline_refuses_a_single_stack_folder(single_stack_folders, kind, capfd):
    from transformers import AutoModelForSeq2SeqLM, pipeline

    folder = single_stack_folders[kind]
    with pytest.raises(ValueError) as raised:
        pipeline("translation", model=str(folder))
    article = "an" if kind[0] == "e" else "a"
    cls = "VanillaTransformerForMaskedLM" if kind[0] == "e" else "VanillaTransformerForCausalLM"
    expected = (f"{folder} holds {article} {kind} model ({cls}, in config.json's architectures); "
                "VanillaTransformerForConditionalGeneration needs an encoder-decoder model: load it with the class it "
                "was saved from, or choose a folder saved from VanillaTransformerForConditionalGeneration.")
    assert last_line_of_the_error(raised) == f"ValueError: {expected}"
    assert "MISSING" not in capfd.readouterr().err  # refused before loading: no table of random weights
    with pytest.raises(ValueError) as raised:
        AutoModelForSeq2SeqLM.from_pretrained(folder)
    assert str(raised.value) == expected


@pytest.mark.parametrize("task, cls, needs", [("text-generation", "VanillaTransformerForCausalLM", "a decoder-only"),
                                              ("text-classification", "VanillaTransformerForSequenceClassification",
                                               "an encoder-only"),
                                              ("fill-mask", "VanillaTransformerForMaskedLM", "an encoder-only")])
def test_the_text_pipelines_refuse_an_encoder_decoder_folder(model_dir, task, cls, needs, capfd):
    from transformers import pipeline

    with pytest.raises(ValueError) as raised:
        pipeline(task, model=model_dir)
    assert last_line_of_the_error(raised) == (
        f"ValueError: {model_dir} holds an encoder-decoder model (VanillaTransformerForConditionalGeneration, in "
        f"config.json's architectures); {cls} needs {needs} model: load it with the class it was saved from, or "
        f"choose a folder saved from {cls}.")
    assert "MISSING" not in capfd.readouterr().err


def test_an_encoder_only_folder_still_starts_a_classifier(single_stack_folders):
    """Fine-tuning a masked LM as a classifier is the usual way: the same encoder, a new head."""
    from safetensors.torch import load_file
    from transformers import AutoModelForSequenceClassification

    import vanilla_transformer  # noqa: F401

    folder = single_stack_folders["encoder-only"]
    model = AutoModelForSequenceClassification.from_pretrained(folder, num_labels=3)
    saved = load_file(folder / "model.safetensors")
    state = model.state_dict()
    shared = [name for name in saved if name in state]
    assert shared and all(torch.equal(state[name], saved[name]) for name in shared)
    # a decoder-only class from the same folder has no stack to take: refused in one line
    from transformers import AutoModelForCausalLM

    with pytest.raises(ValueError, match=r"holds an encoder-only model \(VanillaTransformerForMaskedLM, .*"
                                         r"VanillaTransformerForCausalLM needs a decoder-only model"):
        AutoModelForCausalLM.from_pretrained(folder)


def test_training_from_a_single_stack_folder_is_one_line(single_stack_folders, tmp_path, capsys):
    out = tmp_path / "run"
    keep = [item for name, value in TINY_OPTIONS.items() if name not in MODEL_OPTIONS
            for item in (f"--{name}", str(value))]
    code, _, stderr = run_main(train_command, ["--output_dir", str(out), "--model_name_or_path",
                                               str(single_stack_folders["decoder-only"]), *keep], capsys)
    assert (f"{single_stack_folders['decoder-only']} holds a decoder-only language model "
            "(VanillaTransformerForCausalLM); --model_name_or_path needs a translation model (seq2seq)") in (
        train_usage_error(code, stderr))
    assert not out.exists()
