"""benchmarks/: the shared report helpers (machine description, one section of RESULTS.md) and a tiny run of the
Multi30k quality benchmark on a generated corpus in the Multi30k file layout."""

import json
from pathlib import Path

import pytest

from benchmarks.report import cpu_flags, cpu_model, machine_description, write_section


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


def _tiny_multi30k(folder: Path) -> Path:
    from vanilla_transformer.training.numbers import number_translation_splits

    folder.mkdir()
    splits = number_translation_splits(train_size=300, validation_size=8, test_size=12, seed=3)
    for split, name in (("train", "train"), ("validation", "val"), ("test", "test_2016_flickr")):
        for side, lang in (("source", "en"), ("target", "de")):
            (folder / f"{name}.{lang}").write_text("\n".join(splits[split][side]) + "\n", encoding="utf-8")
    return folder


def _decoded_in_float32(folder: Path, data: Path) -> str:
    """The oracle for a row's scores: the folder's weights decoded afresh in float32 (the checkpoint's generation
    config) and scored by sacreBLEU itself, as "BLEU / chrF"."""
    import sacrebleu
    import torch

    from vanilla_transformer.translate import load_model_and_tokenizer, translate

    model, tokenizer = load_model_and_tokenizer(str(folder))
    assert {p.dtype for p in model.parameters()} == {torch.float32}
    sources = (data / "test_2016_flickr.en").read_text(encoding="utf-8").splitlines()
    references = (data / "test_2016_flickr.de").read_text(encoding="utf-8").splitlines()
    hypotheses = [h.strip() for h in translate(model, tokenizer, sources, batch_size=5)]
    bleu = sacrebleu.BLEU(tokenize="char").corpus_score(hypotheses, [references]).score
    return f"{bleu:.2f} / {sacrebleu.CHRF().corpus_score(hypotheses, [references]).score:.2f}"


