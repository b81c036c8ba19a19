"""Nothing a user saved is lost, for `vanilla-transformer export ctranslate2` and the folders it writes:
the export never deletes its input or a folder it did not make, is written through `files.staged_folder` (killed at
any point or stopped by a full disk, OUT is the old whole export or the new whole one, and the next export leaves no
hidden staging folder), gets the umask's permissions, and records the SHA-256 of the tokenizer it was exported with;
a damaged or mismatched CTranslate2 folder is one line naming it.

Kills are real SIGKILLs of a forked copy of this process at its k-th file-system event in the staging folder
(`test_files_safety.run_forked`); a full disk is RLIMIT_FSIZE there. The oracles: the bytes of the folders that were
there before (sha256 of every file), `sha256sum` for the fingerprints, our model's own translations.
"""

import json
import os
import shutil
import signal
import stat
import subprocess
import sys

import pytest
from test_files_safety import run_forked, tree_digest

from helpers import run_main
from translation_fixtures import tiny_tokenizer, tiny_translator
from vanilla_transformer.checkpoints.validate import CheckpointError
from vanilla_transformer.cli.main import main as cli_main
from vanilla_transformer.files import MANIFEST_NAME

pytest.importorskip("ctranslate2")

from vanilla_transformer.interop.ctranslate2_runtime import TOKENIZER_FINGERPRINT  # noqa: E402
from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2  # noqa: E402
from vanilla_transformer.translate import load_model_and_tokenizer, translate  # noqa: E402

