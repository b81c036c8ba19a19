"""benchmarks/: the shared report helpers (machine description, one section of RESULTS.md), each script's `--help` run
as `python benchmarks/NAME.py --help` (a fresh interpreter with only benchmarks/ on sys.path: the scripts import and
build their options), and the scripts' one-line refusals of bad options."""

import ast
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.report import cpu_flags, cpu_model, machine_description, write_section
from helpers import REPO_ROOT

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


def test_machine_description_names_the_cpu_and_its_matmul_flags():
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


@pytest.mark.slow  # a fresh interpreter each (most import torch)
@pytest.mark.parametrize("script", SCRIPTS)
def test_each_benchmark_script_prints_its_help(script, tmp_path):
    """The oracle: the first paragraph of the script's docstring (argparse's description), read without importing
    it; the run ends before measuring anything and writes nothing."""
    path = REPO_ROOT / "benchmarks" / script
    description = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8"))).split("\n\n")[0]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    env.pop("PYTHONPATH", None)  # as a user runs it: the script puts its checkout on sys.path itself
    result = subprocess.run([sys.executable, str(path), "--help"], cwd=tmp_path, env=env, capture_output=True,
                            text=True, timeout=300, check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.startswith(f"usage: {script} "), result.stdout[:500]
    assert " ".join(description.split()) in " ".join(result.stdout.split())
    assert "Traceback" not in result.stderr and not list(tmp_path.iterdir())


def test_the_smoke_run_covers_every_script():
    assert {"benchmark_multi30k.py", "recipe_sweep.py", "speed.py", "training_step.py", "cpu_processes.py",
            "cpu_attention.py", "serve_load.py"} <= set(SCRIPTS)


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
