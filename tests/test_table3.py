"""`vanilla-transformer study table3`: the paper's rows scaled to our base, each row trained with the configuration
it names (read back from what the run saved), the table with the paper's numbers, and a study killed mid-way that
continues without retraining its finished rows."""

import contextlib
import io
import json
import os
import signal
import subprocess
import sys
import time

import pytest
import torch
from safetensors.torch import load_file

from helpers import REPO_ROOT, run_main
from vanilla_transformer.cli.main import main
from vanilla_transformer.training import table3
from vanilla_transformer.training.presets import paper_learning_rate
from vanilla_transformer.training.table3 import (
    PAPER_BASE,
    PAPER_TABLE3,
    Settings,
    plan_rows,
    read_data,
    set_aside,
    trained_learning_rate,
)

pytest.importorskip("datasets")

# Table 3 of Vaswani et al. (2017) as printed: (N, d_model, d_ff, h, d_k, d_v, P_drop, eps_ls, positions) of each
# row, blanks filled with the base row's values, then PPL (dev), BLEU (dev) and params (millions, where printed).
PAPER = [
    ((6, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 4.92, 25.8, 65),
    ((6, 512, 2048, 1, 512, 512, 0.1, 0.1, "sinusoidal"), 5.29, 24.9, None),
    ((6, 512, 2048, 4, 128, 128, 0.1, 0.1, "sinusoidal"), 5.00, 25.5, None),
    ((6, 512, 2048, 16, 32, 32, 0.1, 0.1, "sinusoidal"), 4.91, 25.8, None),
    ((6, 512, 2048, 32, 16, 16, 0.1, 0.1, "sinusoidal"), 5.01, 25.4, None),
    ((6, 512, 2048, 8, 16, 64, 0.1, 0.1, "sinusoidal"), 5.16, 25.1, 58),
    ((6, 512, 2048, 8, 32, 64, 0.1, 0.1, "sinusoidal"), 5.01, 25.4, 60),
    ((2, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 6.11, 23.7, 36),
    ((4, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 5.19, 25.3, 50),
    ((8, 512, 2048, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 4.88, 25.5, 80),
    ((6, 256, 2048, 8, 32, 32, 0.1, 0.1, "sinusoidal"), 5.75, 24.5, 28),
    ((6, 1024, 2048, 8, 128, 128, 0.1, 0.1, "sinusoidal"), 4.66, 26.0, 168),
    ((6, 512, 1024, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 5.12, 25.4, 53),
    ((6, 512, 4096, 8, 64, 64, 0.1, 0.1, "sinusoidal"), 4.75, 26.2, 90),
    ((6, 512, 2048, 8, 64, 64, 0.0, 0.1, "sinusoidal"), 5.77, 24.6, None),
    ((6, 512, 2048, 8, 64, 64, 0.2, 0.1, "sinusoidal"), 4.95, 25.5, None),
    ((6, 512, 2048, 8, 64, 64, 0.1, 0.0, "sinusoidal"), 4.67, 25.3, None),
    ((6, 512, 2048, 8, 64, 64, 0.1, 0.2, "sinusoidal"), 5.47, 25.7, None),
    ((6, 512, 2048, 8, 64, 64, 0.1, 0.1, "learned"), 4.92, 25.7, None),
]

# A tiny demo base row: d_model 32, 4 heads (d_k = d_v = 8), 2 + 2 layers, d_ff 64, dropout 0.1, label smoothing 0.1
RECIPE = ["--d_model", "32", "--encoder_layers", "2", "--decoder_layers", "2", "--attention_heads", "4", "--ffn_dim",
          "64", "--vocab_size", "90", "--demo_train_size", "300", "--max_tokens", "200", "--max_test_samples", "8",
          "--max_eval_samples", "24", "--per_device_eval_batch_size", "24", "--config_overrides",
          "max_position_embeddings=40", "--report_to", "none", "--disable_tqdm", "true", "--num_sample_translations",
          "0", "--warmup_steps", "1", "--save_steps", "3"]
STUDY = ["--steps", "3", "--seeds", "2", "--rows", "B,D,E", "--no-figure"]
BASE = Settings(N=2, d_model=32, d_ff=64, h=4, d_k=8, d_v=8, P_drop=0.1, eps_ls=0.1)



def test_our_rows_around_the_papers_base_are_the_papers_rows():
    """Scaled to the paper's own base model, every row is the row the paper printed."""
    rows = plan_rows(PAPER_BASE, seeds=1)
    assert [tuple(vars(row.settings).values()) for row in rows] == [settings for settings, *_ in PAPER]
    assert [(row.paper.ppl, row.paper.bleu, row.paper.params) for row in rows] == [tuple(p[1:]) for p in PAPER]
    assert all(row.same_as is None for row in rows)


def test_every_row_learns_at_the_rate_the_papers_formula_gives_its_d_model():
    """Equation 3's peak, d_model^-0.5 * warmup^-0.5, computed for each row's own d_model: the base row's rate
    scaled, never the base row's rate for a wider or narrower model."""
    rows = plan_rows(PAPER_BASE, seeds=1, learning_rate=paper_learning_rate(512, 4000))
    for row in rows:
        assert row.learning_rate == pytest.approx(paper_learning_rate(row.settings.d_model, 4000), rel=1e-12), row.key
    assert {row.settings.d_model for row in rows} == {256, 512, 1024}


def test_rows_scale_to_a_smaller_base_and_name_the_ones_that_coincide():
    rows = {row.key: row for row in plan_rows(BASE, seeds=2)}
    assert [key for key in rows if key.startswith("base")] == ["base-seed1", "base-seed2"]
    assert [(rows[k].settings.h, rows[k].settings.d_k) for k in ("A-h1", "A-h4", "A-h16", "A-h32")] == [
        (1, 32), (2, 16), (8, 4), (16, 2)]  # 1 head stays 1; 4, 16, 32 of 8 are 2, 8, 16 of 4
    assert (rows["B-dk16"].settings.d_k, rows["B-dk16"].settings.d_v) == (2, 8)
    assert [rows[k].settings.N for k in ("C-N2", "C-N4", "C-N8")] == [1, 1, 3]
    assert rows["C-N4"].same_as == "C-N2"  # 2/3 of 2 layers rounds to what 1/3 of them does
    assert [rows[k].settings.d_model for k in ("C-dmodel256", "C-dmodel1024")] == [16, 64]
    assert [rows[k].settings.P_drop for k in ("D-drop0.0", "D-drop0.2")] == [0.0, 0.2]


def test_the_rate_a_row_trained_at_is_read_from_its_last_checkpoint_or_its_record(tmp_path):
    """A row stopped mid-training is judged by its last checkpoint's training_args.bin, a finished one by its
    table3_row.json; a row set aside twice keeps both folders."""
    from transformers import Seq2SeqTrainingArguments

    row = tmp_path / "rows" / "C-dmodel1024"
    assert trained_learning_rate(str(row)) is None
    for step, rate in ((2, 0.003), (4, 0.002)):
        (row / f"checkpoint-{step}").mkdir(parents=True)
        torch.save(Seq2SeqTrainingArguments(output_dir=str(row), learning_rate=rate),
                   row / f"checkpoint-{step}" / "training_args.bin")
    assert trained_learning_rate(str(row)) == 0.002  # the last checkpoint's
    (row / "table3_row.json").write_text(json.dumps({"learning_rate": 0.001}))
    assert trained_learning_rate(str(row)) == 0.001
    first = set_aside(str(row), "lr0.001")
    row.mkdir()
    (row / "table3_row.json").write_text(json.dumps({"learning_rate": 0.001}))
    second = set_aside(str(row), "lr0.001")
    assert (first, second) == (f"{row}.lr0.001", f"{row}.lr0.001-2") and not row.exists()
    assert trained_learning_rate(first) == 0.001 and (tmp_path / "rows" / "C-dmodel1024.lr0.001" / "checkpoint-4").is_dir()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    """The study of rows B, D and E on the tiny demo, two rows at a time (each in its own process), killed once its
    first two rows (the two seeds of the base) are finished, then run to the end (in this process, with the default
    --jobs). Returns the folder, the command, the finished rows' model times, and the output of both parts."""
    folder = tmp_path_factory.mktemp("study") / "table3"
    argv = ["study", "table3", "--out", str(folder), *STUDY, "--", *RECIPE]
    first_rows = [folder / "rows" / key / "table3_row.json" for key in ("base-seed1", "base-seed2")]
    killed_output = folder.parent / "killed-part.out"
    with open(killed_output, "w") as out:
        process = subprocess.Popen([sys.executable, "-m", "training.table3", "--jobs", "2", *argv[2:]], cwd=REPO_ROOT,
                                   stdout=out, stderr=subprocess.STDOUT, start_new_session=True,
                                   env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    try:
        deadline = time.monotonic() + 600
        while (not all(path.is_file() for path in first_rows) and process.poll() is None
               and time.monotonic() < deadline):
            time.sleep(0.5)
        assert all(path.is_file() for path in first_rows), "the first two rows did not finish"
        killed_at = process.poll() is None
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert killed_at, "the study ended before it was killed"
    finished = {path.parent.name: path.stat().st_mtime_ns for path in folder.glob("rows/*/model.safetensors")
                if (path.parent / "table3_row.json").is_file()}
    with contextlib.redirect_stdout(io.StringIO()) as out:
        main(argv)  # run again: it continues
    return folder, argv, finished, out.getvalue(), killed_output.read_text()


@pytest.mark.slow  # the study's training runs
def test_a_killed_study_continues_without_retraining_its_finished_rows(study, capsys):
    folder, argv, finished, out, _ = study
    assert "base-seed1: finished" in out and "base-seed1: training" not in out
    for key, mtime in finished.items():
        assert (folder / "rows" / key / "model.safetensors").stat().st_mtime_ns == mtime, key
    keys = list(EXPECTED)
    assert sorted(os.listdir(folder / "rows")) == sorted(keys)
    assert all((folder / "rows" / key / "table3_row.json").is_file() for key in keys)
    # once more: everything is finished, nothing trains
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    assert all(f"{key}: finished" in out for key in keys) and ": training " not in out


# what each row changes, as the saved files spell it: config.json fields, and the Trainer's label smoothing
EXPECTED = {
    "base-seed1": {}, "base-seed2": {},
    "B-dk16": {"attention_key_dim": 2}, "B-dk32": {"attention_key_dim": 4},
    "D-drop0.0": {"dropout": 0.0}, "D-drop0.2": {"dropout": 0.2},
    "D-ls0.0": {"label_smoothing": 0.0}, "D-ls0.2": {"label_smoothing": 0.2},
    "E-learned": {"position_embedding_type": "learned"},
}


@pytest.mark.slow  # the study's training runs
@pytest.mark.parametrize("key", list(EXPECTED))
def test_every_row_trains_with_the_configuration_it_names(study, key):
    folder = study[0]
    row = folder / "rows" / key
    config = json.loads((row / "config.json").read_text())
    saved = {"encoder_layers": config["encoder_layers"], "decoder_layers": config["decoder_layers"],
             "d_model": config["d_model"], "encoder_ffn_dim": config["encoder_ffn_dim"],
             "encoder_attention_heads": config["encoder_attention_heads"],
             "decoder_attention_heads": config["decoder_attention_heads"], "dropout": config["dropout"],
             "attention_key_dim": config["attention_key_dim"],
             "position_embedding_type": config["position_embedding_type"],
             "label_smoothing": torch.load(row / "training_args.bin", weights_only=False).label_smoothing_factor}
    expected = {"encoder_layers": 2, "decoder_layers": 2, "d_model": 32, "encoder_ffn_dim": 64,
                "encoder_attention_heads": 4, "decoder_attention_heads": 4, "dropout": 0.1, "attention_key_dim": None,
                "position_embedding_type": "sinusoidal", "label_smoothing": 0.1, **EXPECTED[key]}
    assert saved == expected
    assert json.loads((row / "trainer_state.json").read_text())["global_step"] == 3
    seed = torch.load(row / "training_args.bin", weights_only=False).seed
    assert seed == (2 if key == "base-seed2" else 1)


@pytest.mark.slow  # the study's training runs
def test_the_table_has_the_papers_rows_and_numbers(study):
    folder = study[0]
    lines = (folder / "table3.md").read_text().splitlines()
    table = [[cell.strip() for cell in line.strip("|").split("|")] for line in lines if line.startswith("|")][2:]
    assert table[0][0] == "base (2 seeds)" and table[0][13:] == ["4.92", "25.8", "65M"]
    trained = [row for row in PAPER_TABLE3 if row.group in ("base", "B", "D", "E")]
    assert [r[13:15] for r in table] == [[f"{row.ppl:.2f}", f"{row.bleu:.1f}"] for row in trained]
    assert [r[0] for r in table] == ["base (2 seeds)", "(B)", "", "(D)", "", "", "", "(E)"]
    assert table[1][5:7] == ["2", ""] and table[7][9] == "learned"  # d_k alone; learned positions
    for row in table[1:]:  # our perplexity and BLEU, each a number, marked when within the noise
        assert all(float(cell.removesuffix(" ≈")) >= 0 for cell in row[11:13]), row
    data = json.loads((folder / "table3.json").read_text())
    assert data["steps"] == 3 and data["paper_steps"] == 100_000
    assert data["base"]["dev_bleu"]["n"] == 2


@pytest.mark.slow  # the study's training runs
def test_the_d_model_rows_train_at_the_scaled_rate_and_a_row_made_at_another_is_kept_and_trained_again(tmp_path,
                                                                                                       capsys):
    folder = tmp_path / "table3"
    argv = ["study", "table3", "--out", str(folder), "--steps", "2", "--seeds", "1", "--rows", "C", "--no-figure",
            "--", *RECIPE]
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]

    def trained_rate(key):
        return torch.load(folder / "rows" / key / "training_args.bin", weights_only=False).learning_rate

    base = trained_rate("base-seed1")
    assert trained_rate("C-dmodel256") == pytest.approx(base * (16 / 32) ** -0.5, rel=1e-12)
    assert trained_rate("C-dmodel1024") == pytest.approx(base * (64 / 32) ** -0.5, rel=1e-12)
    assert all(trained_rate(key) == base for key in ("C-N2", "C-N8", "C-dff1024", "C-dff4096"))
    assert "times (d_model / 32)^-0.5" in (folder / "table3.md").read_text()

    # a finished row that was trained at another rate (as a study made before the rates were scaled)
    row = folder / "rows" / "C-dmodel1024"
    done = json.loads((row / "table3_row.json").read_text())
    (row / "table3_row.json").write_text(json.dumps({**done, "learning_rate": 0.5}))
    model = (row / "model.safetensors").read_bytes()
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    assert "C-dmodel1024: trained at learning rate 0.5, the study plans" in out and "C-dmodel1024: training" in out
    assert "C-dmodel256: finished" in out and "C-dmodel256: training" not in out
    kept = folder / "rows" / "C-dmodel1024.lr0.5"
    assert (kept / "model.safetensors").read_bytes() == model  # nothing deleted
    assert trained_rate("C-dmodel1024") == pytest.approx(base * 2 ** -0.5, rel=1e-12)
    assert json.loads((row / "table3_row.json").read_text())["learning_rate"] == pytest.approx(base * 2 ** -0.5)


@pytest.mark.slow  # the study's training runs
def test_a_study_on_the_first_pairs_trains_every_row_on_them(tmp_path, capsys):
    """`--max_train_samples` among the recipe options (the paper's number of passes in few steps,
    docs/table3.md's (D)) reaches the timing run and every row; the dev set stays whole."""
    folder = tmp_path / "table3"
    argv = ["study", "table3", "--out", str(folder), "--minutes", "0.02", "--seeds", "1", "--rows", "D",
            "--no-figure", "--", *RECIPE, "--max_train_samples", "37"]
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    folders = [folder / "steps-calibration", *sorted(path.parent for path in folder.glob("rows/*/table3_row.json"))]
    assert len(folders) == 6  # the timing run, the base row and D's four rows
    for row in folders:
        assert "- **training pairs**: 37\n" in (row / "README.md").read_text(), row.name
    subset = read_data([*RECIPE, "--max_train_samples", "37"], 1)[0][:2]
    assert subset == read_data(RECIPE, 1)[0][:2] and len(subset[0]) == 24  # --max_eval_samples, not 37
    assert read_data([*RECIPE, "--max_train_samples", "37"], 1)[1] == 37 and read_data(RECIPE, 1)[1] == 300


def two_cpus():
    if len(table3.usable_cpus()) < 2:
        pytest.skip("rows side by side need two CPUs")


def test_the_cpus_are_shared_out_in_disjoint_sets(monkeypatch):
    monkeypatch.setattr(table3, "usable_cpus", lambda: [0, 1, 2, 3, 5])
    assert table3.cpu_slots(2) == [(0, 1, 2), (3, 5)]
    assert table3.cpu_slots(5) == [(0,), (1,), (2,), (3,), (5,)]
    assert table3.cpu_slots(9) == table3.cpu_slots(5)  # never two rows on one CPU
    assert table3.cpu_slots(1) == [(0, 1, 2, 3, 5)]


@pytest.mark.slow  # the study's training runs
def test_rows_trained_side_by_side_each_ran_on_cpus_of_their_own(study):
    """The killed study's first part ran with --jobs 2: it started its first two rows before either finished, each
    in a process with one thread on one CPU, not the same one."""
    two_cpus()
    folder, killed_part = study[0], study[4]
    lines = killed_part.splitlines()
    assert "Training 9 rows, 2 at a time, each on its own CPUs (--jobs)" in lines, killed_part
    starts = {key: next(i for i, line in enumerate(lines) if line.startswith(f"{key}: training ") and " on CPU " in line)
              for key in ("base-seed1", "base-seed2")}
    first_done = next((i for i, line in enumerate(lines) if ": finished, dev BLEU " in line), len(lines))
    assert max(starts.values()) < first_done, killed_part  # the second started while the first trained (the kill
    # may come after a row wrote its table3_row.json and before the study printed it finished)
    trained = {key: json.loads((folder / "rows" / key / "table3_row.json").read_text())["trained"]
               for key in ("base-seed1", "base-seed2")}
    first, second = trained["base-seed1"], trained["base-seed2"]
    assert len(first["cpus"]) == len(second["cpus"]) == 1 and first["cpus"] != second["cpus"]
    assert first["threads"] == second["threads"] == 1
    for key in ("base-seed1", "base-seed2"):  # trained once, by the killed part's processes
        assert (folder / "logs" / f"{key}.log").read_text().count("Finished training") == 1, key
        assert f"{key}: finished" in study[3] and f"{key}: training" not in study[3]


@pytest.mark.slow  # the study's training runs
def test_a_row_trained_in_a_process_of_its_own_equals_the_row_trained_in_the_studys(tmp_path, capsys):
    """The oracle: the same rows trained by the study itself, one after the other, with the same one thread."""
    two_cpus()
    recipe = [*RECIPE, "--bf16", "false"]  # the same arithmetic in both, whatever the machine measures as faster
    weights = {}
    for jobs in ("2", "1"):
        folder = tmp_path / f"jobs{jobs}"
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            code, out, err = run_main(main, ["study", "table3", "--out", str(folder), "--steps", "3", "--seeds", "1",
                                             "--rows", "E", "--no-figure", "--jobs", jobs, "--", *recipe], capsys)
        finally:
            torch.set_num_threads(previous)
        assert code == 0, err[-3000:]
        assert ("at a time, each on its own CPUs" in out) == (jobs == "2")
        weights[jobs] = {key: load_file(folder / "rows" / key / "model.safetensors") for key in ("base-seed1",
                                                                                                "E-learned")}
    for key, tensors in weights["2"].items():
        assert tensors.keys() == weights["1"][key].keys()
        for name, tensor in tensors.items():
            torch.testing.assert_close(tensor, weights["1"][key][name], rtol=0, atol=0, msg=f"{key} {name}")


@pytest.mark.slow  # the study's training runs
def test_a_row_that_fails_in_its_process_is_one_line_and_stops_the_others(tmp_path, capsys):
    """A file where a row's folder must be: that row's one-line error (its name and its log), the row beside it
    stopped, the file untouched; once the file is moved away, the same command finishes the study."""
    two_cpus()
    folder = tmp_path / "table3"
    argv = ["study", "table3", "--out", str(folder), "--steps", "200", "--seeds", "1", "--rows", "E", "--no-figure",
            "--jobs", "2", "--", *RECIPE]
    (folder / "rows").mkdir(parents=True)
    (folder / "study.json").write_text(json.dumps({"recipe_options": RECIPE, "steps": 200, "minutes": 5.0}))
    blocker = folder / "rows" / "E-learned"
    blocker.write_text("a file of the user's")
    code, out, err = run_main(main, argv, capsys)
    assert code == 2, err  # the recipe's usage error for an output folder that is a file, as without --jobs
    line = err.strip().splitlines()[-1]
    assert line.startswith("vanilla-transformer study table3: error: E-learned: --output_dir: "), err
    assert line.endswith(f"(its log: {folder / 'logs' / 'E-learned.log'})") and "Traceback" not in err
    assert blocker.read_text() == "a file of the user's"
    assert not (folder / "rows" / "base-seed1" / "table3_row.json").exists()  # stopped, not finished
    blocker.rename(tmp_path / "moved")
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    assert all((folder / "rows" / key / "table3_row.json").is_file() for key in ("base-seed1", "E-learned"))


@pytest.mark.parametrize("preset", ["multi30k-pre-ln", "tiny", "base", "big"])
def test_rows_save_the_checkpoints_their_preset_averages_whatever_their_steps(preset):
    """Oracle: the recipe's own check of --average_last_n_checkpoints against --max_steps and --save_steps. Rows of
    any step count pass it with the study's checkpoint options; where the study adds some, the recipe refuses the
    row without them."""
    from vanilla_transformer.training.arguments import parse_arguments

    recipe = ["--preset", preset]
    added = 0
    for steps in (20, 99, 366, 732, 1000, 5001):
        extra = table3.checkpoint_options(recipe, steps)
        parse_arguments([*recipe, "--max_steps", str(steps), *extra])  # raises SystemExit where refused
        if extra:
            added += 1
            with pytest.raises(SystemExit):
                parse_arguments([*recipe, "--max_steps", str(steps)])
    assert added >= 2  # every preset here averages more checkpoints than 20 or 99 steps save at its interval
    # the user's own interval is theirs: nothing added, whatever it gives
    assert table3.checkpoint_options([*recipe, "--save_steps", "100000"], 366) == []


@pytest.mark.slow  # the study's training runs
def test_a_row_the_recipe_refuses_is_its_one_line_and_trains_nothing(tmp_path, capsys):
    """The recipe's usage error for a row's options (argparse's, which ends its process): the study's one line is
    the row's name, the recipe's own message and the row's log, not an exit status."""
    two_cpus()
    folder = tmp_path / "table3"
    recipe = [*RECIPE, "--average_last_n_checkpoints", "2"]  # RECIPE's --save_steps 3: one checkpoint in 3 steps
    argv = ["study", "table3", "--out", str(folder), "--steps", "3", "--seeds", "1", "--rows", "E", "--no-figure",
            "--jobs", "2", "--", *recipe]
    code, out, err = run_main(main, argv, capsys)
    assert code == 1, err[-3000:]
    line = err.strip().splitlines()[-1]
    name = line.split("error: ", 1)[1].split(":", 1)[0]
    assert name in ("base-seed1", "E-learned"), line
    assert f"{name}: --average_last_n_checkpoints 2 needs that many checkpoints, but --max_steps 3 with " \
           "--save_steps 3 saves 1" in line, line
    assert line.endswith(f"(its log: {folder / 'logs' / (name + '.log')})") and "Traceback" not in err
    assert not list(folder.glob("rows/*/checkpoint-*"))


def start_two_rows(folder):
    """A study of two long rows side by side, started in a session of its own (SIGINT as a terminal's Ctrl-C sends
    it); returns its process once both rows are training."""
    two_cpus()
    process = subprocess.Popen([sys.executable, "-m", "training.table3", "--out", str(folder), "--steps", "100000",
                                "--seeds", "2", "--rows", "E", "--no-figure", "--jobs", "2", "--", *RECIPE],
                               cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, env={**os.environ, "PYTHONPATH": str(REPO_ROOT)},
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 300
    logs = [folder / "logs" / f"base-seed{seed}.log" for seed in (1, 2)]
    while time.monotonic() < deadline and not all(log.is_file() and "Precision" in log.read_text() for log in logs):
        if process.poll() is not None:
            pytest.fail(f"the study ended: {process.communicate()[1][-2000:]}")
        time.sleep(0.5)
    assert all(log.is_file() for log in logs), "the rows did not start"
    return process


def session_ended(process, seconds: float = 30) -> bool:
    """Whether every process of the study's session is gone within `seconds`."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            os.killpg(process.pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.mark.slow  # starts the study's processes
def test_a_study_killed_takes_its_rows_processes_with_it(tmp_path):
    """SIGKILL to the study's process alone (no process group): the processes training its rows end too, so a study
    run again never finds its rows still being trained by the one killed."""
    process = start_two_rows(tmp_path / "table3")
    try:
        os.kill(process.pid, signal.SIGKILL)
        process.communicate()
        assert session_ended(process), "the rows' processes outlived the study"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.slow  # starts the study's processes
def test_ctrl_c_stops_the_study_and_its_rows_cleanly(tmp_path):
    """Ctrl-C (SIGINT to the whole process group, the rows' processes included): the study stops its rows and ends
    with its one line and exit status 130; each row's process takes the study's SIGTERM as an exit and unwinds
    through its own clean-up (its log ends with that exit), and nothing of the session outlives it."""
    folder = tmp_path / "table3"
    process = start_two_rows(folder)
    try:
        os.killpg(process.pid, signal.SIGINT)
        out, err = process.communicate(timeout=120)
        assert process.returncode == 130, err[-3000:]
        assert err.strip().splitlines()[0].endswith("error: interrupted"), err[-3000:]
        for seed in (1, 2):
            log = (folder / "logs" / f"base-seed{seed}.log").read_text()
            assert log.rstrip().endswith("SystemExit: stopped by the study (signal 15)"), log[-2000:]
        assert session_ended(process), "the rows' processes outlived the study"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)


@pytest.mark.slow  # the study's training runs
def test_passes_choose_the_first_pairs_that_the_steps_pass_over_that_often(tmp_path, capsys):
    """--passes 20: the timing run's steps pass over all 2,000 pairs some E times; every row then trains on the first
    2,000 E / 20 pairs, and its own run (the oracle: the Trainer's epoch at its last step) passes over them about 20
    times."""
    folder = tmp_path / "table3"
    argv = ["study", "table3", "--out", str(folder), "--minutes", "0.2", "--passes", "20", "--seeds", "1", "--rows",
            "E", "--no-figure", "--", *RECIPE, "--demo_train_size", "2000"]  # some 20 batches an epoch in a row
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    study = json.loads((folder / "study.json").read_text())
    calibration = json.loads((folder / "steps-calibration" / "trainer_state.json").read_text())
    assert calibration["epoch"] < 20 * 0.9, "the timing run passed over all the pairs 20 times: no subset to test"
    pairs = study["train_pairs"]
    assert study["passes"] == 20 and pairs == round(2000 * calibration["epoch"] / 20)
    assert f"Every row trains on the first {pairs:,} of the 2,000 training pairs" in out
    for key in ("base-seed1", "E-learned"):
        row = folder / "rows" / key
        assert f"- **training pairs**: {pairs}\n" in (row / "README.md").read_text()
        epoch = json.loads((row / "trainer_state.json").read_text())["epoch"]
        assert epoch == pytest.approx(20, rel=0.2), key
    made = json.loads((folder / "rows" / "base-seed1" / "trainer_state.json").read_text())["epoch"]
    assert (f"on the first {pairs:,} training pairs (--passes 20; the base row passed over them {made:.1f} times"
            in (folder / "table3.md").read_text())
    code, out, err = run_main(main, [*argv[:7], "5", *argv[8:]], capsys)  # --passes 5: another study
    assert code == 2 and "train for 20 passes (--passes), not 5" in err


@pytest.mark.parametrize("options, message", [
    (["--steps", "3", "--passes", "20"], "with --steps give --max_train_samples"),
    (["--passes", "20", "--", "--max_train_samples", "40"], "give one of the two"),
    (["--passes", "20", "--", "--streaming", "true"], "--streaming does not"),
])
def test_passes_where_the_study_cannot_choose_the_pairs_by_them_are_one_line(tmp_path, capsys, options, message):
    folder = tmp_path / "table3"
    recipe = options[options.index("--") + 1:] if "--" in options else []
    study_options = options[:options.index("--")] if "--" in options else options
    code, out, err = run_main(main, ["study", "table3", "--out", str(folder), *study_options, "--no-figure", "--",
                                     *RECIPE, *recipe], capsys)
    assert code == 2 and message in err.strip().splitlines()[-1] and "Traceback" not in err
    assert not folder.exists()


def test_a_new_study_trains_on_the_paper_s_passes_unless_it_is_told_its_steps_or_pairs():
    assert table3.planned_passes(RECIPE, None, None) == table3.DEFAULT_PASSES == 20
    assert table3.planned_passes(RECIPE, 300, None) is None  # --steps: the recipe's pairs
    assert table3.planned_passes([*RECIPE, "--max_train_samples", "40"], None, None) is None
    assert table3.planned_passes(RECIPE, None, 0) is None and table3.planned_passes(RECIPE, None, 7.5) == 7.5


@pytest.mark.slow  # the study's training runs
def test_a_row_scored_with_another_decoding_is_measured_again_not_trained(tmp_path, capsys):
    """A finished row whose record has no decoding or another one (a study scored before the paper's decoding) gets
    its dev BLEU again from its saved model, which stays as it was; a row measured so is read as it is."""
    folder = tmp_path / "table3"
    argv = ["study", "table3", "--out", str(folder), "--steps", "2", "--seeds", "1", "--rows", "E", "--no-figure",
            "--jobs", "1", "--", *RECIPE]
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    row = folder / "rows" / "E-learned"
    record = json.loads((row / "table3_row.json").read_text())
    assert record["decoding"] == {"num_beams": 4, "length_penalty": 0.6}
    model = (row / "model.safetensors").stat().st_mtime_ns
    old = {key: value for key, value in record.items() if key != "decoding"} | {"dev_bleu": 99.0}
    (row / "table3_row.json").write_text(json.dumps(old))
    code, out, err = run_main(main, argv, capsys)
    assert code == 0, err[-3000:]
    assert "E-learned: finished, its BLEU measured again with the paper's decoding" in out
    assert "base-seed1: finished (" in out and ": training " not in out
    again = json.loads((row / "table3_row.json").read_text())
    assert again["dev_bleu"] == record["dev_bleu"] and again["decoding"] == record["decoding"]
    assert again["trained"] == record["trained"] and (row / "model.safetensors").stat().st_mtime_ns == model