SENTENCES = ["Zwei Hunde spielen im Schnee.", "Leute reparieren das Dach eines Hauses."]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A saved tiny translation model with its tokenizer."""
    folder = tmp_path_factory.mktemp("checkpoint") / "model"
    tiny_translator(seed=3).save_pretrained(folder)
    tiny_tokenizer().save_pretrained(folder)
    return folder


def one_error_line(code, out, err) -> str:
    assert "Traceback" not in err, err[-2000:]
    lines = [line for line in err.splitlines() if line.strip()]
    assert [line for line in lines if "error:" in line] == [lines[-1]], err[-2000:]
    return lines[-1]


def export(argv, capsys):
    return run_main(cli_main, ["export", "ctranslate2", *map(str, argv)], capsys)


def hidden(folder) -> list[str]:
    return sorted(name for name in os.listdir(folder) if name.startswith("."))


# ---------------------------------------------------------------------------------------------------------------
# Never deletes its input or anything it did not create


def test_export_never_replaces_its_input_or_a_folder_it_did_not_make(checkpoint, tmp_path, capsys):
    parent = tmp_path / "P"
    source = parent / "ckpt"
    shutil.copytree(checkpoint, source)
    (parent / "notes.txt").write_text("mine")
    before = tree_digest(parent)
    for out, words in [(source, "is one of the inputs"), (source / "ct2", "is inside the input"),
                       (parent, "contains the input")]:
        code, stdout, err = export([source, out, "--overwrite"], capsys)
        line = one_error_line(code, stdout, err)
        assert code == 1 and words in line, line
        assert tree_digest(parent) == before
    # --overwrite replaces only what this project wrote, never a folder of something else
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "thesis.tex").write_text("years of work")
    code, stdout, err = export([source, mine, "--overwrite"], capsys)
    line = one_error_line(code, stdout, err)
    assert code == 1 and f"{mine} has no {MANIFEST_NAME}" in line and "it holds thesis.tex" in line, line
    assert (mine / "thesis.tex").read_text() == "years of work" and os.listdir(mine) == ["thesis.tex"]
    # without --overwrite, even an earlier export stays
    out = tmp_path / "ct2"
    to_ctranslate2(source, out)
    old = tree_digest(out)
    code, stdout, err = export([source, out, "--quantization", "int8"], capsys)
    assert code == 1 and "already exists and is not empty; give --overwrite" in one_error_line(code, stdout, err)
    assert tree_digest(out) == old
    code, _, err = export([source, out, "--quantization", "int8", "--overwrite"], capsys)
    assert code == 0, err
    assert tree_digest(out) != old and hidden(tmp_path) == []


@pytest.mark.parametrize("umask", [0o022, 0o027])
def test_an_exported_folder_gets_the_permissions_of_the_umask(checkpoint, tmp_path, umask):
    previous = os.umask(umask)
    try:
        out = to_ctranslate2(checkpoint, tmp_path / "ct2")
    finally:
        os.umask(previous)
    assert stat.S_IMODE(out.stat().st_mode) == 0o777 & ~umask
    for name in os.listdir(out):
        assert stat.S_IMODE((out / name).stat().st_mode) == 0o666 & ~umask, name


def test_a_truncated_config_in_the_checkpoint_is_one_line(checkpoint, tmp_path, capsys):
    broken = tmp_path / "broken"
    shutil.copytree(checkpoint, broken)
    config = (broken / "config.json").read_bytes()
    (broken / "config.json").write_bytes(config[: len(config) // 2])
    code, stdout, err = export([broken, tmp_path / "ct2"], capsys)
    line = one_error_line(code, stdout, err)
    assert code == 1 and f"{broken / 'config.json'} cannot be read" in line, line
    assert sorted(os.listdir(tmp_path)) == ["broken"]


# ---------------------------------------------------------------------------------------------------------------
# Damaged folders and replaced tokenizers: one line naming the folder and the file


@pytest.fixture(scope="module")
def exported(checkpoint, tmp_path_factory):
    return to_ctranslate2(checkpoint, tmp_path_factory.mktemp("exported") / "ct2")


def translate_line(model, capsys) -> tuple[int, str]:
    code, stdout, err = run_main(cli_main, ["translate", "--model", str(model), *SENTENCES], capsys)
    return code, (one_error_line(code, stdout, err) if code else stdout)


def test_a_damaged_ctranslate2_folder_is_one_line_naming_it(exported, tmp_path, capsys):
    def damaged(name, change):
        folder = tmp_path / name
        shutil.copytree(exported, folder)
        change(folder)
        return folder

    def cut(path):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

    cases = {
        "model.bin cut short": (damaged("a", lambda f: cut(f / "model.bin")), "model.bin or config.json is damaged"),
        "no vocabulary": (damaged("b", lambda f: (f / "shared_vocabulary.json").unlink()),
                          "has no CTranslate2 vocabulary"),
        "vocabulary cut short": (damaged("c", lambda f: cut(f / "shared_vocabulary.json")),
                                 "shared_vocabulary.json cannot be read"),
        "fingerprint cut short": (damaged("d", lambda f: cut(f / TOKENIZER_FINGERPRINT)),
                                  f"{TOKENIZER_FINGERPRINT} cannot be read"),
    }
    for case, (folder, words) in cases.items():
        code, line = translate_line(folder, capsys)
        assert code == 1 and words in line and str(folder) in line, (case, line)
        assert "export it again" in line, line
    code, out = translate_line(exported, capsys)  # the whole folder still translates
    assert code == 0 and len(out.splitlines()) == len(SENTENCES)


def sha256sum(path) -> str:
    return subprocess.run(["sha256sum", str(path)], capture_output=True, text=True, check=True).stdout.split()[0]


def test_the_export_records_the_tokenizer_and_a_replaced_tokenizer_is_refused(exported, checkpoint, tmp_path,
                                                                              capsys):
    recorded = json.loads((exported / TOKENIZER_FINGERPRINT).read_text())["sha256"]
    assert set(recorded) >= {"tokenizer.json", "tokenizer_config.json"}
    assert recorded == {name: sha256sum(exported / name) for name in recorded}  # the oracle: sha256sum
    # another run's tokenizer: same size, two token ids swapped (the vocabularies now disagree with it)
    swapped = tmp_path / "swapped"
    shutil.copytree(exported, swapped)
    tokenizer = json.loads((swapped / "tokenizer.json").read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    first, second = sorted(vocab, key=vocab.get)[10:12]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    (swapped / "tokenizer.json").write_text(json.dumps(tokenizer), encoding="utf-8")
    code, line = translate_line(swapped, capsys)
    assert code == 1 and f"{swapped / 'tokenizer.json'} is not the tokenizer {swapped} was exported with" in line
    assert f"sha256 {sha256sum(swapped / 'tokenizer.json')[:12]}" in line and recorded["tokenizer.json"][:12] in line
    with pytest.raises(CheckpointError, match="is not the tokenizer"):
        load_model_and_tokenizer(str(swapped), "cpu")
    # a tokenizer file of the export removed
    lacking = tmp_path / "lacking"
    shutil.copytree(exported, lacking)
    (lacking / "tokenizer_config.json").unlink()
    code, line = translate_line(lacking, capsys)
    assert code == 1 and f"{lacking / 'tokenizer_config.json'} is missing" in line, line
    # the exported tokenizer put back: the folder translates as the PyTorch model does
    shutil.copy(exported / "tokenizer.json", swapped / "tokenizer.json")
    model, tokenizer = load_model_and_tokenizer(str(swapped), "cpu")
    reference, reference_tokenizer = load_model_and_tokenizer(str(checkpoint), "cpu")
    assert translate(model, tokenizer, SENTENCES, num_beams=1, max_new_tokens=8) == translate(
        reference, reference_tokenizer, SENTENCES, num_beams=1, max_new_tokens=8)


def _a_token_renamed(folder) -> None:
    """Rename, in the folder's tokenizer.json, the token its first merge makes (valid JSON, as an editor leaves it):
    the merge then names a token the vocabulary no longer has."""
    path = folder / "tokenizer.json"
    tokenizer = json.loads(path.read_text(encoding="utf-8"))
    merge = tokenizer["model"]["merges"][0]
    made = "".join(merge) if isinstance(merge, list) else merge.replace(" ", "")
    vocab = tokenizer["model"]["vocab"]
    vocab[made + "x"] = vocab.pop(made)
    path.write_text(json.dumps(tokenizer), encoding="utf-8")


@pytest.mark.parametrize("damage", ["a token renamed", "not JSON", "tokenizer_config.json not JSON"])
@pytest.mark.parametrize("kind", ["pytorch", "ctranslate2 without fingerprint"])
def test_a_tokenizer_that_cannot_be_loaded_is_one_line_naming_its_file(checkpoint, exported, tmp_path, capsys, kind,
                                                                       damage):
    from vanilla_transformer.checkpoints.load import load_tokenizer

    folder = tmp_path / "damaged"
    shutil.copytree(checkpoint if kind == "pytorch" else exported, folder)
    (folder / TOKENIZER_FINGERPRINT).unlink(missing_ok=True)  # an export of before fingerprints: nothing checks it
    broken = folder / ("tokenizer_config.json" if damage.startswith("tokenizer_config") else "tokenizer.json")
    if damage == "a token renamed":
        _a_token_renamed(folder)
    else:
        broken.write_text('{"model": {"vocab": ', encoding="utf-8")
    code, line = translate_line(folder, capsys)
    assert code == 1 and str(broken) in line, line
    if damage == "a token renamed":
        assert "cannot be loaded as a tokenizer (Token" in line and "out of vocabulary" in line, line
    if kind != "pytorch":  # the loader of a CTranslate2 folder's tokenizer, called alone
        with pytest.raises(CheckpointError, match=str(broken)):
            load_tokenizer(str(folder))
    elif damage == "a token renamed":  # the export reads the tokenizer too: one line, nothing written
        code, out, err = export([folder, tmp_path / "ct2"], capsys)
        line = one_error_line(code, out, err)
        assert code == 1 and f"{broken} cannot be loaded as a tokenizer" in line, line
        assert sorted(os.listdir(tmp_path)) == ["damaged"]


def test_a_folder_exported_before_fingerprints_still_loads(exported, tmp_path):
    older = tmp_path / "older"
    shutil.copytree(exported, older)
    (older / TOKENIZER_FINGERPRINT).unlink()
    model, tokenizer = load_model_and_tokenizer(str(older), "cpu")
    assert translate(model, tokenizer, SENTENCES[:1], max_new_tokens=4)


# ---------------------------------------------------------------------------------------------------------------
# Fault injection: kill -9 after each file of the staging folder, and a full disk


def count_events(function, watch, tmp_path) -> list[str]:
    log = str(tmp_path / "events")
    code, stderr = run_forked(function, watch=watch, log=log)
    assert code == 0, stderr
    with open(f"{log}.events") as f:
        events = f.read().splitlines()
    os.remove(f"{log}.events")
    return events


@pytest.mark.slow  # an export killed at each of its 14 file events, in a forked process each time
def test_kill_at_every_point_of_an_export_leaves_the_old_export_or_the_new_one(checkpoint, tmp_path):
    out = tmp_path / "ct2"
    to_ctranslate2(checkpoint, out)  # the old export (float32)
    old = tree_digest(out)

    def new_export():
        cli_main(["export", "ctranslate2", str(checkpoint), str(out), "--quantization", "int8", "--overwrite"])

    events = count_events(new_export, ".ct2.staging-", tmp_path)
    new = tree_digest(out)
    assert new != old
    # the files Python writes in the staging folder (tokenizer.json is written by the tokenizers library, between
    # two of them), the rename into place and the staging folder's removal: 14 events on transformers 5.24
    assert len([e for e in events if e.startswith("open ")]) >= 6 and any("rename" in e for e in events), events
    shutil.rmtree(out)
    to_ctranslate2(checkpoint, out)
    states = set()
    for kill_at in range(1, len(events) + 1):
        code, stderr = run_forked(new_export, kill_at=kill_at, watch=".ct2.staging-")
        assert code == -signal.SIGKILL, (kill_at, stderr)
        state = tree_digest(out)
        assert state in (old, new), (kill_at, events[kill_at - 1])  # the old whole export or the new whole one
        states.add("new" if state == new else "old")
        if state == new:  # killed after the swap: put the old export back for the next kill point
            shutil.rmtree(out)
            to_ctranslate2(checkpoint, out)
        assert hidden(tmp_path) == [] or all(".ct2.staging-" in name for name in hidden(tmp_path))
    assert states == {"old", "new"}  # both sides of the commit point were hit
    # the next export removes what the killed ones left and leaves nothing hidden
    code, stderr = run_forked(new_export)
    assert code == 0 and hidden(tmp_path) == [] and tree_digest(out) == new, stderr


def test_a_killed_first_export_leaves_no_folder_or_a_whole_one(checkpoint, tmp_path, capsys):
    out = tmp_path / "ct2"
    code, stderr = run_forked(lambda: to_ctranslate2(checkpoint, out), kill_at=4, watch=".ct2.staging-")
    assert code == -signal.SIGKILL, stderr
    assert not out.exists() and len(hidden(tmp_path)) == 1
    code, _, err = export([checkpoint, out], capsys)
    assert code == 0, err
    assert "left by a run that was killed (process" in err
    assert hidden(tmp_path) == [] and sorted(os.listdir(out)) == sorted(
        [MANIFEST_NAME, "config.json", "generation_config.json", "model.bin", "shared_vocabulary.json",
         "tokenizer.json", "tokenizer_config.json", TOKENIZER_FINGERPRINT])


def with_stderr_on_fd2(function, *args):
    """Call `function` with sys.stderr writing to file descriptor 2 (which `run_forked` reads; pytest's capture
    replaced sys.stderr with a buffer of its own)."""
    sys.stderr = open(2, "w", closefd=False, buffering=1)  # noqa: SIM115  (the forked copy exits right after)
    function(*args)


def test_a_full_disk_during_an_export_is_one_line_and_the_old_export_stays(checkpoint, tmp_path, capsys):
    out = tmp_path / "ct2"
    to_ctranslate2(checkpoint, out, "int8")
    old = tree_digest(out)
    size = (out / "model.bin").stat().st_size
    argv = ["export", "ctranslate2", str(checkpoint), str(out), "--overwrite"]
    # float32 weights take more room than int8 ones (~380 kB against ~210 kB here, the position table being float32
    # in both): a file-size limit just above the int8 model.bin stops the new float32 one half-way
    code, stderr = run_forked(lambda: with_stderr_on_fd2(cli_main, argv), fsize=size + 4096)
    line = stderr.strip().splitlines()[-1]
    assert code == 1 and "Traceback" not in stderr, stderr
    assert line.startswith(f"vanilla-transformer export ctranslate2: error: Cannot write to {out}"), line
    assert "File too large" in line, line
    assert tree_digest(out) == old and hidden(tmp_path) == []
    code, _, err = run_main(cli_main, argv, capsys)  # with room again
    assert code == 0 and tree_digest(out) != old and hidden(tmp_path) == [], err
