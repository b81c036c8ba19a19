"""One rule for every command that writes: the output path is checked before any work (not an input, not inside or
above one, not an existing file or folder unless `--overwrite`), `--overwrite` replaces only what this project wrote
there (the folder's manifest says what), and every write failure is one line naming the user's path.

Fault injection for each writing command (translate --output, plot --out, explore --html / --space, export
ctranslate2 / marian, convert, average_checkpoints; training has its own below): the output is an input, a file inside an input
folder, an input's parent, a folder of foreign files (with and without --overwrite), a folder an earlier run wrote
plus a foreign file; a full disk (RLIMIT_FSIZE in a forked copy, and a real full tmpfs), a read-only file system
(a tmpfs remounted read-only), a SIGKILL in the middle of the write (`test_files_safety.run_forked`). The oracles:
the SHA-256 of every input and foreign file before and after, the exit status of the CLI's rule
(vanilla_transformer/cli/main.py), one error line.
"""

import os
import shutil
import signal
import stat
import sys

import pytest
from test_convert import build_source
from test_files_safety import TINY_OPTIONS, run_forked, tiny, tmpfs, tree_digest  # noqa: F401  (tmpfs: a fixture)

from helpers import TRAIN_ERROR, run_main, train_command, train_usage_error
from translation_fixtures import tiny_tokenizer, tiny_translator
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.files import MANIFEST_NAME, foreign_entries, read_manifest
from vanilla_transformer.training.average_checkpoints import main as average_main
from vanilla_transformer.training.train import main as train_main


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """The inputs of the commands, each alone in a folder of its own: a saved tiny translator (`model`), a copy of
    it (`other`, for averaging two checkpoints of one run) and a tiny Marian source (`marian`)."""
    root = tmp_path_factory.mktemp("inputs")
    model = root / "work" / "model"
    tiny_translator(seed=5).save_pretrained(model)
    tiny_tokenizer().save_pretrained(model)
    shutil.copytree(model, root / "work2" / "other")
    build_source("marian", 0, root / "work3" / "marian")
    return {"model": model, "other": root / "work2" / "other", "marian": root / "work3" / "marian"}


# name: (argv of the command writing OUT, the input it reads, a file output?, the exit status of a refused output)
def argv_of(command: str, inputs: dict, out) -> list[str]:
    model, out = str(inputs["model"]), str(out)
    return {
        "translate": ["translate", "--model", model, "--output", out, "seven", "twelve"],
        "plot": ["plot", "attention", "--model", model, "--text", "seven", "--dpi", "20", "--out", out],
        "explore-html": ["explore", model, "--html", out, "--text", "seven"],
        "explore-space": ["explore", model, "--space", out],
        "export-ctranslate2": ["export", "ctranslate2", model, out],
        "export-marian": ["export", "marian", model, out],
        "convert": ["convert", "marian", str(inputs["marian"]), out, "--no-tokenizer"],
        "average": ["--checkpoints", str(inputs["other"]), model, "--output_dir", out],
    }[command]


FILE_OUTPUTS = ("translate", "explore-html", "plot")
COMMANDS = ("translate", "plot", "explore-html", "explore-space", "export-ctranslate2", "export-marian", "convert", "average")
REFUSED_STATUS = {"translate": 2, "average": 2}  # a usage error of their parsers; the others: a ValueError, 1


def output_name(command: str) -> str:
    return "out.png" if command == "plot" else "out.txt" if command in FILE_OUTPUTS else "out"


def source_of(command: str, inputs: dict):
    return inputs["marian"] if command == "convert" else inputs["model"]


def run(command: str, argv: list[str], capsys, overwrite: bool = False):
    argv = [*argv, "--overwrite"] if overwrite else argv
    main = average_main if command == "average" else cli_main
    return run_main(main, argv, capsys)


