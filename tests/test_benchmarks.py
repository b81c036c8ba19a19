"""benchmarks/: the shared report helpers (machine description, one section of RESULTS.md), each script's `--help` run
as `python benchmarks/NAME.py --help` runs it (only benchmarks/ on sys.path: the scripts import and build their
options), and the scripts' one-line refusals of bad options."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import cpu_flags, cpu_model, machine_description, write_section
from helpers import REPO_ROOT, SHARED_DATA
from vanilla_transformer.files.measurements import INSTRUCTION_LIMITS

SCRIPTS = sorted(path.name for path in (REPO_ROOT / "benchmarks").glob("*.py")
                 if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8"))


def test_write_section_replaces_its_own_section_and_keeps_the_others(tmp_path):
    path = tmp_path / "RESULTS.md"
    write_section("## Speed", "## Speed\n\nfirst\n", path)  # a missing file gets the title
    assert path.read_text() == "# Benchmark results\n\n## Speed\n\nfirst\n"
    write_section("## Quality", "## Quality\n\n| a | b |\n### detail\n", path)  # added at the end
    write_section("## Speed", "## Speed\n\nsecond\n", path)  # replaced in place
    assert path.read_text() == "# Benchmark results\n\n## Speed\n\nsecond\n\n## Quality\n\n| a | b |\n### detail\n"
    write_section("## Quality", "## Quality\n\nnew\n", path)  # a "### " heading belongs to its section
    assert path.read_text() == "# Benchmark results\n\n## Speed\n\nsecond\n\n## Quality\n\nnew\n"


def test_machine_description_names_the_cpu_and_its_matmul_flags(monkeypatch):
    for name in INSTRUCTION_LIMITS:
        monkeypatch.delenv(name, raising=False)
    cpuinfo = Path("/proc/cpuinfo")
    if not cpuinfo.exists():
        pytest.skip("no /proc/cpuinfo on this system")
    lines = cpuinfo.read_text().splitlines()
    model = next(line.split(":", 1)[1].strip() for line in lines if line.startswith("model name"))
    flags = next(line.split(":", 1)[1].split() for line in lines if line.startswith("flags"))
    assert cpu_model() == model
    assert cpu_flags(("avx2", "sse2", "no_such_flag")) == [f for f in ("avx2", "sse2") if f in flags]
    description = machine_description()
    assert model in description
    assert description.endswith("CPU flags: " + (", ".join(cpu_flags()) or "none listed"))
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16")  # the measurement is not the machine's own
    assert machine_description().endswith("; instructions limited by ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16")


def test_precision_choice_refuses_a_bad_limit_in_one_line(capsys):
    from benchmarks import precision_choice

    for limit in ("ONEDNN_MAX_CPU_ISA", "ONEDNN_MAX_CPU_ISA=", "PATH=/tmp", "=AVX2"):
        with pytest.raises(SystemExit) as exit_info:
            precision_choice.main(["--limit", limit])
        assert exit_info.value.code == 2
        assert "--limit takes NAME=VALUE with NAME one of ONEDNN_MAX_CPU_ISA, " in capsys.readouterr().err


# `python benchmarks/NAME.py --help` for each NAME, at the cost of one interpreter: this script imports the heavy
# libraries once, then runs each benchmark in a forked copy of itself, which has never imported the benchmark, its
# `checkout` module or this project's packages, with sys.path and sys.argv as `python benchmarks/NAME.py --help`
# sets them (the script's folder first, the checkout not on it).
HELP_RUNNER = """
import os, runpy, sys, traceback

import torch, torch._dynamo, transformers, transformers.modeling_utils  # noqa: F401  (what the benchmarks
# import first, through this project's packages; nothing of this project)

benchmarks, out = sys.argv[1], sys.argv[2]
path_without_checkout = [p for p in sys.path[1:] if os.path.abspath(p or ".") != os.path.dirname(benchmarks)]
for name in sys.argv[3:]:
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            for stream, suffix in ((1, "out"), (2, "err")):
                os.dup2(os.open(os.path.join(out, f"{name}.{suffix}"), os.O_WRONLY | os.O_CREAT), stream)
            script = os.path.join(benchmarks, name)
            sys.argv, sys.path[:] = [script, "--help"], [benchmarks, *path_without_checkout]
            runpy.run_path(script, run_name="__main__")
            code = 0
        except SystemExit as exit:
            code = exit.code if isinstance(exit.code, int) else 1
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    with open(os.path.join(out, f"{name}.status"), "w") as f:
        f.write(str(os.waitstatus_to_exitcode(status)))
