"""`vanilla-transformer distill`: a tiny teacher distilled into a tiny student on number words.

Each stage's output is checked against what it should be (the teacher's translations against the teacher translating
each sentence alone, the student's weights against the mean of its last checkpoints read from the files, the report's
scores against sacreBLEU run on the translation files); a chain stopped at every stage (fault injection, and a
SIGKILL of the command in a subprocess) resumes without translating a line twice and ends with the same files as a
chain run straight through; and bad input is one line, before anything is written."""

import errno
import json
import math
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO_ROOT, run_main
from translation_fixtures import tiny_tokenizer, tiny_translator
from vanilla_transformer import translate as translate_module
from vanilla_transformer.cli.main import main

pytest.importorskip("ctranslate2")
pytest.importorskip("datasets")

ERROR = "vanilla-transformer distill: error: "
# the student: a demo-preset run of a few steps, checkpoints every 2 steps, the last 2 averaged
STUDENT = ["--preset", "demo", "--d_model", "32", "--encoder_layers", "2", "--decoder_layers", "1",
           "--attention_heads", "4", "--ffn_dim", "64", "--vocab_size", "120", "--max_tokens", "200",
           "--config_overrides", "max_position_embeddings=64", "--report_to", "none", "--disable_tqdm", "true",
           "--num_sample_translations", "0", "--warmup_steps", "1", "--max_steps", "6", "--save_steps", "2",
           "--average_last_n_checkpoints", "2", "--watch_steps", "0"]
CHUNK = 5  # the teacher's pass translates this many lines per chunk in these tests (a few chunks per corpus)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A teacher (a tiny random translator whose card says en -> de, beam 2) and number words: train, val, test."""
    from vanilla_transformer.cards.model_card import save_for_hub
    from vanilla_transformer.training.numbers import number_translation_splits

    root = tmp_path_factory.mktemp("distill-files")
    model = tiny_translator(seed=1)
    model.generation_config.num_beams = 2
    model.generation_config.max_length = 12  # a random model writes to its maximum: keep it short
    save_for_hub(model, tiny_tokenizer(), root / "teacher", source_lang="en", target_lang="de")
    splits = number_translation_splits(train_size=24, validation_size=6, test_size=6, seed=5)
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test")):
        (root / f"{name}.en").write_text("\n".join(splits[split]["source"]) + "\n", encoding="utf-8")
        (root / f"{name}.de").write_text("\n".join(splits[split]["target"]) + "\n", encoding="utf-8")
    return root


def command(files, out, *, teacher=None, threads="1", student=STUDENT) -> list[str]:
    return ["distill", "--teacher", str(teacher or files / "teacher"), "--out", str(out),
            "--train-source", str(files / "train.en"), "--validation-source", str(files / "val.en"),
            "--validation-target", str(files / "val.de"), "--test-source", str(files / "test.en"),
            "--test-target", str(files / "test.de"), "--threads", threads, "--", *student]


TRANSLATE_CHUNK = translate_module._translate_chunk  # unpatched, whatever a test patched before


class Stop(BaseException):
    """A kill at a chosen point: not an Exception, so no handler of the command turns it into an error line."""


class Counted:
    """Every line the teacher's pass translates (the PyTorch teacher's chunks; the report translates with
    CTranslate2), and a Stop raised before the chunk numbered `stop_at` (counted from 1)."""

    def __init__(self, monkeypatch, stop_at: int | None = None):
        from vanilla_transformer import translate
        from vanilla_transformer.interop.ctranslate2_runtime import CTranslate2Translator

        self.lines, self.chunks, original = [], 0, TRANSLATE_CHUNK

        def counting(model, tokenizer, texts, *args, **kwargs):
            if not isinstance(model, CTranslate2Translator):
                self.chunks += 1
                if stop_at is not None and self.chunks >= stop_at:
                    raise Stop(f"stopped before chunk {self.chunks}")
                self.lines.extend(texts)
            return original(model, tokenizer, texts, *args, **kwargs)

        monkeypatch.setattr(translate, "_translate_chunk", counting)
        monkeypatch.setattr(translate, "CHUNK_SIZE", CHUNK)


def stop_after_teacher(monkeypatch):
    """The chain stops where the student's training would start."""
    from vanilla_transformer.training import distill

    def stop(d):
        raise Stop("stopped before the student")

    monkeypatch.setattr(distill, "train_student", stop)