def one_line(code, err) -> str:
    assert "Traceback" not in err, err[-3000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert lines and [line for line in lines if "error:" in line] == [lines[-1]], err[-3000:]
    return lines[-1]


def digests(*folders) -> dict:
    return {str(folder): tree_digest(folder) for folder in folders}


# ---------------------------------------------------------------------------------------------------------------
# The output is an input, inside an input, or above one: refused before any work, with or without --overwrite


@pytest.mark.parametrize("command", COMMANDS)
def test_an_output_that_is_inside_or_above_an_input_is_refused_and_nothing_changes(command, inputs, capsys):
    source = source_of(command, inputs)
    before = digests(*{folder.parent for folder in inputs.values()})
    if command in FILE_OUTPUTS:
        cases = [(source / "config.json", "is a file of the input"), (source / "new.txt", "is inside the input"),
                 (source.parent, "is a folder")]
    else:
        cases = [(source, "is one of the inputs"), (source / "out", "is inside the input"),
                 (source.parent, "contains the input")]
    for out, words in cases:
        for overwrite in (False, True):
            code, _, err = run(command, argv_of(command, inputs, out), capsys, overwrite)
            line = one_line(code, err)
            assert code == REFUSED_STATUS.get(command, 1) and words in line and str(out) in line, line
    assert digests(*{folder.parent for folder in inputs.values()}) == before
    assert not (source / "out").exists() and not (source / "new.txt").exists()


# ---------------------------------------------------------------------------------------------------------------
# Foreign files: never replaced by a folder command; a file the user names is replaced only with --overwrite


@pytest.mark.parametrize("command", COMMANDS)
def test_foreign_files_are_never_replaced_without_overwrite_and_by_folder_commands_never(command, inputs, tmp_path,
                                                                                        capsys):
    out = tmp_path / output_name(command)
    if command in FILE_OUTPUTS:
        out.write_text("the user's own file\n")
    else:
        (out / "sub").mkdir(parents=True)
        (out / "thesis.txt").write_text("years of work")
        (out / "sub" / "notes.txt").write_text("mine")
        (out / "config.json").write_text("{}")  # a name of ours does not make a folder ours
        (out / "model.bin").write_text("not a model")
    before = digests(tmp_path, *inputs.values())
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    line = one_line(code, err)
    assert code == REFUSED_STATUS.get(command, 1) and "already exists" in line and "--overwrite" in line, line
    assert digests(tmp_path, *inputs.values()) == before
    code, _, err = run(command, argv_of(command, inputs, out), capsys, overwrite=True)
    if command in FILE_OUTPUTS:  # the user named this one file and asked to replace it
        assert code == 0 and out.read_bytes() != b"the user's own file\n", err
        assert sorted(os.listdir(tmp_path)) == [out.name]
        return
    line = one_line(code, err)
    assert code == REFUSED_STATUS.get(command, 1) and f"{out} has no {MANIFEST_NAME}" in line, line
    assert "config.json, model.bin, sub/notes.txt, thesis.txt" in line, line
    assert digests(tmp_path, *inputs.values()) == before


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in FILE_OUTPUTS])
def test_overwrite_replaces_an_earlier_output_but_not_one_with_a_foreign_or_changed_file(command, inputs, tmp_path,
                                                                                       capsys):
    out = tmp_path / "out"
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    assert code == 0, err
    manifest = read_manifest(out)
    assert manifest and set(manifest) == set(tree_digest(out)) - {MANIFEST_NAME}  # every file written, listed
    ours = sorted(manifest)[0]
    for foreign, change in [("thesis.txt", lambda: (out / "thesis.txt").write_text("added by the user")),
                            (ours, lambda: (out / ours).write_bytes(b"edited by the user"))]:
        earlier = tree_digest(out)
        change()
        before = digests(tmp_path, *inputs.values())
        code, _, err = run(command, argv_of(command, inputs, out), capsys, overwrite=True)
        line = one_line(code, err)
        assert code == REFUSED_STATUS.get(command, 1) and "did not write" in line and foreign in line, line
        assert digests(tmp_path, *inputs.values()) == before
        if foreign == "thesis.txt":
            os.remove(out / "thesis.txt")
        else:
            (out / ours).unlink()
            assert earlier  # a missing file of ours is no reason to refuse
    code, _, err = run(command, argv_of(command, inputs, out), capsys, overwrite=True)
    assert code == 0, err
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []


# ---------------------------------------------------------------------------------------------------------------
# Write failures: one line naming the user's path, no staging left, the old output whole


def _on_fd2(function, *args):
    """Call `function` with sys.stderr on file descriptor 2, which `run_forked` reads (pytest replaced it)."""
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115  (the forked copy exits right after)
    function(*args)