def test_multi30k_benchmark_trains_averages_decodes_and_writes_its_section(tmp_path):
    from benchmarks.benchmark_multi30k import main

    data = _tiny_multi30k(tmp_path / "multi30k")
    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Translation quality\n\nold\n\n## Speed: other\n\nkept\n")
    out = tmp_path / "out"
    main(["--data_dir", str(data), "--minutes", "0.002", "--results", str(results), "--output_dir", str(out),
          "--average_last", "2", "--save_steps", "1", "--d_model", "32", "--encoder_layers", "1",
          "--decoder_layers", "1", "--attention_heads", "2", "--ffn_dim", "64", "--vocab_size", "90",
          "--max_tokens", "200", "--max_source_length", "20", "--max_target_length", "20", "--warmup_steps", "4",
          "--report_to", "none", "--disable_tqdm", "true", "--bleu_tokenize", "char", "--length_penalty", "1.3"])

    state = json.loads((out / "trainer_state.json").read_text())
    assert (out / "averaged" / "config.json").is_file() and (out / "averaged" / "tokenizer.json").is_file()
    text = results.read_text()
    assert text.endswith("## Speed: other\n\nkept\n") and "\nold\n" not in text
    row = next(line for line in text.splitlines() if line.startswith("| 0.002 min training"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cpu_model() in cells[1]
    assert int(cells[2]) == state["global_step"] >= 1
    # both weights decoded in float32, whatever precision the run trained and scored its test set in
    assert cells[3] == _decoded_in_float32(out, data) and cells[4] == _decoded_in_float32(out / "averaged", data)
    assert "test_bleu" in json.loads((out / "all_results.json").read_text())  # the run's own scores stay there
    for pair in cells[3:5]:  # final weights, then the averaged checkpoints: BLEU / chrF, both numbers
        bleu, chrf = (float(x) for x in pair.split(" / "))
        assert 0 <= bleu <= 100 and 0 <= chrf <= 100
    assert "python benchmarks/benchmark_multi30k.py --data_dir" in text
    assert ("Both weights decoded in float32, beam 4, length penalty 1.3 (the checkpoint's generation config)."
            in " ".join(text.split()))  # what both scorings used


def test_recipe_sweep_replays_each_plan_scores_val_and_ranks_the_configurations(tmp_path, capsys):
    """Two tiny configurations side by side with given step times: each run makes exactly the plan of its step time
    (whatever this machine's speed), scores val (its own all_results.json), and the table ranks them; a
    configuration that fails is a row with its last line, not a crash."""
    from benchmarks.recipe_sweep import main
    from vanilla_transformer.training.numbers import number_translation_splits

    data = tmp_path / "data"
    data.mkdir()
    splits = number_translation_splits(train_size=300, validation_size=8, test_size=4, seed=5)
    for split, name in (("train", "train"), ("validation", "val")):
        for side, lang in (("source", "en"), ("target", "de")):
            (data / f"{name}.{lang}").write_text("\n".join(splits[split][side]) + "\n", encoding="utf-8")
    tiny = ["--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2",
            "--ffn_dim", "64", "--vocab_size", "90", "--max_tokens", "200", "--max_source_length", "20",
            "--max_target_length", "20", "--per_device_eval_batch_size", "8", "--bleu_tokenize", "char",
            "--lr_scheduler_type", "linear", "--warmup_steps", "0.4", "--learning_rate", "0.003",
            "--average_last_n_checkpoints", "3", "--save_total_limit", "3"]
    configs = {"fast_steps": {"seconds_per_step": 1.0, "options": ["--preset", "demo", *tiny]},
               "slow_steps": {"seconds_per_step": 2.0, "options": ["--preset", "demo", *tiny, "--seed", "2"]},
               "broken": {"seconds_per_step": 0.5, "options": ["--preset", "demo", *tiny, "--dropout", "-1"]}}
    path = tmp_path / "configs.json"
    path.write_text(json.dumps(configs), encoding="utf-8")
    out = tmp_path / "sweep"
    rows = {row["name"]: row for row in main(["--data_dir", str(data), "--minutes", "0.5", "--configs", str(path),
                                               "--parallel", "3", "--output_dir", str(out)])}
    for name, seconds in (("fast_steps", 1.0), ("slow_steps", 2.0)):
        row = rows[name]
        assert row["returncode"] == 0 and row["steps"] == int(0.97 * 30 / seconds)  # 29 and 14 steps
        metrics = json.loads((out / name / "all_results.json").read_text())
        assert row["bleu"] == metrics["validation_bleu"] and 0 <= row["bleu"] <= 100
        assert metrics["time_budget"]["seconds_per_step"] == seconds and "test_bleu" not in metrics
    assert rows["broken"]["returncode"] != 0 and "dropout" in rows["broken"]["error"]
    table = (out / "results.md").read_text()
    ranked = [line.split("|")[1].strip() for line in table.splitlines() if line.startswith("| ") and "---" not in line]
    assert ranked[1:] == sorted(["fast_steps", "slow_steps"], key=lambda n: -rows[n]["bleu"]) + ["broken"]
    assert len((out / "results.jsonl").read_text().splitlines()) == 3 and table in capsys.readouterr().out


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


def test_training_step_benchmark_times_both_variants_and_writes_its_section(tmp_path):
    from benchmarks.training_step import SECTION, main

    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Speed: other\n\nkept\n")
    main(["--preset", "demo", "--steps", "2", "--max_tokens", "64", "--write", "--results", str(results)])
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\n## Speed: other\n\nkept\n\n" + SECTION)
    rows = [line for line in text.splitlines() if line.startswith("| Trainer defaults") or line.startswith("| ours")]
    assert len(rows) == 2
    defaults, ours = (float(row.split("|")[2]) for row in rows)
    assert defaults > 0 and ours > 0
    assert float(rows[1].split("|")[3].strip().rstrip("x")) == pytest.approx(defaults / ours, rel=0.1, abs=0.01)


def test_training_step_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.training_step import main

    for option, value in (("--steps", "0"), ("--max_tokens", "-5")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least 1, got {value}" in capsys.readouterr().err


def test_multi30k_benchmark_on_two_processes_splits_the_batch_and_reports_the_run(tmp_path, capsys):
    """`--nproc_per_node 2`: training runs under torchrun (two one-thread processes, gloo), each with half of the
    preset's batch tokens; the row names the processes and carries the scores the distributed run wrote."""
    import torch

    from benchmarks.benchmark_multi30k import main
    from vanilla_transformer.training.presets import PRESETS

    data = _tiny_multi30k(tmp_path / "multi30k")
    results, out = tmp_path / "RESULTS.md", tmp_path / "out"
    main(["--data_dir", str(data), "--minutes", "0.05", "--results", str(results), "--output_dir", str(out),
          "--nproc_per_node", "2", "--average_last", "2", "--budget_calibration_steps", "4",
          "--d_model", "32", "--encoder_layers", "1", "--decoder_layers", "1", "--attention_heads", "2",
          "--ffn_dim", "64", "--vocab_size", "90", "--max_source_length", "20", "--max_target_length", "20",
          "--report_to", "none", "--disable_tqdm", "true", "--bleu_tokenize", "char"])

    stdout = capsys.readouterr().out
    assert "Training with 2 processes of one thread each (torchrun)" in stdout
    arguments = torch.load(out / "training_args.bin", weights_only=False)
    assert arguments.max_tokens == PRESETS["multi30k"].training["max_tokens"] // 2 and arguments.world_size == 2
    state = json.loads((out / "trainer_state.json").read_text())
    row = next(line for line in results.read_text().splitlines() if line.startswith("| 0.05 min training"))
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[0].startswith("0.05 min training on 2 processes of one thread")
    assert int(cells[2]) == state["global_step"] >= 1
    assert cells[3] == _decoded_in_float32(out, data)
    assert (out / "averaged" / "model.safetensors").is_file()


def test_multi30k_benchmark_refuses_a_bad_process_count_and_a_failed_distributed_run_in_one_line(tmp_path, capsys):
    from benchmarks.benchmark_multi30k import main

    data = _tiny_multi30k(tmp_path / "multi30k")
    with pytest.raises(SystemExit):
        main(["--data_dir", str(data), "--minutes", "1", "--nproc_per_node", "0"])
    assert "--nproc_per_node must be at least 1, got 0" in capsys.readouterr().err

    results = tmp_path / "RESULTS.md"
    with pytest.raises(SystemExit) as failed:  # 33 is not divisible by 2 heads: every rank refuses the config
        main(["--data_dir", str(data), "--minutes", "0.05", "--results", str(results), "--output_dir",
              str(tmp_path / "out"), "--nproc_per_node", "2", "--d_model", "33", "--attention_heads", "2",
              "--vocab_size", "90", "--report_to", "none", "--disable_tqdm", "true"])
    assert str(failed.value.code).startswith("benchmark_multi30k: training under torchrun failed (exit status ")
    assert "\n" not in str(failed.value.code) and not results.exists()  # nothing reported for a failed run


def test_cpu_processes_benchmark_times_both_variants_in_rounds_and_writes_its_section(tmp_path):
    from benchmarks.cpu_processes import SECTION, main

    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Speed: other\n\nkept\n")
    main(["--preset", "demo", "--steps", "2", "--rounds", "2", "--max_tokens", "64", "--write",
          "--results", str(results)])
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\n## Speed: other\n\nkept\n\n" + SECTION)
    rows = [line for line in text.splitlines() if line.startswith("| one process") or line.startswith("| 2 processes")]
    assert len(rows) == 2 and "2 rounds of each" in text.replace("\n", " ")
    one, many = (float(row.split("|")[2]) for row in rows)
    assert one > 0 and many > 0
    assert float(rows[1].split("|")[3].strip().rstrip("x")) == pytest.approx(one / many, rel=0.1, abs=0.01)


def test_cpu_processes_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.cpu_processes import main

    for option, value in (("--steps", "0"), ("--rounds", "-1"), ("--max_tokens", "0"), ("--processes", "1")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least {2 if option == '--processes' else 1}, got {value}" in capsys.readouterr().err


def test_cpu_attention_benchmark_times_both_kernels_and_writes_its_section(tmp_path):
    from benchmarks.cpu_attention import SECTION, main

    results = tmp_path / "RESULTS.md"
    results.write_text("# Benchmark results\n\n## Speed: other\n\nkept\n")
    main(["--preset", "demo", "--steps", "2", "--repeats", "1", "--lengths", "16,40", "--write",
          "--results", str(results)])
    text = results.read_text()
    assert text.startswith("# Benchmark results\n\n## Speed: other\n\nkept\n\n" + SECTION)
    operation = [line.split("|")[1:-1] for line in text.splitlines() if line.startswith(("| bf16 |", "| fp32 |"))]
    assert [(row[0].strip(), int(row[1]), row[2].strip()) for row in operation] == [
        (dtype, length, mask) for dtype in ("bf16", "fp32") for length in (16, 40) for mask in ("none", "causal")]
    for row in operation:
        flash, math, ratio = float(row[3]), float(row[4]), float(row[5].strip().rstrip("x"))
        assert flash > 0 and math > 0 and ratio == pytest.approx(flash / math, rel=0.02, abs=0.01)
    steps = [line.split("|") for line in text.splitlines() if line.startswith(("| flash (", "| math ("))]
    assert len(steps) == 2
    flash, math = float(steps[0][2]), float(steps[1][2])
    assert flash > 0 and math > 0
    assert float(steps[1][3].strip().rstrip("x")) == pytest.approx(flash / math, rel=0.1, abs=0.01)


def test_cpu_attention_benchmark_refuses_bad_counts_in_one_line(capsys):
    from benchmarks.cpu_attention import main

    for option, value in (("--steps", "0"), ("--repeats", "-1")):
        with pytest.raises(SystemExit):
            main([option, value])
        assert f"{option} must be at least 1, got {value}" in capsys.readouterr().err