"""


@pytest.mark.slow  # a fresh interpreter
def test_each_benchmark_script_prints_its_help(tmp_path):
    """The oracle: the first paragraph of each script's docstring (argparse's description), read without importing
    it; each run ends before measuring anything and writes nothing."""
    out, work = tmp_path / "out", tmp_path / "work"
    out.mkdir()
    work.mkdir()
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # as a user runs them: each script puts its checkout on sys.path itself
    result = subprocess.run([sys.executable, "-c", HELP_RUNNER, str(REPO_ROOT / "benchmarks"), str(out), *SCRIPTS],
                            cwd=work, env=env, capture_output=True, text=True, timeout=600, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    failed = {}
    for script in SCRIPTS:
        status = (out / f"{script}.status").read_text()
        stdout, stderr = ((out / f"{script}.{suffix}").read_text() for suffix in ("out", "err"))
        description = ast.get_docstring(ast.parse((REPO_ROOT / "benchmarks" / script).read_text())).split("\n\n")[0]
        if not (status == "0" and stdout.startswith(f"usage: {script} ") and "Traceback" not in stderr
                and " ".join(description.split()) in " ".join(stdout.split())):
            failed[script] = f"exit status {status}\n{stdout[:500]}{stderr[-2000:]}"
    assert not failed, "\n\n".join(f"{script}: {text}" for script, text in failed.items())
    assert not list(work.iterdir())


def test_the_smoke_run_covers_every_script():
    assert {"benchmark_multi30k.py", "recipe_sweep.py", "speed.py", "training_step.py", "cpu_processes.py",
            "cpu_attention.py", "serve_load.py", "serve_two_models.py", "augment.py"} <= set(SCRIPTS)


def test_recipe_sweep_refuses_a_bad_configs_file_in_one_line(tmp_path):
    from benchmarks.recipe_sweep import read_configs

    path = tmp_path / "configs.json"
    path.write_text(json.dumps({"a": {"seconds_per_step": 0, "options": []}, "b": {"options": ["--seed", "1"]}}))
    with pytest.raises(SystemExit, match=r"not so for a, b$"):
        read_configs(str(path))
    path.write_text("{not json")
    with pytest.raises(SystemExit, match="cannot read --configs"):
        read_configs(str(path))


def test_recipe_sweep_names_missing_data_files_before_running_anything(tmp_path, capsys):
    from benchmarks.recipe_sweep import main

    (tmp_path / "train.en").write_text("a\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["--data_dir", str(tmp_path), "--minutes", "30", "--configs", str(tmp_path / "none.json"),
              "--output_dir", str(tmp_path / "out")])
    assert exit_info.value.code == 2 and "lacks train.de, val.en, val.de" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_training_step_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.training_step import main

    for option, value in (("--steps", "0"), ("--max_tokens", "-5")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least 1, got {value}" in capsys.readouterr().err


def test_multi30k_benchmark_refuses_a_bad_process_count_in_one_line(tmp_path, capsys):
    from benchmarks.benchmark_multi30k import main

    with pytest.raises(SystemExit):
        main(["--data_dir", str(tmp_path), "--minutes", "1", "--nproc_per_node", "0"])
    assert "--nproc_per_node must be at least 1, got 0" in capsys.readouterr().err

def test_cpu_processes_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.cpu_processes import main

    for option, value in (("--steps", "0"), ("--rounds", "-1"), ("--max_tokens", "0"), ("--processes", "1")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least {2 if option == '--processes' else 1}, got {value}" in capsys.readouterr().err


def test_cpu_attention_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.cpu_attention import main

    for option, value in (("--steps", "0"), ("--repeats", "-1")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least 1, got {value}" in capsys.readouterr().err


def test_serve_two_models_benchmark_refuses_bad_options_in_one_line(tmp_path, capsys):
    from benchmarks.serve_two_models import main

    for options, message in (
            (["--model", str(tmp_path)], "give both --model and --model2, or neither"),
            (["--target-lang2", "de"], "A and B both translate en into de"),
            (["--model", str(tmp_path), "--model2", str(tmp_path / "none")], f"--model2 {tmp_path / 'none'} does not"),
            (["--rounds", "0"], "--rounds: must be at least 1, got 0"),
            (["--requests", "-3"], "--requests: must be at least 1, got -3")):
        with pytest.raises(SystemExit) as exit_info:
            main(options)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err.splitlines()[-1] and "Traceback" not in err
    assert not list(tmp_path.iterdir())  # refused before training or writing anything


def test_student_speed_refuses_bad_options_in_one_line(tmp_path, capsys):
    from benchmarks.student_speed import main

    for options, message in (
            (["--reference", "no-such-preset"], "--reference: no preset 'no-such-preset'"),
            (["--shape", "wide", "d_model"], "--shape wide: config values are KEY=VALUE, got d_model"),
            (["--rounds", "0"], "--rounds and --batch-size must be at least 1"),
            (["--data", str(tmp_path)], f"--data {tmp_path}: Multi30k's train.en")):
        with pytest.raises(SystemExit) as exit_info:
            main(options)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and message in err.splitlines()[-1] and "Traceback" not in err


@pytest.mark.skipif(not SHARED_DATA.is_dir(), reason="needs ../shared/data/multi30k")
def test_student_speed_times_every_shape_with_the_configuration_it_names(tmp_path):
    """On 400 Multi30k pairs: one row per shape, in order, the reference's ratio 1; each exported model (read back
    while the exports exist: the checkpoint's config.json, the export's tokenizer) has the layers and width asked for, the row's parameters
    are those of a model built from that saved config, and the model translates every sentence into exactly the
    references' mean length under its own saved tokenizer."""
    import statistics

    import ctranslate2
    from transformers import AutoTokenizer

    from benchmarks import student_speed
    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration

    for name in ("train.en", "train.de", "test_2016_flickr.en", "test_2016_flickr.de"):
        lines = (SHARED_DATA / name).read_text(encoding="utf-8").splitlines()
        (tmp_path / name).write_text("\n".join(lines[:400] if name.startswith("train") else lines[:40]) + "\n",
                                     encoding="utf-8")
    references = (tmp_path / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    shapes = (("deep-shallow", dict(encoder_layers=2, decoder_layers=1, d_model=64, vocab_size=400)),
              ("narrow", dict(d_model=32, encoder_ffn_dim=64, decoder_ffn_dim=64, vocab_size=300)))
    seen = {}
    real_build = student_speed.build

    def build(*args):
        built = real_build(*args)
        for name, (folder, tokens, length, *_) in built.items():
            config = VanillaTransformerConfig.from_pretrained(folder.removesuffix("-ct2"))  # the exported checkpoint
            tokenizer = AutoTokenizer.from_pretrained(folder)
            translator = ctranslate2.Translator(folder, device="cpu", compute_type="int8", intra_threads=1)
            results = translator.translate_batch(tokens, beam_size=4, min_decoding_length=length,
                                                 max_decoding_length=length)
            seen[name] = dict(config=config, tokens=len(tokens), length=length,
                              mean_length=round(statistics.mean(len(tokenizer(text)["input_ids"]) for text in references)),
                              output_lengths={len(result.hypotheses[0]) for result in results},
                              parameters=VanillaTransformerForConditionalGeneration(config).num_parameters())
        return built

    student_speed.build = build
    try:
        result = student_speed.measure("multi30k-pre-ln", shapes, tmp_path, rounds=1, batch_size=8)
    finally:
        student_speed.build = real_build
    rows = {row["shape"]: row for row in result["rows"]}
    assert list(rows) == ["reference", "deep-shallow", "narrow"] and rows["reference"]["ratio"] == 1.0
    for name, values in (("reference", dict(encoder_layers=3, decoder_layers=3, d_model=256)), *shapes):
        config, row = seen[name]["config"], rows[name]
        assert all(getattr(config, key) == value for key, value in values.items() if key != "vocab_size")
        assert row["layers"] == f"{config.encoder_layers}+{config.decoder_layers}" and row["d_model"] == config.d_model
        assert row["parameters"] == seen[name]["parameters"] and row["sentences_per_second"] > 0
        assert seen[name]["tokens"] == 40 and row["output_tokens"] == seen[name]["length"] == seen[name]["mean_length"]
        assert seen[name]["output_lengths"] == {seen[name]["length"]}


def test_distill_benchmark_reads_its_targets_from_the_measurements(tmp_path, capsys):
    """The closing lines of benchmarks/distill.py's table: distilled minus original BLEU, and the student's BLEU
    difference and speed ratio against --reference, computed here from the same numbers; a --reference that is not a
    folder is refused in one line before anything runs."""
    import random

    from benchmarks.distill import comparisons, main

    rng = random.Random(3)

    def entry():
        return {"scores": {split: {"bleu": rng.uniform(5, 45)} for split in ("validation", "test")}}

    student, baseline, reference = entry(), entry(), entry()
    speeds = {role: {str(n): {"sentences_per_second": rng.uniform(50, 900)} for n in (1, 2)}
              for role in ("teacher", "student", "original", "reference")}
    distilled_line, reference_line = comparisons(student, baseline, reference, (1, 2), speeds)
    for split in ("validation", "test"):
        assert f"{student['scores'][split]['bleu'] - baseline['scores'][split]['bleu']:+.2f} BLEU {split}" in distilled_line
        assert f"{student['scores'][split]['bleu'] - reference['scores'][split]['bleu']:+.2f} BLEU {split}" in reference_line
    for n in (1, 2):
        ratio = speeds["student"][str(n)]["sentences_per_second"] / speeds["reference"][str(n)]["sentences_per_second"]
        assert f"{ratio:.2f}x at {n} thread" in reference_line
    assert len(comparisons(student, baseline, None, (1, 2), speeds)) == 1

    data = tmp_path / "data"
    data.mkdir()
    for name in ("train", "val", "test_2016_flickr"):
        for language in ("en", "de"):
            (data / f"{name}.{language}").write_text("a\n", encoding="utf-8")
    with pytest.raises(SystemExit) as exit_info:
        main(["--teacher", str(data), "--reference", str(tmp_path / "none"), "--out", str(tmp_path / "out"),
              "--data", str(data)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and "Traceback" not in err
    assert f"--reference folder not found: {tmp_path / 'none'}" in err.splitlines()[-1]
    for options, message in ((["--steps", "0"], "--steps must be at least 1, got 0"),
                             (["--steps", "5", "--minutes", "3"], "not allowed with argument --steps")):
        with pytest.raises(SystemExit):
            main(["--teacher", str(data), "--out", str(tmp_path / "out"), "--data", str(data), *options])
        assert message in capsys.readouterr().err.splitlines()[-1]
    assert not (tmp_path / "out").exists()


def test_distill_benchmark_times_the_exports_side_by_side(tmp_path, monkeypatch):
    """benchmarks/distill.py's speeds: every export translates the same test2016 sources in each round, the order
    reversed every other round, the first round uncounted, and each model's median round is its speed (here against
    a clock that each translation advances by a duration drawn for it)."""
    import random
    import statistics

    import vanilla_transformer.training.distill as distill_module
    import vanilla_transformer.translate as translate_module
    from benchmarks.distill import FILES, side_by_side

    rng = random.Random(11)
    sources = [f"sentence {index}" for index in range(rng.randint(5, 40))]
    (tmp_path / FILES["test"][0]).write_text("".join(line + "\n" for line in sources), encoding="utf-8")
    folders = {role: str(tmp_path / role) for role in ("teacher", "student", "original", "reference")}
    clock, calls, durations = [100.0], [], {}

    def fake_translate(model, tokenizer, lines, **options):
        assert lines == sources and options == {"batch_size": 16, "num_beams": 4}
        role, threads = model
        calls.append((threads, role))
        seconds = rng.uniform(0.5, 3.0)
        durations.setdefault((role, threads), []).append(seconds)
        clock[0] += seconds
        return list(lines)

    monkeypatch.setattr(distill_module, "translator", lambda folder, compute_type, threads: (
        (os.path.basename(folder), threads), None))
    monkeypatch.setattr(translate_module, "translate", fake_translate)
    monkeypatch.setattr("time.perf_counter", lambda: clock[0])
    report = {"batch_size": 16, "num_beams": 4, "threads": [1, 2]}
    speeds = side_by_side(report, tmp_path, folders, rounds=3)

    roles = list(folders)
    for threads in (1, 2):
        order = [role for n, role in calls if n == threads]
        assert order == roles + roles[::-1] + roles + roles[::-1]
        for role in roles:
            median = statistics.median(durations[(role, threads)][1:])
            assert speeds[role][str(threads)]["sentences_per_second"] == pytest.approx(len(sources) / median)
            assert speeds[role][str(threads)]["rounds"] == 3