@pytest.mark.parametrize("command", COMMANDS)
def test_a_full_disk_is_one_line_naming_the_output_and_the_earlier_output_stays(command, inputs, tmp_path, capsys):
    out = tmp_path / output_name(command)
    argv = argv_of(command, inputs, out)
    code, _, err = run(command, argv, capsys)
    assert code == 0, err
    old = digests(tmp_path, *inputs.values())
    main = average_main if command == "average" else cli_main
    # no file may grow past 64 bytes in the forked copy: the first real file written fails with EFBIG
    code, stderr = run_forked(lambda: _on_fd2(main, [*argv, "--overwrite"]), fsize=64)
    line = one_line(code, stderr)
    assert code in (1, 2) and f"Cannot write to {out}: File too large." in line, line
    assert ".staging-" not in line and digests(tmp_path, *inputs.values()) == old


@pytest.mark.parametrize("command", ["export-marian", "explore-space", "explore-html"])
def test_a_full_tmpfs_and_a_read_only_one_are_one_line_naming_the_output(command, inputs, tmpfs, capsys):  # noqa: F811
    size = "2m" if command == "explore-html" else "128k"  # less than the weights, or the Space's copy of the package
    folder = tmpfs(f"size={size}")
    out = folder / ("page.html" if command == "explore-html" else "out")
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    if command == "explore-html":  # the page fits; then the disk fills up
        assert code == 0, err
        page = tree_digest(folder)
        (folder / "filler").write_bytes(b"x" * (os.statvfs(folder).f_bavail * os.statvfs(folder).f_frsize))
        code, _, err = run(command, argv_of(command, inputs, out), capsys, overwrite=True)
        assert tree_digest(folder)["page.html"] == page["page.html"]
    line = one_line(code, err)
    assert code == 1 and line.split(": error: ")[1].startswith(f"Cannot write to {out}: "), line
    assert "No space left" in line and ".staging-" not in line, line
    assert not [name for name in os.listdir(folder) if ".staging-" in name]
    tmpfs(f"ro,size={size}")
    code, _, err = run(command, argv_of(command, inputs, folder / "other"), capsys)
    line = one_line(code, err)
    assert code == 1 and f"{folder / 'other'} cannot be written: {folder} is read-only" in line, line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_read_only_destination_is_one_line_before_any_work(command, inputs, tmpfs, capsys):  # noqa: F811
    folder = tmpfs("ro,size=64k")
    out = folder / output_name(command)
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    line = one_line(code, err)
    assert code == REFUSED_STATUS.get(command, 1), line
    assert f"{out} cannot be written: {folder} is read-only or not writable by this user" in line, line


@pytest.mark.parametrize("command", COMMANDS)
def test_a_name_too_long_for_the_file_system_is_one_line_before_any_work(command, inputs, tmp_path, capsys):
    out = tmp_path / ("n" * 250)  # a legal name, but no room for `.NAME.staging-PID` beside it
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    line = one_line(code, err)
    assert code == REFUSED_STATUS.get(command, 1) and "cannot be written: the name nnnn" in line, line
    assert "250 bytes long" in line and os.listdir(tmp_path) == [], line


@pytest.mark.parametrize("command", ["export-marian", "explore-html", "average"])
def test_a_permission_error_while_writing_is_one_line_naming_the_output(command, inputs, tmp_path, monkeypatch,
                                                                       capsys):
    import builtins

    real_open = builtins.open

    def refusing_open(file, mode="r", *args, **kwargs):  # what a folder of another user answers (root is never refused)
        if ".staging-" in os.fspath(file) and mode[:1] in "wax":
            raise PermissionError(13, "Permission denied", os.fspath(file))
        return real_open(file, mode, *args, **kwargs)

    out = tmp_path / ("out.html" if command in FILE_OUTPUTS else "out")
    monkeypatch.setattr(builtins, "open", refusing_open)
    code, _, err = run(command, argv_of(command, inputs, out), capsys)
    monkeypatch.undo()
    line = one_line(code, err)
    assert code == REFUSED_STATUS.get(command, 1) and f"Cannot write to {out}: Permission denied." in line, line
    assert os.listdir(tmp_path) == []