def lines(path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def translated_alone(folder, sources) -> list[str]:
    """The oracle of the teacher's pass: each sentence translated alone (batch of one), by the folder's engine."""
    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    model, tokenizer = load_model_and_tokenizer(str(folder), "cpu")
    return [translate(model, tokenizer, [source], batch_size=1)[0] for source in sources]


# ----------------------------------------------------------------------------------------------------------------
# The teacher's pass (fast: the chain stops before the student)


@pytest.mark.parametrize("engine", ["pytorch", "ctranslate2"])
def test_the_teachers_pass_is_the_teacher_translating_each_line(files, tmp_path, monkeypatch, capsys, engine):
    teacher = files / "teacher"
    if engine == "ctranslate2":
        from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

        teacher = to_ctranslate2(str(teacher), tmp_path / "teacher-ct2", "float32")
    counted = Counted(monkeypatch)
    stop_after_teacher(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out", teacher=teacher)[:-len(STUDENT) - 1])
    sources = lines(files / "train.en")
    if engine == "pytorch":
        assert counted.lines == sources  # each line once
    assert lines(tmp_path / "out" / "teacher" / "train.de") == translated_alone(teacher, sources)
    assert sorted(os.listdir(tmp_path / "out" / "teacher")) == ["train.de"]  # no .partial, no .progress.json left
    record = json.loads((tmp_path / "out" / "distill.json").read_text())
    assert record["arguments"]["source_lang"] == "en" and record["arguments"]["target_lang"] == "de"


def test_a_stopped_teachers_pass_resumes_without_translating_a_line_twice(files, tmp_path, monkeypatch, capsys):
    sources = lines(files / "train.en")
    straight = tmp_path / "straight"
    stop_after_teacher(monkeypatch)
    Counted(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, straight))
    first = Counted(monkeypatch, stop_at=3)  # killed after two chunks were written
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    assert first.lines == sources[:2 * CHUNK]
    assert not (tmp_path / "out" / "teacher" / "train.de").exists()
    progress = json.loads((tmp_path / "out" / "teacher" / "train.de.progress.json").read_text())
    assert progress["lines"] == 2 * CHUNK
    second = Counted(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    assert second.lines == sources[2 * CHUNK:]  # the rest, and only the rest
    assert (tmp_path / "out" / "teacher" / "train.de").read_bytes() == (straight / "teacher" / "train.de").read_bytes()
    third = Counted(monkeypatch)  # once more: the pass is finished
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    assert third.lines == []


def test_a_full_disk_during_the_teachers_pass_is_one_line_and_a_rerun_resumes(files, tmp_path, monkeypatch, capsys):
    from vanilla_transformer.files import resumable

    sources = lines(files / "train.en")
    stop_after_teacher(monkeypatch)
    writes = {"partial": 0}
    real_write = os.write

    def full_disk(fd, data):  # the second chunk written to train.de.partial finds the disk full
        if os.readlink(f"/proc/self/fd/{fd}").endswith(".partial"):
            writes["partial"] += 1
            if writes["partial"] >= 2:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real_write(fd, data)

    monkeypatch.setattr(resumable.os, "write", full_disk)
    Counted(monkeypatch)
    code, out, err = run_main(main, command(files, tmp_path / "out"), capsys)
    output = tmp_path / "out" / "teacher" / "train.de"
    # the progress bar of the teacher's pass, then one line
    assert code == 1 and err.splitlines()[-1] == f"{ERROR}Cannot write to {output}: No space left on device.", err
    assert err.count(ERROR) == 1 and "Traceback" not in err, err
    monkeypatch.setattr(resumable.os, "write", real_write)
    assert json.loads((tmp_path / "out" / "teacher" / "train.de.progress.json").read_text())["lines"] == CHUNK
    again = Counted(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    assert again.lines == sources[CHUNK:]  # from the first line not on disk
    assert lines(output) == translated_alone(files / "teacher", sources)


def test_ctrl_c_in_the_teachers_pass_is_one_line_and_a_rerun_translates_only_the_rest(files, tmp_path, monkeypatch,
                                                                                     capsys):
    sources = lines(files / "train.en")
    stop_after_teacher(monkeypatch)
    Counted(monkeypatch)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    original = translate_module._translate_chunk
    chunks = []

    def ctrl_c_at_the_third_chunk(*args, **kwargs):
        chunks.append(1)
        return interrupted() if len(chunks) == 3 else original(*args, **kwargs)

    monkeypatch.setattr(translate_module, "_translate_chunk", ctrl_c_at_the_third_chunk)
    code, _, err = run_main(main, command(files, tmp_path / "out"), capsys)
    assert code == 130 and err.splitlines()[-1] == f"{ERROR}interrupted", err
    assert "Traceback" not in err and err.count(ERROR) == 1, err
    again = Counted(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    assert again.lines == sources[2 * CHUNK:]
    assert lines(tmp_path / "out" / "teacher" / "train.de") == translated_alone(files / "teacher", sources)


# ----------------------------------------------------------------------------------------------------------------
# Bad input: one line, nothing written


def assert_usage_error(code, err, words):
    lines_ = err.strip().splitlines()
    assert code == 2 and err.startswith("usage: vanilla-transformer distill") and "Traceback" not in err, err
    assert lines_[-1].startswith(ERROR) and sum(ERROR in line for line in lines_) == 1, err
    assert all(word in lines_[-1] for word in words), err


def test_a_teacher_that_is_not_a_translation_model_is_refused(files, tmp_path, capsys):
    from helpers import tiny_config
    from vanilla_transformer import VanillaTransformerForCausalLM

    VanillaTransformerForCausalLM(tiny_config()).save_pretrained(tmp_path / "lm")
    capsys.readouterr()  # save_pretrained's progress bar is not the command's output
    code, out, err = run_main(main, command(files, tmp_path / "out", teacher=tmp_path / "lm"), capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
    assert "decoder-only language model" in err and "translation model" in err, err
    assert not (tmp_path / "out").exists()


def test_a_teacher_of_other_languages_is_refused(files, tmp_path, capsys):
    (tmp_path / "val.fr").write_text((files / "val.de").read_text())
    argv = command(files, tmp_path / "out")
    argv[argv.index("--validation-target") + 1] = str(tmp_path / "val.fr")
    argv[argv.index("--test-target") + 1] = str(tmp_path / "val.fr")
    code, out, err = run_main(main, argv, capsys)
    assert_usage_error(code, err, ["translates en -> de", "target language is fr"])
    code, out, err = run_main(main, [*command(files, tmp_path / "out")[:-len(STUDENT) - 1], "--source-lang", "fr"],
                              capsys)
    assert_usage_error(code, err, ["translates en -> de", "source language is fr"])
    assert not (tmp_path / "out").exists()


def test_a_damaged_ctranslate2_teacher_is_refused_before_anything_is_written(files, tmp_path, capsys):
    import shutil

    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    whole = to_ctranslate2(str(files / "teacher"), tmp_path / "teacher-ct2", "float32")
    for name in ("shared_vocabulary.json", "tokenizer.json", "tokenizer_config.json"):
        teacher = tmp_path / f"without-{name}"
        shutil.copytree(whole, teacher)
        os.remove(teacher / name)
        code, _, err = run_main(main, command(files, tmp_path / "out", teacher=teacher), capsys)
        assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR) and str(teacher) in err, (name, err)
        assert not (tmp_path / "out").exists(), name


@pytest.mark.parametrize("case", ["empty train source", "blank train source", "validation", "test"])
def test_a_corpus_the_recipe_would_refuse_is_refused_before_the_teachers_pass(files, tmp_path, monkeypatch, capsys,
                                                                               case):
    Counted(monkeypatch)
    argv = command(files, tmp_path / "out")
    if case.endswith("train source"):
        (tmp_path / "train.en").write_text("" if case.startswith("empty") else "\n \r\n\t\n", encoding="utf-8")
        argv[argv.index("--train-source") + 1] = str(tmp_path / "train.en")
        words = ["train source file", "is empty"]
    else:
        (tmp_path / "short.de").write_text("".join(line + "\n" for line in lines(files / "val.de")[:-1]), encoding="utf-8")
        argv[argv.index(f"--{case}-target") + 1] = str(tmp_path / "short.de")
        words = [f"The {case} files do not pair up"]
    code, _, err = run_main(main, argv, capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
    assert all(word in err for word in words), err
    assert not (tmp_path / "out").exists()


def test_an_output_folder_that_is_or_holds_an_input_is_refused(files, tmp_path, capsys):
    for out, words in ((files, ["contains the input"]), (files / "teacher", ["is one of the inputs"]),
                       (files / "teacher" / "distilled", ["is inside the input"])):
        before = sorted(os.listdir(files))
        code, _, err = run_main(main, command(files, out), capsys)
        assert_usage_error(code, err, words)
        assert sorted(os.listdir(files)) == before and not (files / "teacher" / "distilled").exists()
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    code, _, err = run_main(main, command(files, tmp_path / "mine"), capsys)
    assert_usage_error(code, err, ["not empty and holds no distillation"])
    assert os.listdir(tmp_path / "mine") == ["notes.txt"]


def test_options_that_do_not_go_together_are_usage_errors(files, tmp_path, capsys):
    argv = command(files, tmp_path / "out")
    for change, words in (
            (lambda a: a[:a.index("--validation-target")] + a[a.index("--validation-target") + 2:],
             ["--validation-source and --validation-target together"]),
            (lambda a: [*a, "--output_dir", "x"], ["--output-dir is set by distill"]),
            (lambda a: [*a, "--train-target", "x"], ["--train-target is set by distill"]),
            (lambda a: a[:a.index("--")] + ["--", "oops"], ["unexpected 'oops'"]),
            (lambda a: a[:a.index("--")] + ["--threads", "0"], ["--threads"]),
            (lambda a: a[:a.index("--")] + ["--target-lang", "German"], ["not a language code"]),
            (lambda a: a[:a.index("--")] + ["--teacher-compute-type", "int8"],
             ["applies to a teacher exported to CTranslate2"])):
        code, _, err = run_main(main, change(list(argv)), capsys)
        assert_usage_error(code, err, words)
    assert not (tmp_path / "out").exists()


def test_a_folder_of_another_distillation_is_refused(files, tmp_path, monkeypatch, capsys):
    stop_after_teacher(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, tmp_path / "out"))
    capsys.readouterr()
    code, _, err = run_main(main, command(files, tmp_path / "out", threads="1,2"), capsys)
    assert_usage_error(code, err, ["holds a distillation of other arguments", "threads"])


@pytest.mark.parametrize("changed", ["teacher's weights", "training source"])
def test_a_folder_whose_inputs_changed_since_is_refused(files, tmp_path, monkeypatch, capsys, changed):
    import shutil

    shutil.copytree(files, tmp_path / "files")
    ours = tmp_path / "files"
    stop_after_teacher(monkeypatch)
    with pytest.raises(Stop):
        main(command(ours, tmp_path / "out"))
    capsys.readouterr()
    path = ours / "teacher" / "model.safetensors" if changed.startswith("teacher") else ours / "train.en"
    if changed.startswith("teacher"):  # the teacher trained further in its folder: other weights, same size
        from safetensors.torch import save_file

        weights = load_file(path)
        save_file({name: tensor + 1 for name, tensor in weights.items()}, str(path), metadata={"format": "pt"})
    else:  # the corpus edited: one sentence replaced
        path.write_text(path.read_text(encoding="utf-8").replace("\n", "\nnine\n", 1), encoding="utf-8")
    before = {name: (tmp_path / "out" / name).stat().st_mtime_ns for name in ("distill.json", "teacher/train.de")}
    code, _, err = run_main(main, command(ours, tmp_path / "out"), capsys)
    assert_usage_error(code, err, ["changed since", str(path)])
    assert {name: (tmp_path / "out" / name).stat().st_mtime_ns for name in before} == before


# ----------------------------------------------------------------------------------------------------------------
# The whole chain (slow: the student trains)


@pytest.fixture(scope="module")
def chain(files, tmp_path_factory):
    """The chain run straight through."""
    out = tmp_path_factory.mktemp("chain") / "distilled"
    main(command(files, out, threads="1,2"))
    return out


def mean_of_checkpoints(folders) -> dict:
    states = [load_file(folder / "model.safetensors") for folder in folders]
    return {name: sum(state[name].double() for state in states) / len(states) for name in states[0]}


@pytest.mark.slow  # trains the student
def test_every_stage_leaves_what_it_should(files, chain):
    sources = lines(files / "train.en")
    assert lines(chain / "teacher" / "train.de") == translated_alone(files / "teacher", sources)
    student = chain / "student"
    results = json.loads((student / "all_results.json").read_text())
    assert results["train_pairs_read"] == len(sources) and results["averaged_checkpoints"] == 2
    config = json.loads((student / "config.json").read_text())
    assert (config["encoder_layers"], config["decoder_layers"], config["d_model"]) == (2, 1, 32)
    averaged = mean_of_checkpoints([student / "checkpoint-4", student / "checkpoint-6"])
    final = load_file(student / "model.safetensors")
    for name, tensor in final.items():
        torch.testing.assert_close(tensor.double(), averaged[name], rtol=0, atol=1e-6, msg=name)
    # the export: CTranslate2 reads its weights as int8 (computing in int8 with float32 elsewhere), and it translates
    # as the student's PyTorch model does, up to int8's rounding (here: the same translations of most sentences)
    import ctranslate2

    assert ctranslate2.Translator(str(chain / "student-ct2")).compute_type.startswith("int8")
    float32 = chain / "report" / "exports" / "student-float32"
    assert ctranslate2.Translator(str(float32)).compute_type == "float32"
    tests = lines(files / "test.en")
    assert translated_alone(float32, tests) == translated_alone(student, tests)
    report = json.loads((chain / "report.json").read_text())
    assert report["models"]["student"]["int8"]["folder"] == str(chain / "student-ct2")


@pytest.mark.slow  # trains the student
def test_the_reports_numbers_are_those_of_the_files(files, chain):
    import sacrebleu

    report = json.loads((chain / "report.json").read_text())
    references = {"validation": lines(files / "val.de"), "test": lines(files / "test.de")}
    for role in ("teacher", "student"):
        for compute_type in ("int8", "float32"):
            entry = report["models"][role][compute_type]
            for split, scores in entry["scores"].items():
                hypotheses = [line.strip() for line in lines(chain / scores["translations"])]
                assert len(hypotheses) == len(references[split])
                bleu = sacrebleu.BLEU(tokenize="char").corpus_score(hypotheses, [references[split]]).score
                chrf = sacrebleu.CHRF().corpus_score(hypotheses, [references[split]]).score
                assert (scores["bleu"], scores["chrf"]) == (round(bleu, 2), round(chrf, 2)), (role, split)
            assert sorted(entry["speed"]) == ["1", "2"]
            folder = files / "teacher" if role == "teacher" else chain / "student"
            beams = json.loads((folder / "generation_config.json").read_text()).get("num_beams", 1)
            for speed in entry["speed"].values():
                assert speed["sentences"] == 6 and speed["beams"] == beams  # each model's own beam search
                assert speed["sentences_per_second"] == pytest.approx(speed["sentences"] / speed["seconds"], rel=1e-3)
    from vanilla_transformer import VanillaTransformerForConditionalGeneration

    for role, folder in (("teacher", files / "teacher"), ("student", chain / "student")):
        model = VanillaTransformerForConditionalGeneration.from_pretrained(folder)
        assert report[role]["parameters"] == sum(p.numel() for p in model.parameters())
        assert report[role]["size_bytes"]["pytorch weights"] == (folder / "model.safetensors").stat().st_size
    text = (chain / "report.md").read_text()
    assert f"| parameters | {report['teacher']['parameters']:,} | {report['student']['parameters']:,} |" in text
    bleu = report["models"]["student"]["int8"]["scores"]["test"]["bleu"]
    teacher_bleu = report["models"]["teacher"]["int8"]["scores"]["test"]["bleu"]
    assert f"| BLEU test, int8 | {teacher_bleu:.2f} | {bleu:.2f} | {bleu - teacher_bleu:+.2f} |" in text


@pytest.mark.slow  # trains the student twice
def test_a_chain_stopped_at_every_stage_resumes_and_ends_with_the_same_files(files, chain, tmp_path, monkeypatch,
                                                                             capsys):
    from vanilla_transformer.interop import export_ctranslate2
    from vanilla_transformer.training import distill, train

    out, argv = tmp_path / "distilled", command(files, tmp_path / "distilled", threads="1,2")
    sources = lines(files / "train.en")
    counted = Counted(monkeypatch, stop_at=2)  # 1. the teacher's pass, after its first chunk
    with pytest.raises(Stop):
        main(argv)
    translated = list(counted.lines)

    from transformers import TrainerCallback

    class StopAfterCheckpoint(TrainerCallback):  # 2. the student, once checkpoint-2 is saved
        def on_save(self, args, state, control, **kwargs):
            raise Stop("stopped after a checkpoint")

    real_main = train.main
    monkeypatch.setattr(distill.recipe, "main", lambda argv: real_main(argv, callbacks=[StopAfterCheckpoint()]))
    counted = Counted(monkeypatch)
    with pytest.raises(Stop):
        main(argv)
    translated += counted.lines
    assert translated == sources  # every line once
    assert sorted(p.name for p in (out / "student").glob("checkpoint-*")) == ["checkpoint-2"]

    monkeypatch.setattr(distill.recipe, "main", real_main)  # 3. the averaging of the last checkpoints
    from vanilla_transformer.training import evaluation

    real_average = evaluation.average_state_dicts

    def stop_averaging(checkpoints):
        raise Stop("stopped while averaging")

    monkeypatch.setattr(evaluation, "average_state_dicts", stop_averaging)
    with pytest.raises(Stop):
        main(argv)
    assert sorted(p.name for p in (out / "student").glob("checkpoint-*")) == ["checkpoint-4", "checkpoint-6"]
    assert not (out / "student" / "model.safetensors").exists()
    monkeypatch.setattr(evaluation, "average_state_dicts", real_average)
    # 4. the export, half written
    real_fingerprint = export_ctranslate2.write_tokenizer_fingerprint

    def stop_export(*args):
        raise Stop("stopped while exporting")

    monkeypatch.setattr(export_ctranslate2, "write_tokenizer_fingerprint", stop_export)
    with pytest.raises(Stop):
        main(argv)
    assert not (out / "student-ct2").exists() and (out / "student" / "all_results.json").is_file()
    trained = (out / "student" / "model.safetensors").stat().st_mtime_ns
    monkeypatch.setattr(export_ctranslate2, "write_tokenizer_fingerprint", real_fingerprint)

    real_timed, calls = distill.timed, []  # 5. the report, after three of its translations

    def stop_timing(*args):
        if len(calls) == 3:
            raise Stop("stopped while measuring")
        calls.append((*args[1:4], args[5]))
        return real_timed(*args)

    monkeypatch.setattr(distill, "timed", stop_timing)
    with pytest.raises(Stop):
        main(argv)
    monkeypatch.setattr(distill, "timed", lambda *args: calls.append((*args[1:4], args[5])) or real_timed(*args))
    counted = Counted(monkeypatch)
    code, out_text, err = run_main(main, argv, capsys)
    assert code == 0, err[-2000:]
    assert counted.lines == [] and "Teacher's translations: finished" in out_text and "Student: finished" in out_text
    assert (out / "student" / "model.safetensors").stat().st_mtime_ns == trained  # not trained again
    assert len(calls) == len(set(calls)) == 2 * 2 * 3  # every translation of the report once: 2 models x 2 types x
    # (test at 1 and 2 threads, validation once)

    assert (out / "teacher" / "train.de").read_bytes() == (chain / "teacher" / "train.de").read_bytes()
    ours, theirs = load_file(out / "student" / "model.safetensors"), load_file(chain / "student" / "model.safetensors")
    # every weight but the keys' biases, which change no output (softmax(q.(k + b)) = softmax(q.k): the same q.b is
    # added to every score of a query), so their gradients are rounding noise that Adam scales up to full steps
    for name in theirs:
        if not name.endswith("k_proj.bias"):
            torch.testing.assert_close(ours[name], theirs[name], rtol=0, atol=1e-5, msg=name)
    for path in (chain / "report" / "translations").iterdir():
        assert (out / "report" / "translations" / path.name).read_text() == path.read_text(), path.name


@pytest.mark.slow  # the command in a subprocess, and the student trained
def test_a_chain_killed_while_the_student_trains_resumes_it(files, tmp_path, capsys):
    out = tmp_path / "distilled"
    argv = command(files, out)
    argv[argv.index("--max_steps") + 1] = "40"  # time to kill it between its checkpoints
    process = subprocess.Popen([sys.executable, "-m", "training.distill", *argv[1:]], cwd=REPO_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.monotonic() + 300
        while (not list((out / "student").glob("checkpoint-*/trainer_state.json")) and process.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.1)
        killed = process.poll() is None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert killed, "the chain ended before it was killed"
    translations = (out / "teacher" / "train.de").stat().st_mtime_ns
    code, text, err = run_main(main, argv, capsys)
    assert code == 0, err[-2000:]
    assert "Student: resuming" in text and (out / "teacher" / "train.de").stat().st_mtime_ns == translations
    state = json.loads((out / "student" / "trainer_state.json").read_text())
    assert state["global_step"] == 40 and math.isfinite(state["log_history"][-1].get("train_loss", 0.0))
    assert (out / "report.json").is_file()


@pytest.mark.slow  # the student trains until it is interrupted, then to its end
def test_ctrl_c_while_the_student_trains_is_one_line_and_a_rerun_resumes(files, tmp_path, capsys):
    out = tmp_path / "distilled"
    argv = command(files, out)
    argv[argv.index("--max_steps") + 1] = "40"  # time to interrupt it between its checkpoints
    # SIGINT to the process group, as Ctrl-C in a terminal sends it
    process = subprocess.Popen([sys.executable, "-m", "training.distill", *argv[1:]], cwd=REPO_ROOT,
                               stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True,
                               env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.monotonic() + 300
        while (not list((out / "student").glob("checkpoint-*/trainer_state.json")) and process.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.1)
        interrupted = process.poll() is None
        if interrupted:
            os.killpg(process.pid, signal.SIGINT)
        err = process.communicate(timeout=120)[1]
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
    assert interrupted, "the chain ended before it was interrupted"
    assert process.returncode == 130 and err.splitlines()[-1] == f"{ERROR}interrupted", err[-2000:]
    assert "Traceback" not in err and err.count(ERROR) == 1, err[-2000:]
    code, text, err = run_main(main, argv, capsys)
    assert code == 0, err[-2000:]
    assert "Student: resuming" in text
    assert json.loads((out / "student" / "trainer_state.json").read_text())["global_step"] == 40


@pytest.mark.slow  # uses the chain's student
def test_a_ctranslate2_teacher_is_reported_as_exported(files, chain, tmp_path, capsys):
    import shutil

    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2
    from vanilla_transformer.training import distill

    teacher = to_ctranslate2(str(files / "teacher"), tmp_path / "teacher-ct2", "int8")
    out = tmp_path / "distilled"
    for name in ("student", "student-ct2"):
        shutil.copytree(chain / name, out / name)
    d = distill.Distillation(teacher=str(teacher), out=str(out), train_source=str(files / "train.en"),
                             test=(str(files / "test.en"), str(files / "test.de")), threads=(1,),
                             bleu_tokenize="char")
    report = distill.write_report(d, {})
    assert report["teacher"]["parameters"] is None and report["teacher"]["layers"] is None
    assert report["teacher"]["size_bytes"] == {"ctranslate2 (as given)": distill.folder_bytes(str(teacher))}
    assert {entry["folder"] for entry in report["models"]["teacher"].values()} == {str(teacher)}
    assert list(report["models"]["teacher"]["int8"]["scores"]) == ["test"]  # no validation files given
    text = (out / "report.md").read_text()
    assert "(a CTranslate2 folder)" in text and f"| parameters | unknown | {report['student']['parameters']:,} |" in text
    # the int8 teacher translates as CTranslate2 does, each sentence alone
    assert lines(out / "report" / "translations" / "teacher.int8.test.txt") == translated_alone(
        teacher, lines(files / "test.en"))


@pytest.mark.slow  # a fresh interpreter
def test_usage_errors_answer_before_torch_is_imported(files, tmp_path):
    """The console script's entry point: --help, argparse's errors and the command's own checks exit 2 at once."""
    import textwrap

    calls = [["distill", "--help"], ["distill", "--teacher", "t", "--out", "o", "--train-source", "missing.en"],
             ["distill", "--teacher", "t", "--out", "o", "--train-source", str(files / "train.en")],
             command(files, tmp_path / "out")[:-len(STUDENT) - 1] + ["--threads", "1,x"]]
    script = textwrap.dedent(f"""
        import contextlib, io, json, sys
        import vanilla_transformer_cli

        results = []
        for argv in {calls!r}:
            with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()) as err:
                try:
                    vanilla_transformer_cli.main(argv)
                    code = 0
                except SystemExit as exit:
                    code = exit.code
            results.append([code, sorted(m for m in ("torch", "transformers") if m in sys.modules), err.getvalue()])
        print(json.dumps(results))
        """)
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    assert result.returncode == 0, result.stderr[-2000:]
    results = json.loads(result.stdout)
    assert [code for code, _, _ in results] == [0, 2, 2, 2]
    assert all(heavy == [] for _, heavy, _ in results), results
    assert "--train-source file not found: missing.en" in results[1][2]
    assert "give --validation-source/--validation-target, --test-source/--test-target, or both" in results[2][2]
    assert "--threads must be thread counts" in results[3][2]
    assert not (tmp_path / "out").exists()


def test_with_original_the_student_trains_on_the_teachers_and_the_original_pairs(files, tmp_path, monkeypatch,
                                                                                   capsys):
    from vanilla_transformer.training import distill

    def stop(d):
        raise Stop("stopped after the student")

    monkeypatch.setattr(distill, "export_student", stop)
    out = tmp_path / "out"
    argv = command(files, out)
    at = argv.index("--")
    argv = [*argv[:at], "--with-original", str(files / "train.de"), *argv[at:], "--train_tags", "<KD>", "none"]
    with pytest.raises(Stop):
        main(argv)
    results = json.loads((out / "student" / "all_results.json").read_text())
    corpora = [(entry["source"], entry["target"], entry["tag"], entry["pairs_read"]) for entry in results["corpora"]]
    count = len(lines(files / "train.en"))
    assert corpora == [(str(files / "train.en"), str(out / "teacher" / "train.de"), "<KD>", count),
                       (str(files / "train.en"), str(files / "train.de"), None, count)]
    assert json.loads((out / "distill.json").read_text())["arguments"]["with_original"] == str(files / "train.de")
    # without it, the record is as it always was: an older distillation's folder is continued, not refused
    plain = distill.Distillation(teacher=argv[argv.index("--teacher") + 1], out=str(tmp_path / "other"),
                                 train_source=str(files / "train.en")).record()["arguments"]
    assert "with_original" not in plain
    code, _, err = run_main(main, [*argv[:argv.index("--with-original")], "--with-original", "-",
                                   *argv[argv.index("--with-original") + 2:]], capsys)
    assert code == 2 and "--with-original" in err


# ----------------------------------------------------------------------------------------------------------------
# --closest-to: sequence-level interpolation (Kim & Rush 2016)


def beams_alone(folder, sources) -> list[list[str]]:
    """Each sentence's beam's best translations (as many as the teacher's beam is wide), translated alone."""
    from vanilla_transformer.translate import load_model_and_tokenizer, translate_hypotheses

    model, tokenizer = load_model_and_tokenizer(str(folder), "cpu")
    return [translate_hypotheses(model, tokenizer, [source], model.generation_config.num_beams)[0]
            for source in sources]


def closest_by_sacrebleu(hypotheses, reference) -> str:
    """The oracle: sacreBLEU's sentence BLEU of each, the first of the best."""
    import sacrebleu

    scores = [sacrebleu.sentence_bleu(hypothesis, [reference]).score for hypothesis in hypotheses]
    return hypotheses[max(range(len(scores)), key=lambda i: (scores[i], -i))]


@pytest.fixture(scope="module")
def second_best(files, tmp_path_factory):
    """Originals the teacher's second-best translations are closest to: each line its second-best translation
    itself (the random teacher's translations score near 0 against the number words)."""
    folder = tmp_path_factory.mktemp("closest")
    beams = beams_alone(files / "teacher", lines(files / "train.en"))
    (folder / "train.de").write_text("\n".join(hypotheses[1] for hypotheses in beams) + "\n", encoding="utf-8")
    return folder / "train.de", beams


def with_closest_to(argv, path) -> list[str]:
    at = argv.index("--") if "--" in argv else len(argv)
    return [*argv[:at], "--closest-to", str(path), *argv[at:]]


def test_closest_to_the_teacher_writes_of_its_beam_the_translation_closest_to_the_original(
        files, second_best, tmp_path, monkeypatch, capsys):
    originals, beams = second_best
    assert sum(hypotheses[0] != hypotheses[1] for hypotheses in beams) >= len(beams) // 2  # a choice to make
    monkeypatch.setattr(translate_module, "CHUNK_SIZE", CHUNK)
    stop_after_teacher(monkeypatch)
    with pytest.raises(Stop):
        main(with_closest_to(command(files, tmp_path / "out")[:-len(STUDENT) - 1], originals))
    written = lines(tmp_path / "out" / "teacher" / "train.de")
    expected = [closest_by_sacrebleu(hypotheses, original)
                for hypotheses, original in zip(beams, lines(originals))]
    assert written == expected
    assert written != [hypotheses[0] for hypotheses in beams]  # not the 1-best
    record = json.loads((tmp_path / "out" / "distill.json").read_text())
    assert record["arguments"]["closest_to"] == str(originals)
    assert str(originals) in record["inputs"]


def test_closest_to_resumes_after_a_kill_without_translating_a_line_twice(files, second_best, tmp_path,
                                                                          monkeypatch):
    originals, _ = second_best
    sources = lines(files / "train.en")
    seen, original = [], translate_module._closest_chunk

    def counting(model, tokenizer, texts, references, *args, stop_at=None, **kwargs):
        if stop_at is not None and len(seen) >= stop_at:
            raise Stop("killed")
        seen.extend(zip(texts, references))
        return original(model, tokenizer, texts, references, *args, **kwargs)

    monkeypatch.setattr(translate_module, "CHUNK_SIZE", CHUNK)
    stop_after_teacher(monkeypatch)
    argv = with_closest_to(command(files, tmp_path / "straight")[:-len(STUDENT) - 1], originals)
    monkeypatch.setattr(translate_module, "_closest_chunk", counting)
    with pytest.raises(Stop):
        main(argv)
    straight = (tmp_path / "straight" / "teacher" / "train.de").read_bytes()
    seen.clear()
    monkeypatch.setattr(translate_module, "_closest_chunk",
                        lambda *args, **kwargs: counting(*args, stop_at=2 * CHUNK, **kwargs))
    argv = with_closest_to(command(files, tmp_path / "out")[:-len(STUDENT) - 1], originals)
    with pytest.raises(Stop):
        main(argv)
    assert len(seen) == 2 * CHUNK
    seen.clear()
    monkeypatch.setattr(translate_module, "_closest_chunk", counting)
    with pytest.raises(Stop):
        main(argv)
    assert seen == list(zip(sources, lines(originals)))[2 * CHUNK:]  # the rest, each with its own original
    assert (tmp_path / "out" / "teacher" / "train.de").read_bytes() == straight


def test_closest_to_with_other_lines_than_the_source_is_refused_before_anything_is_written(files, tmp_path,
                                                                                           capsys):
    short = tmp_path / "short.de"
    short.write_text("\n".join(lines(files / "train.de")[:-1]) + "\n", encoding="utf-8")
    code, _, err = run_main(main, with_closest_to(command(files, tmp_path / "out"), short), capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
    assert "--closest-to" in err and str(short) in err and "lines" in err, err
    assert not (tmp_path / "out").exists()
    code, _, err = run_main(main, with_closest_to(command(files, tmp_path / "out"), "-"), capsys)
    assert code == 2 and "--closest-to" in err and "Traceback" not in err, err


# ----------------------------------------------------------------------------------------------------------------
# Validate first, write last: every argument that can be checked without the teacher's pass is checked before
# distill.json and teacher/ are written, so that the corrected command just runs


def with_original(argv, path) -> list[str]:
    at = argv.index("--")
    return [*argv[:at], "--with-original", str(path), *argv[at:]]


def test_with_original_with_other_lines_than_the_source_is_refused_before_anything_is_written(files, tmp_path,
                                                                                              monkeypatch, capsys):
    counted = Counted(monkeypatch)
    short = tmp_path / "short.de"
    short.write_text("".join(line + "\n" for line in lines(files / "train.de")[:10]), encoding="utf-8")
    latin1 = tmp_path / "latin1.de"
    latin1.write_bytes((files / "train.de").read_bytes().replace(b"\n", "\n\xe9\n".encode("latin-1"), 1))
    for path, words in ((short, ["--with-original", str(short), "10 lines", "24"]),
                        (latin1, ["--with-original file", str(latin1), "UTF-8"])):
        code, _, err = run_main(main, with_original(command(files, tmp_path / "out"), path), capsys)
        assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
        assert all(word in err for word in words), err
        assert not (tmp_path / "out").exists() and counted.lines == []


@pytest.mark.parametrize("option", ["--train-source", "--with-original", "--closest-to"])
def test_a_file_that_is_not_utf8_past_its_first_lines_is_refused_before_anything_is_written(files, tmp_path,
                                                                                            monkeypatch, capsys,
                                                                                            option):
    from vanilla_transformer.files import text

    counted = Counted(monkeypatch)
    monkeypatch.setattr(text, "READ_CHUNK_BYTES", 64)  # files read in chunks: the bad line is past the first ones
    original = files / ("train.en" if option == "--train-source" else "train.de")
    latin1 = tmp_path / original.name
    latin1.write_bytes(original.read_bytes()[:-1] + " caf\xe9\n".encode("latin-1"))  # the last line: Latin-1
    argv = command(files, tmp_path / "out")
    if option == "--train-source":
        argv[argv.index(option) + 1] = str(latin1)
    else:
        argv = with_original(argv, latin1) if option == "--with-original" else with_closest_to(argv, latin1)
    code, _, err = run_main(main, argv, capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
    assert str(latin1) in err and "UTF-8" in err, err
    assert not (tmp_path / "out").exists() and counted.lines == []


@pytest.mark.parametrize("recipe, words", [
    (["--d_model", "30"], ["d_model=30 is not divisible by encoder_attention_heads=4"]),
    (["--config_overrides", "no_such_key=1"], ["no_such_key"]),
    (["--bleu_tokenize", "no-such-tokenizer"], ["--bleu_tokenize no-such-tokenizer"]),
    (["--tokenizer_name", "/no/such/tokenizer"], ["--tokenizer_name /no/such/tokenizer", "cannot be loaded"])])
def test_a_student_recipe_the_recipe_would_refuse_is_refused_before_anything_is_written(files, tmp_path, monkeypatch,
                                                                                       capsys, recipe, words):
    counted = Counted(monkeypatch)
    code, _, err = run_main(main, [*command(files, tmp_path / "out"), *recipe], capsys)
    assert_usage_error(code, err, words)
    assert not (tmp_path / "out").exists() and counted.lines == []


def test_a_device_that_is_not_one_is_refused_before_anything_is_written(files, tmp_path, monkeypatch, capsys):
    counted = Counted(monkeypatch)
    devices = [("bogus", ["--device 'bogus' is not a torch device"])]
    if not torch.cuda.is_available():
        devices.append(("cuda", ["--device 'cuda'", "CUDA is not available"]))
    from vanilla_transformer.interop.export_ctranslate2 import to_ctranslate2

    exported = to_ctranslate2(str(files / "teacher"), tmp_path / "teacher-ct2", "float32")
    devices.append(("bogus", ["--device 'bogus' is not one CTranslate2 runs on"], exported))
    for device, words, *teacher in devices:
        argv = command(files, tmp_path / "out", teacher=teacher[0] if teacher else None)
        code, _, err = run_main(main, [*argv[:argv.index("--")], "--device", device, *argv[argv.index("--"):]],
                                capsys)
        assert_usage_error(code, err, words)
        assert not (tmp_path / "out").exists() and counted.lines == []


def test_a_teacher_whose_tokenizer_cannot_be_loaded_is_refused_before_anything_is_written(files, tmp_path, capsys):
    import shutil

    teacher = tmp_path / "teacher"
    shutil.copytree(files / "teacher", teacher)
    text = (teacher / "tokenizer.json").read_text(encoding="utf-8")
    key = json.dumps("".join(json.loads(text)["model"]["merges"][0]), ensure_ascii=False) + ":"  # e.g. "in":
    assert text.count(key) == 1 and text.index(key) > text.index('"vocab"')
    # the first merge's token renamed in the vocabulary only: later merges name a token it no longer has (still JSON)
    (teacher / "tokenizer.json").write_text(text.replace(key, key[:-2] + 'x":'), encoding="utf-8")
    code, _, err = run_main(main, command(files, tmp_path / "out", teacher=teacher), capsys)
    assert code == 1 and err.count("\n") == 1 and err.startswith(ERROR), err
    assert str(teacher / "tokenizer.json") in err and "Traceback" not in err, err
    assert not (tmp_path / "out").exists()


def test_a_pipe_for_a_file_distill_reads_more_than_once_is_one_line(files, tmp_path, capsys):
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)
    argv = command(files, tmp_path / "out")
    for option, changed in (("--train-source", lambda a: [*a[:a.index("--train-source") + 1], str(pipe),
                                                          *a[a.index("--train-source") + 2:]]),
                            ("--with-original", lambda a: with_original(a, pipe))):
        code, _, err = run_main(main, changed(list(argv)), capsys)
        assert_usage_error(code, err, [f"{option} {pipe} is a pipe", "more than once", "give a file"])
    assert not (tmp_path / "out").exists()


def test_a_distillation_that_never_translated_a_line_starts_over_with_other_arguments(files, tmp_path, monkeypatch,
                                                                                      capsys):
    out = tmp_path / "out"
    Counted(monkeypatch, stop_at=1)  # the teacher's pass stops before its first chunk (out of memory, Ctrl-C, ...)
    with pytest.raises(Stop):
        main(command(files, out))
    assert (out / "distill.json").is_file() and not (out / "teacher" / "train.de").exists()
    capsys.readouterr()
    # another file there, not distill's: the folder is not cleared
    (out / "notes.txt").write_text("mine")
    code, _, err = run_main(main, command(files, out, threads="1,2"), capsys)
    assert_usage_error(code, err, ["holds a distillation of other arguments", "threads"])
    os.remove(out / "notes.txt")
    # only what distill wrote, and no line translated: the corrected command starts over
    counted = Counted(monkeypatch)
    stop_after_teacher(monkeypatch)
    with pytest.raises(Stop):
        main(command(files, out, threads="1,2"))
    assert "Starting over" in capsys.readouterr().out
    assert json.loads((out / "distill.json").read_text())["arguments"]["threads"] == [1, 2]
    assert counted.lines == lines(files / "train.en")
    assert sorted(os.listdir(out)) == ["distill.json", "teacher"]
    assert sorted(os.listdir(out / "teacher")) == ["train.de"]
    # a finished stage is never cleared: other arguments are refused now
    code, _, err = run_main(main, command(files, out, threads="1"), capsys)
    assert_usage_error(code, err, ["holds a distillation of other arguments", "threads"])
    assert (out / "teacher" / "train.de").is_file()