@pytest.mark.parametrize("command", COMMANDS)
def test_a_kill_in_the_middle_leaves_the_old_output_and_the_next_run_clears_the_staging(command, inputs, tmp_path,
                                                                                       capsys):
    out = tmp_path / output_name(command)
    argv = [*argv_of(command, inputs, out), "--overwrite"]
    code, _, err = run(command, argv, capsys)
    assert code == 0, err
    old = tree_digest(tmp_path)
    main = average_main if command == "average" else cli_main
    # killed before the rename of the staging file (its 2nd event: open, rename), or in the staging folder after its
    # first file (events: rmtree of a leftover, mkdir, mkdir of the inner folder, the first files)
    kill_at = 2 if command in FILE_OUTPUTS else 5
    code, stderr = run_forked(lambda: main(argv), kill_at=kill_at, watch=f".{out.name}.staging-")
    assert code == -signal.SIGKILL, stderr
    left = [name for name in os.listdir(tmp_path) if name.startswith(".")]
    assert len(left) == 1 and left[0].startswith(f".{out.name}.staging-"), left
    assert {path: digest for path, digest in tree_digest(tmp_path).items() if not path.startswith(".")} == old
    code, _, err = run(command, argv, capsys)
    assert code == 0 and "left by a run that was killed" in err, err
    assert [name for name in os.listdir(tmp_path) if name.startswith(".")] == []


@pytest.mark.parametrize("umask", [0o022, 0o027])
@pytest.mark.parametrize("command", ["explore-space", "export-marian", "translate"])
def test_what_is_written_gets_the_permissions_of_the_umask(command, umask, inputs, tmp_path, capsys):
    out = tmp_path / output_name(command)
    previous = os.umask(umask)
    try:
        code, _, err = run(command, argv_of(command, inputs, out), capsys)
    finally:
        os.umask(previous)
    assert code == 0, err
    for root, folders, files in os.walk(out) if out.is_dir() else [(str(tmp_path), [], [out.name])]:
        if out.is_dir():
            assert stat.S_IMODE(os.stat(root).st_mode) == 0o777 & ~umask, root
        for name in files:
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o666 & ~umask, name


# ---------------------------------------------------------------------------------------------------------------
# Folders saved before manifests existed still load and translate; --overwrite refuses them, naming their files


def test_a_folder_saved_without_a_manifest_translates_and_is_refused_by_overwrite(inputs, tmp_path, capsys):
    from helpers import REPO_ROOT

    fixtures = sorted(path for path in (REPO_ROOT / "tests" / "fixtures").iterdir() if path.is_dir())
    assert fixtures and not any(read_manifest(path) for path in fixtures)
    old = tmp_path / "old"
    shutil.copytree(fixtures[0], old)
    code, stdout, err = run_main(cli_main, ["translate", "--model", str(old), "seven"], capsys)
    assert code == 0 and stdout.strip(), err
    before = tree_digest(old)
    code, _, err = run("export-marian", argv_of("export-marian", inputs, old), capsys, overwrite=True)
    line = one_line(code, err)
    assert code == 1 and f"{old} has no {MANIFEST_NAME}" in line and "config.json" in line, line
    assert tree_digest(old) == before


# ---------------------------------------------------------------------------------------------------------------
# Training: --output_dir holds nothing foreign; --overwrite_output_dir keeps its meaning; resumed options agree


def train(argv, capsys):
    """`vanilla-transformer train ARGV`: (exit status, stdout, stderr)."""
    return run_main(train_command, argv, capsys)


@pytest.fixture(scope="module")
def earlier_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("earlier") / "run"
    train_main(["--output_dir", str(out), *tiny(max_steps=2, save_steps=2)])
    return out


def test_a_run_into_a_folder_of_foreign_files_is_refused_with_or_without_overwrite_output_dir(tmp_path, capsys):
    data = tmp_path / "data"
    data.mkdir()
    (data / "README.md").write_text("my dataset")
    (data / "config.json").write_text('{"mine": true}')
    before = tree_digest(data)
    for extra in ([], ["--overwrite_output_dir", "true"]):
        code, _, err = train(["--output_dir", str(data), *tiny(max_steps=2), *extra], capsys)
        line = train_usage_error(code, err)
        assert f"--output_dir {data} holds files this project did not write" in line, line
        assert "README.md, config.json" in line, line
    assert tree_digest(data) == before and sorted(os.listdir(data)) == ["README.md", "config.json"]


def test_overwrite_output_dir_starts_an_earlier_run_again_but_never_removes_a_foreign_file(earlier_run, tmp_path,
                                                                                          capsys):
    out = tmp_path / "run"
    shutil.copytree(earlier_run, out)
    assert read_manifest(out) and read_manifest(out / "checkpoint-2")  # the final model and each checkpoint
    (out / "thesis.txt").write_text("years of work")
    (out / "checkpoint-2" / "notes.txt").write_text("mine")
    before = tree_digest(out)
    for extra in (["--overwrite_output_dir", "true"], ["--resume_from_checkpoint", "true"]):
        code, _, err = train(["--output_dir", str(out), *tiny(max_steps=4, save_steps=2), *extra], capsys)
        line = train_usage_error(code, err)
        assert "thesis.txt" in line and "did not write" in line, line
    assert tree_digest(out) == before
    os.remove(out / "thesis.txt")
    code, _, err = train(["--output_dir", str(out), *tiny(max_steps=2, save_steps=2), "--overwrite_output_dir",
                          "true"], capsys)
    line = train_usage_error(code, err)
    assert "checkpoint-2/notes.txt" in line, line  # inside a checkpoint that would be removed
    os.remove(out / "checkpoint-2" / "notes.txt")
    code, _, err = train(["--output_dir", str(out), *tiny(max_steps=2, save_steps=2), "--overwrite_output_dir",
                          "true"], capsys)
    assert code == 0, err
    again, earlier = tree_digest(out), tree_digest(earlier_run)
    assert sorted(again) == sorted(earlier)  # started again from scratch: the same run, the same files
    for name in ("model.safetensors", "checkpoint-2/model.safetensors", "checkpoint-2/optimizer.pt"):
        assert again[name] == earlier[name], name  # the same weights (training_args.bin names the other folder)
    assert not foreign_entries(out)


def test_an_architecture_option_that_disagrees_with_the_resumed_checkpoint_is_one_line(earlier_run, tmp_path,
                                                                                      capsys):
    out = tmp_path / "run"
    shutil.copytree(earlier_run, out)
    before = tree_digest(out)
    for option, value, words in [("d_model", "64", "--d_model 64 disagrees with the checkpoint"),
                                 ("config_overrides", "max_position_embeddings=40",
                                  "--config_overrides max_position_embeddings=40 disagrees")]:
        code, _, err = train(["--output_dir", str(out), *tiny(max_steps=4, **{option: value}),
                              "--resume_from_checkpoint", "true"], capsys)
        line = train_usage_error(code, err)
        saved = {"d_model": "d_model=32", "config_overrides": "max_position_embeddings=20"}[option]
        assert words in line and f"which has {saved}" in line, line
    assert tree_digest(out) == before


@pytest.mark.parametrize("option, value, words, checked_by", [
    ("max_train_minutes", "nan", "--max_train_minutes must be a finite number, got nan", "recipe"),
    ("max_train_minutes", "inf", "--max_train_minutes must be a finite number, got inf", "recipe"),
    ("learning_rate", "nan", "--learning_rate must be a finite number, got nan", "recipe"),
    ("label_smoothing_factor", "-0.1", "--label_smoothing_factor must be from 0 to below 1, got -0.1", "recipe"),
    ("label_smoothing_factor", "2", "--label_smoothing_factor must be from 0 to below 1, got 2.0", "recipe"),
    ("dropout", "1", "--dropout must be from 0 to below 1, got 1.0", "recipe"),
    ("ffn_dim", "-1", "--ffn_dim must be at least 1, got -1", "recipe"),
    ("d_model", "0", "--d_model must be at least 1, got 0", "recipe"),
    ("max_target_length", "0", "--max_target_length must be at least 1, got 0", "recipe"),
    ("weight_decay", "inf", "--weight_decay must be a finite number, got inf", "recipe"),
    ("max_source_length", "-5", "--max_source_length must be at least 1, got -5", "recipe"),
    ("bpe_dropout", "nan", "--bpe_dropout must be at least 0 and below 1, got nan", "argparse"),  # its own check
])
def test_a_number_option_that_is_not_finite_or_in_range_is_one_line_at_parse_time(option, value, words, checked_by,
                                                                                  tmp_path, capsys):
    """A usage error either way (exit status 2): the recipe's UsageError after the train command's usage, or the
    error of the recipe's own argument parser."""
    code, _, err = train(["--output_dir", str(tmp_path / "run"), *tiny(**{option: value})], capsys)
    line = train_usage_error(code, err) if checked_by == "recipe" else one_line(code, err)
    assert code == 2 and words in line, err
    assert not (tmp_path / "run").exists()


def test_the_options_of_a_run_are_checked_before_anything_is_written(tmp_path, capsys):
    assert "max_steps" in TINY_OPTIONS  # the tiny run of test_files_safety
    code, _, err = train(["--output_dir", str(tmp_path / "run"), *tiny(max_steps=2, max_train_minutes="nan")], capsys)
    assert train_usage_error(code, err) == f"{TRAIN_ERROR}--max_train_minutes must be a finite number, got nan", err
    assert not (tmp_path / "run").exists()


def test_what_a_killed_run_made_stays_ours_and_a_finished_run_records_its_logs(tmp_path, capsys):
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny(max_steps=2, save_steps=2, report_to="tensorboard")]
    code, stderr = run_forked(lambda: train_main(argv), kill_at=1, watch="checkpoint-2")
    assert code == -signal.SIGKILL, stderr
    assert (out / "runs").is_dir() and read_manifest(out) is None  # TensorBoard's logs, recorded by no manifest
    (tmp_path / "notes.txt").write_text("beside the run, not in it")
    code, _, err = train([*argv, "--overwrite_output_dir", "true"], capsys)  # the killed run's lock says: its logs
    assert code == 0, err
    assert not foreign_entries(out) and any(key.startswith("runs/") for key in read_manifest(out))
    (out / "runs" / "mine.txt").write_text("added by the user")
    code, _, err = train([*argv, "--overwrite_output_dir", "true"], capsys)
    line = train_usage_error(code, err)
    assert "runs/mine.txt" in line, line


def test_runs_again_and_again_into_one_folder_keep_their_logs_ours(tmp_path, capsys):
    """Each run with --overwrite_output_dir adds its TensorBoard logs to the runs/ folder of the earlier ones: what
    it adds inside a folder it found is recorded as this project's, so the run after it is not refused."""
    pytest.importorskip("tensorboard")
    out = tmp_path / "run"
    argv = ["--output_dir", str(out), *tiny(max_steps=2, save_steps=2, report_to="tensorboard")]
    for again in range(3):
        code, _, err = train([*argv, *(["--overwrite_output_dir", "true"] if again else [])], capsys)
        assert code == 0, err
        assert not foreign_entries(out)
    logs = [key for key in read_manifest(out) if key.startswith("runs/")]
    assert len({key.split("/")[1] for key in logs}) == len(os.listdir(out / "runs")) >= 1, logs


def test_a_runs_checkpoints_and_final_model_get_the_permissions_of_the_umask(earlier_run):
    mask = os.umask(0o022)
    os.umask(mask)  # the umask the fixture's run had
    for root, _, files in os.walk(earlier_run):
        assert stat.S_IMODE(os.stat(root).st_mode) == 0o777 & ~mask, root
        for name in files:  # model.safetensors included, which safetensors itself writes 0600
            assert stat.S_IMODE(os.stat(os.path.join(root, name)).st_mode) == 0o666 & ~mask, (root, name)


@pytest.mark.parametrize("damage", ["a token renamed", "not JSON"])
def test_a_tokenizer_to_train_with_that_cannot_be_loaded_is_one_line_naming_its_file(damage, tmp_path, capsys):
    from test_files_safety_export import _a_token_renamed

    folder = tmp_path / "tokenizer"
    tiny_tokenizer().save_pretrained(folder)
    if damage == "a token renamed":
        _a_token_renamed(folder)
    else:
        (folder / "tokenizer.json").write_text('{"model": {"vocab": ', encoding="utf-8")
    code, _, err = train(["--output_dir", str(tmp_path / "run"), *tiny(tokenizer_name=str(folder))], capsys)
    line = one_line(code, err)
    assert code == 1 and f"{folder / 'tokenizer.json'} cannot be loaded as a tokenizer" in line, line
    assert not (tmp_path / "run").exists()
