"""Table 3 of the paper re-run on the reader's data: `vanilla-transformer study table3` (`python -m training.table3`).

Table 3 of Vaswani et al. (2017) varies the base model one thing at a time (A: heads; B: d_k; C: layers, d_model,
d_ff; D: dropout and label smoothing; E: learned positions) and reports each variant's dev perplexity and BLEU. The
study does the same with the reader's recipe options (a preset and data) as the base row:

- every paper row becomes a row of ours by scaling its change to our base (`scaled_settings`): a factor of the
  paper's base value becomes the same factor of ours (the paper's 4 heads of 8 are 2 of our 4), a setting of zero
  stays zero, a single head stays single;
- every row trains for the same number of steps, as in the paper: `--steps`, or the steps the base row makes in
  `--minutes` (measured once by a time-budget run of the base row, `steps-calibration/`);
- every row trains with the base row's learning rate, scaled by d_model^-0.5 for a row of another d_model as the
  paper's equation 3 scales it (its d_model 1024 row learns at 0.71x the base's rate): a wider model at the narrow
  one's rate diverges;
- the base row trains once per seed, so a difference is read against the run-to-run spread (`Noise`);
- rows train side by side, each in a process of its own on its own CPUs (`--jobs`, default one per CPU as memory
  allows; one where CUDA is available): a model of Multi30k's size trains almost as fast on one core as on two, so two
  rows at once on 2 cores take about the time of one. The timing run trains on one job's CPUs, so "the steps the base
  row makes in --minutes" are a row's steps under the study's own conditions. Each row's output goes to
  logs/NAME.log; a row that fails stops the study with its one-line error, the rows still training are stopped (they
  resume from their last checkpoint next time) and a killed study takes its rows' processes with it;
- each row is a run folder of the recipe under `rows/`, finished once `table3_row.json` is written there: a study
  that is stopped continues where it was (a row half trained resumes from its last checkpoint), never retraining a
  finished row; a row folder trained at another learning rate than the study now plans is kept beside, renamed, and
  the row trained again;
- the dev perplexity (per target token, without label smoothing) and the dev BLEU are measured on the saved model; the
  row's configuration in the table is read back from its saved config.json and training_args.bin.

The outputs, in the study folder: table3.md (the paper's layout, our numbers beside the paper's), table3.json and
table3.png (BLEU per row with the base row's seed spread).
"""

import contextlib
import ctypes
import json
import math
import multiprocessing
import os
import signal
import statistics
import sys
import time
import traceback
from collections import deque
from collections.abc import Sized
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import wait

import torch
from transformers.trainer_utils import get_last_checkpoint
from transformers.utils import logging as hf_logging

from vanilla_transformer.cli.options import UsageError
from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.extras import import_extra
from vanilla_transformer.files.measurements import usable_cpus
from vanilla_transformer.inspect.plots import new_figure
from vanilla_transformer.registration import register
from vanilla_transformer.training import train as recipe
from vanilla_transformer.training.arguments import parse_arguments, preset_defaults
from vanilla_transformer.training.build import load_data
from vanilla_transformer.training.metrics import translation_scores
from vanilla_transformer.training.presets import PRESETS
from vanilla_transformer.training.trainer import checkpoints_saved
from vanilla_transformer.translate import load_model_and_tokenizer, translate

GROUPS = ("A", "B", "C", "D", "E")
ROW_DONE = "table3_row.json"
STUDY_FILE = "study.json"
CALIBRATION = "steps-calibration"
DEFAULT_MINUTES = 5.0
DEFAULT_SEEDS = 3
FIRST_SEED = 1
# The paper's rows each made 100,000 steps of ~25,000 target tokens: on the order of 20 passes over WMT 2014's 4.5
# million pairs. By default every row trains on the first pairs of the reader's data that its steps pass over as often.
DEFAULT_PASSES = 20.0
LOGS = "logs"
# The memory one row's process may take: the study runs no more rows at once than the machine's memory holds at this
# much each (a multi30k-pre-ln row with bf16 autocast grows to about 2.7 GB resident; fp32 stays under 1 GB).
ROW_MEMORY_GB = 3.0
STOP_SECONDS = 30.0  # how long a stopped row's process has to exit cleanly before it is killed

# The options the study sets for every row itself; in the recipe options they are refused. The model options (--d_model,
# --attention_heads, ...) and --label_smoothing_factor are allowed: with the preset they make the base row, and each
# row then gives its own after them.
MANAGED_OPTIONS = ("output_dir", "max_steps", "max_train_minutes", "seed", "resume_from_checkpoint",
                   "overwrite_output_dir")
# The study scores the dev set (the recipe's validation split); a test set would only be translated for nothing.
TEST_OPTIONS = ("test_source", "test_target")


# ----------------------------------------------------------------------------------------------------------------
# The paper's table


@dataclass(frozen=True)
class Settings:
    """One row's model and regularisation, in the paper's column names."""

    N: int
    d_model: int
    d_ff: int
    h: int
    d_k: int
    d_v: int
    P_drop: float
    eps_ls: float
    positions: str = "sinusoidal"


@dataclass(frozen=True)
class PaperRow:
    key: str  # the row's folder name under rows/
    group: str  # "base" or A-E
    cells: dict  # the paper's printed values that differ from its base row
    ppl: float  # PPL (dev)
    bleu: float  # BLEU (dev)
    params: int | None  # millions, where the paper prints them


PAPER_BASE = Settings(N=6, d_model=512, d_ff=2048, h=8, d_k=64, d_v=64, P_drop=0.1, eps_ls=0.1)
PAPER_STEPS = 100_000
# How the paper decoded: beam search, beam 4, length penalty 0.6 (section 6.1; Table 3's rows "as described in the
# previous section", without checkpoint averaging). The presets' own length penalty is chosen for their full-length
# runs (multi30k: 1.4) and makes the short, weaker runs of a study write long, repeating outputs whose BLEU swings by
# seed (benchmarks/experiments/table3-passes.md).
PAPER_DECODING = {"num_beams": 4, "length_penalty": 0.6}

# Vaswani et al. (2017), "Attention Is All You Need", Table 3: variations on the base model, English-German
# translation development set newstest2013, perplexities per wordpiece, no checkpoint averaging.
PAPER_TABLE3 = [
    PaperRow("base", "base", {}, 4.92, 25.8, 65),
    PaperRow("A-h1", "A", {"h": 1, "d_k": 512, "d_v": 512}, 5.29, 24.9, None),
    PaperRow("A-h4", "A", {"h": 4, "d_k": 128, "d_v": 128}, 5.00, 25.5, None),
    PaperRow("A-h16", "A", {"h": 16, "d_k": 32, "d_v": 32}, 4.91, 25.8, None),
    PaperRow("A-h32", "A", {"h": 32, "d_k": 16, "d_v": 16}, 5.01, 25.4, None),
    PaperRow("B-dk16", "B", {"d_k": 16}, 5.16, 25.1, 58),
    PaperRow("B-dk32", "B", {"d_k": 32}, 5.01, 25.4, 60),
    PaperRow("C-N2", "C", {"N": 2}, 6.11, 23.7, 36),
    PaperRow("C-N4", "C", {"N": 4}, 5.19, 25.3, 50),
    PaperRow("C-N8", "C", {"N": 8}, 4.88, 25.5, 80),
    PaperRow("C-dmodel256", "C", {"d_model": 256, "d_k": 32, "d_v": 32}, 5.75, 24.5, 28),
    PaperRow("C-dmodel1024", "C", {"d_model": 1024, "d_k": 128, "d_v": 128}, 4.66, 26.0, 168),
    PaperRow("C-dff1024", "C", {"d_ff": 1024}, 5.12, 25.4, 53),
    PaperRow("C-dff4096", "C", {"d_ff": 4096}, 4.75, 26.2, 90),
    PaperRow("D-drop0.0", "D", {"P_drop": 0.0}, 5.77, 24.6, None),
    PaperRow("D-drop0.2", "D", {"P_drop": 0.2}, 4.95, 25.5, None),
    PaperRow("D-ls0.0", "D", {"eps_ls": 0.0}, 4.67, 25.3, None),
    PaperRow("D-ls0.2", "D", {"eps_ls": 0.2}, 5.47, 25.7, None),
    PaperRow("E-learned", "E", {"positions": "learned"}, 4.92, 25.7, None),
]
PAPER_ROWS = {row.key: row for row in PAPER_TABLE3}
COLUMNS = ("N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "eps_ls")


# ----------------------------------------------------------------------------------------------------------------
# From the paper's rows to ours


def _scaled(ours: float, paper_base: float, paper_value: float) -> float:
    """The paper's change as a factor of its base value, applied to ours (zero stays zero)."""
    return 0 if paper_value == 0 else ours * paper_value / paper_base


def _nearest_divisor(n: int, target: float) -> int:
    return min((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - target), d))


def scaled_settings(paper: PaperRow, base: Settings) -> Settings:
    """Our row for the paper's row `paper`, around our base row `base` (the rules in the module's docstring). The
    heads divide d_model, d_model stays even (sinusoids), and a single head stays one."""
    cells, values = paper.cells, asdict(base)
    if "N" in cells:
        values["N"] = max(1, round(_scaled(base.N, PAPER_BASE.N, cells["N"])))
    if "d_ff" in cells:
        values["d_ff"] = max(1, round(_scaled(base.d_ff, PAPER_BASE.d_ff, cells["d_ff"])))
    for name in ("P_drop", "eps_ls"):
        if name in cells:
            paper_base = getattr(PAPER_BASE, name)
            values[name] = round(min(_scaled(getattr(base, name), paper_base, cells[name]), 0.9), 4)
    if "positions" in cells:
        values["positions"] = cells["positions"]
    if "d_model" in cells:  # the heads stay, each d_model / h wide
        step = 2 * base.h
        values["d_model"] = max(step, round(_scaled(base.d_model, PAPER_BASE.d_model, cells["d_model"]) / step) * step)
    if "h" in cells:
        target = 1 if cells["h"] == 1 else _scaled(base.h, PAPER_BASE.h, cells["h"])
        values["h"] = _nearest_divisor(values["d_model"], max(target, 1))
    values["d_v"] = values["d_model"] // values["h"]
    values["d_k"] = values["d_v"]
    if "d_k" in cells and not {"h", "d_model"} & set(cells):  # row B: d_k alone
        values["d_k"] = max(1, round(_scaled(base.d_k, PAPER_BASE.d_k, cells["d_k"])))
    return Settings(**values)


def base_settings(recipe_options: list[str]) -> tuple[Settings, float]:
    """The base row: the model the recipe options build (their preset, then their own model options), and the
    learning rate it trains at (--learning_rate, else the preset's, else equation 3's for its d_model)."""
    data_args, model_args, training_args, _ = parse_arguments(recipe_options)
    config = VanillaTransformerConfig(**{**PRESETS[data_args.preset].model, **model_args.config_values()})
    return settings_of(config, training_args.label_smoothing_factor), float(training_args.learning_rate)


def settings_of(config, label_smoothing: float) -> Settings:
    d_v = config.d_model // config.encoder_attention_heads
    return Settings(N=config.encoder_layers, d_model=config.d_model, d_ff=config.encoder_ffn_dim,
                    h=config.encoder_attention_heads, d_k=config.attention_key_dim or d_v, d_v=d_v,
                    P_drop=config.dropout, eps_ls=label_smoothing, positions=config.position_embedding_type)


@dataclass(frozen=True)
class Row:
    """A row of the study: the paper's row it re-runs, our settings for it and its seed."""

    key: str  # folder name under rows/
    paper: PaperRow
    settings: Settings
    seed: int
    learning_rate: float
    same_as: str | None = None  # an earlier row that has these settings at our scale: not trained again

    def options(self, recipe_options: list[str]) -> list[str]:
        """The recipe options that train this row (after the study's shared ones, so these win)."""
        s = self.settings
        overrides = [value for value in [option_value(recipe_options, "config_overrides")] if value]
        overrides += [f"attention_key_dim={s.d_k if s.d_k != s.d_v else 'null'}", f"position_embedding_type={s.positions}"]
        return ["--encoder_layers", str(s.N), "--decoder_layers", str(s.N), "--d_model", str(s.d_model),
                "--ffn_dim", str(s.d_ff), "--attention_heads", str(s.h), "--dropout", str(s.P_drop),
                "--label_smoothing_factor", str(s.eps_ls), "--config_overrides", ",".join(overrides),
                "--learning_rate", repr(self.learning_rate), "--seed", str(self.seed)]


def scaled_learning_rate(base_rate: float, base: Settings, settings: Settings) -> float:
    """The base row's learning rate for a row of `settings`: times (d_model / base d_model)^-0.5, the factor by which
    equation 3 (lrate = d_model^-0.5 * ...) moves it."""
    return base_rate * (settings.d_model / base.d_model) ** -0.5  # exactly base_rate at the base's d_model


def plan_rows(base: Settings, seeds: int, groups=GROUPS, learning_rate: float = 1.0) -> list[Row]:
    """The base row once per seed, then each paper row of `groups` scaled to `base` (seed FIRST_SEED) and trained at
    `learning_rate` (the base row's) scaled to its d_model; a row whose settings an earlier row already has names it
    in `same_as`."""
    rows = [Row(f"base-seed{seed}", PAPER_ROWS["base"], base, seed, learning_rate)
            for seed in range(FIRST_SEED, FIRST_SEED + seeds)]
    seen = {base: rows[0].key}
    for paper in PAPER_TABLE3[1:]:
        if paper.group in groups:
            settings = scaled_settings(paper, base)
            rows.append(Row(paper.key, paper, settings, FIRST_SEED, scaled_learning_rate(learning_rate, base, settings),
                            same_as=seen.get(settings)))
            seen.setdefault(settings, paper.key)
    return rows


# ----------------------------------------------------------------------------------------------------------------
# Recipe options


def option_name(word: str) -> str | None:
    """`--max-steps=3` -> "max_steps"; None for a word that is not an option."""
    return word[2:].split("=", 1)[0].replace("-", "_") if word.startswith("--") and len(word) > 2 else None


def option_value(options: list[str], name: str) -> str | None:
    """The last value of `--name` in `options` (either `--name value` or `--name=value`)."""
    value = None
    for i, word in enumerate(options):
        if option_name(word) == name:
            value = word.split("=", 1)[1] if "=" in word else options[i + 1] if i + 1 < len(options) else None
    return value


def check_recipe_options(recipe_options: list[str]) -> None:
    """UsageError for an option the study sets itself or a test set (one line naming it)."""
    for word in recipe_options:
        name = option_name(word)
        if name in MANAGED_OPTIONS:
            raise UsageError(f"--{name} is set by the study for each row; leave it out of the recipe options")
        if name in TEST_OPTIONS:
            raise UsageError(f"--{name}: the study scores the dev set (--validation_source/--validation_target); "
                             "leave the test set out")


# ----------------------------------------------------------------------------------------------------------------
# The study folder: study.json, steps-calibration/, rows/NAME/ (each a run folder of the recipe)


@dataclass
class Study:
    """What a study folder records in study.json: its recipe options and, once known, every row's step count and the
    training pairs every row trains on (`train_pairs`: the first K pairs, 0 for all of them; None until the timing run
    has said how many passes the steps make, when `passes` is set)."""

    folder: str
    recipe_options: list[str]
    steps: int | None = None
    minutes: float = DEFAULT_MINUTES
    passes: float | None = None
    train_pairs: int | None = None
    dev_sets: dict = field(default_factory=dict, repr=False)  # seed -> (sources, targets, data_args), not saved

    def save(self) -> None:
        write_json(os.path.join(self.folder, STUDY_FILE),
                   {"recipe_options": self.recipe_options, "steps": self.steps, "minutes": self.minutes,
                    "passes": self.passes, "train_pairs": self.train_pairs})

    def row_folder(self, row: Row) -> str:
        return os.path.join(self.folder, "rows", row.key)

    def pairs_options(self) -> list[str]:
        """The recipe options that give every row its training pairs (none: the recipe options' own)."""
        return ["--max_train_samples", str(self.train_pairs)] if self.train_pairs else []


def write_json(path: str, value) -> None:
    """Whole or not at all: a study killed while writing keeps the file it had."""
    temporary = f"{path}.partial"
    with open(temporary, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.write("\n")
    os.replace(temporary, path)


def write_text(path: str, text: str) -> None:
    temporary = f"{path}.partial"
    with open(temporary, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(temporary, path)


def read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_passes(recipe_options: list[str], steps: int | None, passes: float | None) -> None:
    """UsageError for --passes where the study cannot choose the pairs by it (one line naming why)."""
    if not passes:
        return
    if steps is not None:
        raise UsageError("--passes chooses the pairs from the steps the timing run makes (--minutes); with --steps "
                         "give --max_train_samples among the recipe options instead")
    if option_value(recipe_options, "max_train_samples") is not None:
        raise UsageError("--passes chooses --max_train_samples itself; give one of the two")
    if option_value(recipe_options, "streaming") not in (None, "false", "False"):
        raise UsageError("--passes needs a corpus the recipe counts the passes over; --streaming does not: give "
                         "--passes 0 or leave --streaming out")


def planned_passes(recipe_options: list[str], steps: int | None, passes: float | None) -> float | None:
    """The passes a new study trains its rows for: --passes (0: all the pairs, None), else DEFAULT_PASSES where the
    steps come from the timing run and the recipe options choose no pairs of their own."""
    if passes is not None:
        return passes or None
    chosen = option_value(recipe_options, "max_train_samples") is not None
    streamed = option_value(recipe_options, "streaming") not in (None, "false", "False")
    return None if steps is not None or chosen or streamed else DEFAULT_PASSES


def open_study(folder: str, recipe_options: list[str], steps: int | None, minutes: float | None,
               passes: float | None = None) -> Study:
    """A new study in an empty or new `folder`, or the study `folder` holds, which must have the same recipe options
    (and the same steps and passes, where they are given)."""
    check_passes(recipe_options, steps, passes)
    path = os.path.join(folder, STUDY_FILE)
    if not os.path.isfile(path):
        if os.path.isdir(folder) and os.listdir(folder):
            raise UsageError(f"{folder} is not empty and holds no study (no {STUDY_FILE}); choose a new or empty folder")
        os.makedirs(folder, exist_ok=True)
        study = Study(folder, list(recipe_options), steps, minutes or DEFAULT_MINUTES,
                      planned_passes(recipe_options, steps, passes))
        study.save()
        return study
    try:
        saved = read_json(path)
        study = Study(folder, list(saved["recipe_options"]), saved["steps"], float(saved["minutes"]),
                      saved.get("passes"), saved.get("train_pairs"))  # a study made before --passes: all pairs
    except (OSError, ValueError, KeyError, TypeError) as error:
        raise UsageError(f"{path} cannot be read ({error}); choose another folder") from None
    if study.recipe_options != list(recipe_options):
        raise UsageError(f"{folder} is a study of other recipe options ({' '.join(study.recipe_options) or 'none'}); "
                         "give the same ones to continue it, or choose another folder")
    if steps is not None and study.steps not in (None, steps):
        raise UsageError(f"the rows of {folder} train for {study.steps} steps, not --steps {steps}; leave --steps out "
                         "to continue it, or choose another folder")
    if passes is not None and (passes or None) != study.passes:
        raise UsageError(f"the rows of {folder} train for {study.passes or 0:g} passes (--passes), not {passes:g}; "
                         "leave --passes out to continue it, or choose another folder")
    if study.steps is None and (steps is not None or minutes is not None):
        study.steps, study.minutes = steps, minutes or study.minutes
        if steps is not None:
            study.passes = None
        study.save()
    return study


def finished_steps(folder: str) -> int | None:
    """The step a finished run folder ended at (its final trainer_state.json beside its model), else None."""
    state = os.path.join(folder, "trainer_state.json")
    if not (os.path.isfile(state) and os.path.isfile(os.path.join(folder, "config.json"))):
        return None
    try:
        return int(read_json(state)["global_step"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def study_steps(study: Study, jobs: int = 1) -> int:
    """Every row's step count: --steps, else the steps the base row makes in --minutes (timed once, by a time-budget
    run of the base row in steps-calibration/, on one job's CPUs; a calibration that was stopped starts over)."""
    if study.steps is None:
        steps = finished_steps(os.path.join(study.folder, CALIBRATION))
        if steps is None:
            print(f"Timing the base row: the steps it makes in {study.minutes:g} minutes become every row's steps",
                  flush=True)
            if jobs == 1:
                steps = calibrate(study)
            else:
                def started(name, cpus):
                    print(f"{name}: on CPU {describe_cpus(cpus)}, its log: {log_path(study, name)}", flush=True)

                steps = run_in_processes(study, [(CALIBRATION, calibrate, (study,))], cpu_slots(jobs)[:1],
                                         on_start=started)[CALIBRATION]
        study.steps = steps
        study.save()
    return study.steps


def study_pairs(study: Study, read: int | None) -> int:
    """The training pairs every row trains on: the first K of the `read` pairs of the recipe's training split,
    K chosen so that the study's steps pass over them `study.passes` times as they passed over all the pairs in the
    timing run (its final epoch); 0 for all of them (no --passes, or the steps already pass over all the pairs that
    often)."""
    if study.train_pairs is None:
        if not study.passes:
            study.train_pairs = 0
        else:
            folder = os.path.join(study.folder, CALIBRATION)
            try:
                epochs = float(read_json(os.path.join(folder, "trainer_state.json"))["epoch"])
            except (OSError, ValueError, KeyError, TypeError) as error:
                raise RuntimeError(f"the timing run in {folder} does not say how many passes it made ({error}); "
                                   "give --passes 0, or run the study again in a new folder") from None
            pairs = max(1, round(read * epochs / study.passes))
            if pairs >= read:
                print(f"Every row trains on all {read:,} training pairs: its {study.steps:,} steps pass over them "
                      f"{epochs:.3g} times, at least --passes {study.passes:g}", flush=True)
                study.train_pairs = 0
            else:
                print(f"Every row trains on the first {pairs:,} of the {read:,} training pairs: its {study.steps:,} "
                      f"steps pass over them about {study.passes:g} times (--passes; over all the pairs: "
                      f"{epochs:.3g})", flush=True)
                study.train_pairs = pairs
        study.save()
    return study.train_pairs


def calibrate(study: Study) -> int:
    """The timing run: the base row with --max_train_minutes; returns the steps it made."""
    folder = os.path.join(study.folder, CALIBRATION)
    options = [*study.recipe_options, "--output_dir", folder, "--max_train_minutes", f"{study.minutes:g}",
               "--seed", str(FIRST_SEED), "--overwrite_output_dir", "true"]
    if study.passes and option_value(study.recipe_options, "train_while_tokenizing") is None:
        options += ["--train_while_tokenizing", "false"]  # its epoch counts the passes over the whole corpus
    recipe.main(options)
    steps = finished_steps(folder)
    if steps is None:
        raise RuntimeError(f"the timing run in {folder} did not finish; run the study again")
    return steps


# ----------------------------------------------------------------------------------------------------------------
# Training and measuring a row


def dev_set(study: Study, seed: int):
    """(sources, targets, data_args) of the recipe's validation split as a row of `seed` reads it (the demo corpus
    is drawn with the seed)."""
    if seed not in study.dev_sets:
        study.dev_sets[seed] = read_data(study.recipe_options, seed)[0]
    return study.dev_sets[seed]


def read_data(recipe_options: list[str], seed: int) -> tuple[tuple, int | None]:
    """The recipe's data as a row of `seed` reads it: (sources, targets, data_args) of its validation split, and the
    pairs of its training split as --max_train_samples counts them (before the cleaning; None when streamed)."""
    data_args, _, training_args, _ = parse_arguments([*recipe_options, "--seed", str(seed)])
    splits = load_data(data_args, training_args).splits
    if "validation" not in splits:
        raise UsageError("the study scores the dev set: give --validation_source and --validation_target (or a "
                         "dataset with a validation split)")
    dev, train = splits["validation"], splits["train"]
    return (list(dev["source"]), list(dev["target"]), data_args), (len(train) if isinstance(train, Sized) else None)


def finished_row(study: Study, row: Row) -> dict | None:
    """The row's measurements when it is finished (its table3_row.json), else None. A row folder trained at another
    learning rate than the study plans for the row is set aside first (kept, renamed), so the row trains again; a
    finished row scored with another decoding than the paper's is measured again (not trained)."""
    folder = study.row_folder(row)
    trained = trained_learning_rate(folder)
    if trained is not None and not math.isclose(trained, row.learning_rate, rel_tol=1e-6):
        aside = set_aside(folder, f"lr{trained:g}")
        print(f"{row.key}: trained at learning rate {trained:g}, the study plans {row.learning_rate:g}; kept as "
              f"{aside}, training the row again", flush=True)
    done = os.path.join(folder, ROW_DONE)
    if not os.path.isfile(done):
        return None
    result = read_json(done)
    if result.get("decoding") != PAPER_DECODING:  # measured before the study scored with the paper's decoding
        print(f"{row.key}: finished, its BLEU measured again with the paper's decoding ({done})", flush=True)
        result = {**result, **measure_row(folder, *dev_set(study, row.seed))}
        write_json(done, result)
    else:
        print(f"{row.key}: finished ({done})", flush=True)
    return result


def train_row(study: Study, row: Row) -> dict:
    """Train the row (resumed from its last checkpoint when it has one), measure it and write its table3_row.json;
    returns the measurements."""
    folder = study.row_folder(row)
    options = [*study.recipe_options, *study.pairs_options(), *row.options(study.recipe_options), "--output_dir",
               folder, "--max_steps", str(study.steps), *checkpoint_options(study.recipe_options, study.steps)]
    if os.path.isdir(folder) and get_last_checkpoint(folder) is not None:
        options += ["--resume_from_checkpoint", "true"]
    os.makedirs(os.path.dirname(folder), exist_ok=True)
    started = time.time()
    recipe.main(options)
    result = measure_row(folder, *dev_set(study, row.seed))
    if result["settings"] != asdict(row.settings):
        raise RuntimeError(f"{folder} trained {result['settings']}, not the row's {asdict(row.settings)}")
    result["trained"] = {"started": started, "ended": time.time(), "threads": torch.get_num_threads(),
                         "cpus": usable_cpus()}
    write_json(os.path.join(folder, ROW_DONE), result)
    return result


def checkpoint_options(recipe_options: list[str], steps: int) -> list[str]:
    """`--save_steps` for rows of `steps` steps where the preset's interval would save fewer checkpoints than the
    recipe averages at the end (a run the recipe refuses): the steps cut into as many intervals as it averages.
    Nothing where the interval already gives enough, or where the recipe options choose it themselves."""
    if option_value(recipe_options, "save_steps") is not None:
        return []
    # the preset's interval, read where the recipe's check of it is off (it is what is being settled here)
    data_args, _, args, _ = parse_arguments([*recipe_options, "--max_steps", str(steps),
                                             "--average_last_n_checkpoints", "0"])
    given = option_value(recipe_options, "average_last_n_checkpoints")
    average = int(given) if given is not None else int(preset_defaults(data_args.preset).get(
        "average_last_n_checkpoints", 0))
    if (getattr(args.save_strategy, "value", args.save_strategy) != "steps" or average < 2 or steps < average
            or not args.save_steps or args.save_steps <= 0):
        return []
    return [] if checkpoints_saved(steps, args.save_steps) >= average else ["--save_steps", str(steps // average)]


def training_line(study: Study, row: Row) -> str:
    return f"{row.key}: training {study.steps} steps ({describe(row.settings)}, seed {row.seed})"


def trained_learning_rate(folder: str) -> float | None:
    """The learning rate the run in `folder` trains at: its table3_row.json's once finished, else the one in its
    training_args.bin (the folder's, else its last checkpoint's); None for a row not started."""
    done = os.path.join(folder, ROW_DONE)
    if os.path.isfile(done):
        with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
            return float(read_json(done)["learning_rate"])
    checkpoint = get_last_checkpoint(folder) if os.path.isdir(folder) else None
    for place in (folder, checkpoint):
        path = os.path.join(place, "training_args.bin") if place else None
        if path and os.path.isfile(path):
            return float(torch.load(path, weights_only=False).learning_rate)  # the study's own file
    return None


def set_aside(folder: str, label: str) -> str:
    """Rename `folder` to an unused `folder.label[-k]` (kept, not deleted); returns the new path."""
    aside, k = f"{folder}.{label}", 1
    while os.path.exists(aside):
        k += 1
        aside = f"{folder}.{label}-{k}"
    os.replace(folder, aside)
    return aside


def measure_row(folder: str, sources: list[str], targets: list[str], data_args) -> dict:
    """What the table shows of a finished run folder: its settings read back from config.json and training_args.bin,
    its steps, parameters, dev perplexity and dev BLEU, decoded as the paper decoded Table 3's rows (`PAPER_DECODING`,
    whatever the preset's own length penalty)."""
    model, tokenizer = load_model_and_tokenizer(folder, engine="pytorch")
    training_args = torch.load(os.path.join(folder, "training_args.bin"), weights_only=False)  # the run's own file
    settings = settings_of(model.config, training_args.label_smoothing_factor)
    for name, value in PAPER_DECODING.items():
        setattr(model.generation_config, name, value)
    predictions = translate(model, tokenizer, sources, batch_size=64)
    bleu = translation_scores(predictions, targets, data_args.bleu_tokenize)["bleu"]
    return {"settings": asdict(settings), "learning_rate": float(training_args.learning_rate),
            "steps": finished_steps(folder), "params": model.num_parameters(),
            "dev_ppl": dev_perplexity(model, tokenizer, sources, targets, data_args), "dev_bleu": float(bleu),
            "decoding": dict(PAPER_DECODING)}


def dev_perplexity(model, tokenizer, sources: list[str], targets: list[str], data_args, batch_size: int = 64) -> float:
    """The paper's per-wordpiece perplexity: exp of the mean cross-entropy of the dev targets' tokens (</s>
    included), teacher forced, without label smoothing, truncated as the recipe truncates them."""
    total, count = 0.0, 0
    order = sorted(range(len(sources)), key=lambda i: len(sources[i]))
    for start in range(0, len(order), batch_size):
        batch = order[start:start + batch_size]
        inputs = tokenizer([sources[i] for i in batch], max_length=data_args.max_source_length, truncation=True,
                           padding=True, return_tensors="pt")
        labels = tokenizer(text_target=[targets[i] for i in batch], max_length=data_args.max_target_length,
                           truncation=True, padding=True, return_tensors="pt")["input_ids"]
        labels = labels.masked_fill(labels == tokenizer.pad_token_id, -100)  # (B, T)
        with torch.inference_mode():
            logits = model(input_ids=inputs["input_ids"].to(model.device),
                           attention_mask=inputs["attention_mask"].to(model.device),
                           labels=labels.to(model.device)).logits  # (B, T, V)
        total += torch.nn.functional.cross_entropy(logits.flatten(0, 1).float(), labels.flatten().to(model.device),
                                                   ignore_index=-100, reduction="sum").item()
        count += int((labels != -100).sum())
    return math.exp(total / count)


def describe(settings: Settings) -> str:
    return ", ".join(f"{name} {value}" for name, value in asdict(settings).items())


# ----------------------------------------------------------------------------------------------------------------
# Rows side by side, each in a process of its own on its own CPUs


def default_jobs() -> int:
    """Rows trained at once by default: one where CUDA is available (the rows would share one device), else one per
    usable CPU, no more than the machine's memory holds at ROW_MEMORY_GB a row."""
    if torch.cuda.is_available():
        return 1
    try:
        memory_gb = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    except (AttributeError, ValueError, OSError):
        memory_gb = ROW_MEMORY_GB
    return max(1, min(len(usable_cpus()), int(memory_gb // ROW_MEMORY_GB)))


def cpu_slots(jobs: int) -> list[tuple[int, ...]]:
    """`jobs` disjoint sets of consecutive usable CPUs, as equal as they go (at most one set per CPU)."""
    cpus = usable_cpus()
    jobs = max(1, min(jobs, len(cpus)))
    size, extra = divmod(len(cpus), jobs)
    slots, start = [], 0
    for i in range(jobs):
        end = start + size + (1 if i < extra else 0)
        slots.append(tuple(cpus[start:end]))
        start = end
    return slots


def describe_cpus(cpus: tuple[int, ...]) -> str:
    return ",".join(map(str, cpus))


def log_path(study: Study, name: str) -> str:
    return os.path.join(study.folder, LOGS, f"{name}.log")


def _die_with_parent(parent: int) -> None:
    """Ask the kernel to kill this process when the study's process dies, however it dies (Linux's
    PR_SET_PDEATHSIG), so that a killed study leaves no row training on; where that is not offered, nothing."""
    with contextlib.suppress(AttributeError, OSError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1: PR_SET_PDEATHSIG
    if os.getppid() != parent:  # the study died before the request was made
        os._exit(1)


def _stop(signum, frame) -> None:
    """SIGTERM in a row's process: unwind as an exit, so that the process's own clean-up runs (multiprocessing's
    finalizers unlink the semaphores its libraries made; killed outright, they are left for the study's resource
    tracker to warn about). An exit raised inside a `__del__` is ignored by Python, so the study sends SIGTERM
    again until the process is gone."""
    raise SystemExit(f"stopped by the study (signal {signum})")


def _in_process(connection, parent: int, cpus: tuple[int, ...], log: str, task, arguments: tuple) -> None:
    """A row's process: on `cpus` with as many threads, its output to `log`; sends ("done", value) or
    ("error", exception) back through `connection`. Ctrl-C is the study's to handle (it stops its rows); SIGTERM
    ends the row cleanly."""
    _die_with_parent(parent)
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, _stop)
    with contextlib.suppress(AttributeError, OSError):
        os.sched_setaffinity(0, cpus)
    torch.set_num_threads(len(cpus))
    with open(log, "a", encoding="utf-8") as f:
        os.dup2(f.fileno(), 1)
        os.dup2(f.fileno(), 2)
    sys.stdout.reconfigure(line_buffering=True)
    sys.stderr.reconfigure(line_buffering=True)
    register()  # as the command line does before a command runs
    hf_logging.disable_progress_bar()
    try:
        message = ("done", task(*arguments))
    except BaseException as error:  # noqa: BLE001 -- every failure goes back to the study, which reports it
        if isinstance(error, SystemExit) and isinstance(error.code, int) and error.code:
            # argparse's error() (the recipe's usage errors): its "PROG: error: MESSAGE" is the last line of the log
            line = last_line(log)
            error = RuntimeError(line.split(": error: ", 1)[-1] if line else f"exited with status {error.code}")
        traceback.print_exc()
        message = ("error", error)
    try:
        connection.send(message)
    except Exception:  # noqa: BLE001 -- an exception that does not pickle: its type and text
        connection.send(("error", RuntimeError(f"{type(message[1]).__name__}: {message[1]}")))
    connection.close()


def last_line(path: str) -> str | None:
    """The last line of text in the file at `path` (carriage returns end lines too: a progress bar's last state is
    its own line), or None."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - 8192))
            text = f.read().decode("utf-8", errors="replace")
    except OSError:
        return None
    return next((line.strip() for line in reversed(text.splitlines()) if line.strip()), None)


def _named(error: BaseException, name: str, log: str) -> BaseException:
    """`error` with the row's name and its log in front of its text, of its own type where that can be made."""
    text = f"{name}: {str(error) or type(error).__name__} (its log: {log})"
    try:
        named = type(error)(text)
    except Exception:  # noqa: BLE001 -- a type that takes other arguments
        named = RuntimeError(text)
    return named if str(named) == text else RuntimeError(text)


def run_in_processes(study: Study, tasks, slots: list[tuple[int, ...]], on_start=None, on_done=None) -> dict:
    """Run `tasks` ((name, function, arguments) each) side by side, one process per task and at most one per CPU set
    of `slots`, each on its set; `on_start(name, cpus)` as each starts, `on_done(name, value)` as each finishes. Returns {name: value}. The first task that
    fails stops the others (SIGTERM; a row resumes from its last checkpoint next time) and its error is raised with
    the task's name and log; so is Ctrl-C, after the others are stopped."""
    os.makedirs(os.path.join(study.folder, LOGS), exist_ok=True)
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: no threads or CUDA state inherited
    pending, free, running, values = deque(tasks), list(slots), {}, {}
    try:
        while pending or running:
            while pending and free:
                name, task, arguments = pending.popleft()
                cpus = free.pop(0)
                receiver, sender = context.Pipe(duplex=False)
                process = context.Process(target=_in_process, name=f"table3-{name}",
                                          args=(sender, os.getpid(), cpus, log_path(study, name), task, arguments))
                if on_start is not None:
                    on_start(name, cpus)
                process.start()
                sender.close()
                running[process.sentinel] = (name, process, receiver, cpus)
            for sentinel in wait(list(running)):
                name, process, receiver, cpus = running.pop(sentinel)
                message = receiver.recv() if receiver.poll() else None
                process.join()
                free.append(cpus)
                if message is None:
                    raise RuntimeError(f"{name}: its process ended with exit status {process.exitcode} before it "
                                       f"finished (its log: {log_path(study, name)})")
                if message[0] == "error":
                    error = message[1]
                    if isinstance(error, KeyboardInterrupt):
                        raise KeyboardInterrupt
                    raise _named(error, name, log_path(study, name)) from None
                values[name] = message[1]
                if on_done is not None:
                    on_done(name, message[1])
    finally:
        for name, process, receiver, cpus in running.values():  # stopped: resumable from their checkpoints
            process.terminate()
        deadline = time.monotonic() + STOP_SECONDS
        for name, process, receiver, cpus in running.values():
            process.join(timeout=1)
            while process.is_alive() and time.monotonic() < deadline:
                process.terminate()  # again: the exit it raised may have been ignored (raised inside a __del__)
                process.join(timeout=1)
            if process.is_alive():  # not back in Python to take its SIGTERM
                process.kill()
                process.join()
    return values


# ----------------------------------------------------------------------------------------------------------------
# The table and the figure


@dataclass(frozen=True)
class Noise:
    """The base row's spread over seeds. A row's difference from the base mean is within the noise when it is at most
    `margin` = 2 s sqrt(1 + 1/n): two standard deviations of the difference between one run and the mean of n runs
    (s: the sample standard deviation of the n base runs). With one seed there is no margin."""

    mean: float
    sd: float | None
    n: int

    @classmethod
    def of(cls, values: list[float]) -> "Noise":
        return cls(statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else None, len(values))

    @property
    def margin(self) -> float | None:
        return None if self.sd is None else 2 * self.sd * math.sqrt(1 + 1 / self.n)

    def within(self, value: float) -> bool:
        return self.margin is not None and abs(value - self.mean) <= self.margin


def table(rows: list[Row], results: dict, steps: int, train_pairs: int = 0, passes: float | None = None,
          passes_made: float | None = None) -> dict:
    """The study's table as data (table3.json): per row, our settings, parameters, dev perplexity and BLEU, whether
    the difference from the base row is within the noise, and the paper's numbers."""
    base = [results[row.key] for row in rows if row.paper.group == "base" and row.key in results]
    noise = {metric: Noise.of([r[metric] for r in base]) for metric in ("dev_ppl", "dev_bleu")} if base else {}
    entries = []
    for row in rows:
        paper = asdict(row.paper)
        result = results.get(row.same_as or row.key)
        entry = {"key": row.key, "group": row.paper.group, "seed": row.seed, "same_as": row.same_as, "paper": paper,
                 "planned": asdict(row.settings), "learning_rate": row.learning_rate, "result": result}
        if result is not None and row.paper.group != "base" and noise:
            entry["within_noise"] = {metric: noise[metric].within(result[metric]) for metric in noise}
        entries.append(entry)
    return {"steps": steps, "paper_steps": PAPER_STEPS, "train_pairs": train_pairs or None,
            "passes": passes if train_pairs else None, "passes_made": passes_made, "rows": entries,
            "base": {metric: asdict(n) | {"margin": n.margin} for metric, n in noise.items()}}


def _number(value: float, digits: int = 2) -> str:
    return f"{value:.{digits}f}"


def _params(count: int) -> str:
    return f"{count / 1e6:.1f}M" if count >= 1e5 else f"{count / 1e3:.0f}k"


def markdown(data: dict) -> str:
    """Table 3's layout: the base row, then each row's changed columns only; ours beside the paper's."""
    headers = ["", "N", "d_model", "d_ff", "h", "d_k", "d_v", "P_drop", "ε_ls", "positions", "params",
               "PPL (dev)", "BLEU (dev)", "paper PPL", "paper BLEU", "paper params"]
    lines = ["| " + " | ".join(headers) + " |", "|" + "---|" * len(headers)]
    base_rows = [e for e in data["rows"] if e["group"] == "base"]
    base = base_rows[0]["planned"]
    done_base = [e for e in base_rows if e["result"]]
    stats = data["base"]
    if done_base:
        def spread(metric):
            n = stats[metric]
            return _number(n["mean"]) + (f" ± {_number(n['sd'])}" if n["sd"] is not None else "")
        cells = [f"base ({len(done_base)} seed{'s' if len(done_base) > 1 else ''})",
                 *[str(base[c]) for c in COLUMNS], "sinusoid", _params(done_base[0]["result"]["params"]),
                 spread("dev_ppl"), spread("dev_bleu")]
    else:
        cells = ["base", *[str(base[c]) for c in COLUMNS], "sinusoid", "", "not yet run", ""]
    paper = PAPER_ROWS["base"]
    lines.append("| " + " | ".join([*cells, _number(paper.ppl), f"{paper.bleu:.1f}", f"{paper.params}M"]) + " |")
    group = None
    for entry in data["rows"]:
        if entry["group"] == "base":
            continue
        label = f"({entry['group']})" if entry["group"] != group else ""
        group = entry["group"]
        lines.append("| " + " | ".join(_row_cells(entry, base, label)) + " |")
    return "\n".join(lines) + "\n"


def _row_cells(entry: dict, base: dict, label: str) -> list[str]:
    planned, result, paper = entry["planned"], entry["result"], entry["paper"]
    settings = result["settings"] if result else planned
    cells = [label, *["" if settings[c] == base[c] else str(settings[c]) for c in COLUMNS],
             "learned" if settings["positions"] != "sinusoidal" else ""]
    if entry["same_as"]:
        cells += ["", f"same as {entry['same_as']} at this scale", ""]
    elif result is None:
        cells += ["", "not yet run", ""]
    else:
        marks = entry.get("within_noise", {})
        cells += [_params(result["params"]),
                  _number(result["dev_ppl"]) + (" ≈" if marks.get("dev_ppl") else ""),
                  _number(result["dev_bleu"]) + (" ≈" if marks.get("dev_bleu") else "")]
    return cells + [_number(paper["ppl"]), f"{paper['bleu']:.1f}", f"{paper['params']}M" if paper["params"] else ""]


def legend(data: dict) -> str:
    bleu = data["base"].get("dev_bleu")
    margin = (f"a BLEU within {bleu['margin']:.2f} of the base mean" if bleu and bleu["margin"] is not None
              else "no margin: the base row has one seed")
    base_rate = data["rows"][0]["learning_rate"]
    scaled = [f"{e['key']} {e['learning_rate']:.3g}" for e in data["rows"]
              if not e["same_as"] and not math.isclose(e["learning_rate"], base_rate, rel_tol=1e-6)]
    rates = (f" Learning rate {base_rate:.3g}" + (f"; times (d_model / {data['rows'][0]['planned']['d_model']})^-0.5 "
             f"for a row of another d_model, as the paper's equation 3 scales it: {', '.join(scaled)}" if scaled else "")
             + ".")
    made = data.get("passes_made")
    pairs = (f" on the first {data['train_pairs']:,} training pairs (--passes {data['passes']:g}"
             + (f"; the base row passed over them {made:.1f} times" if made else "")
             + "; the paper's rows: about 20 passes over WMT 2014)" if data.get("train_pairs") else "")
    return (f"Every row trained {data['steps']:,} steps (the paper: {data['paper_steps']:,}){pairs}.{rates} BLEU "
            "decoded as the paper decoded (beam 4, length penalty 0.6). Blank cells are the "
            f"base row's values. ≈: the difference from the base row is within the seed noise ({margin}; "
            "2 s sqrt(1 + 1/n) over the n base seeds). The paper's numbers: Vaswani et al. (2017), Table 3, "
            "newstest2013, base model 65M parameters with a 37,000-token vocabulary.\n")


def draw(data: dict, path: str) -> None:
    """BLEU per row, the base row's seeds as points and its noise margin as a band around their mean; the paper's
    BLEU in a second panel."""
    entries = [e for e in data["rows"] if e["group"] != "base" or e is data["rows"][0]]
    labels = ["base" if e["group"] == "base" else e["key"] for e in entries]
    figure = new_figure(figsize=(max(6.0, 0.45 * len(entries)), 6.0))
    ours, theirs = figure.subplots(2, 1, sharex=True)
    positions = range(len(entries))
    bleu = data["base"].get("dev_bleu")
    if bleu:
        margin = bleu["margin"] or 0.0
        ours.axhspan(bleu["mean"] - margin, bleu["mean"] + margin, color="tab:blue", alpha=0.15,
                     label="base mean ± noise margin")
        ours.axhline(bleu["mean"], color="tab:blue", linewidth=1)
        seeds = [e["result"]["dev_bleu"] for e in data["rows"] if e["group"] == "base" and e["result"]]
        ours.plot([0] * len(seeds), seeds, "o", color="tab:blue", label="base seeds")
    measured = [(i, (e["result"] or {}).get("dev_bleu")) for i, e in enumerate(entries) if e["group"] != "base"]
    measured = [(i, value) for i, value in measured if value is not None]
    ours.plot([i for i, _ in measured], [v for _, v in measured], "s", color="tab:orange", label="rows")
    ours.set_ylabel("BLEU (dev), ours")
    ours.set_title(f"Table 3 re-run: every row {data['steps']:,} steps")
    ours.legend(loc="best", fontsize="small")
    theirs.plot(list(positions), [e["paper"]["bleu"] for e in entries], "D", color="tab:gray")
    theirs.axhline(PAPER_ROWS["base"].bleu, color="tab:gray", linewidth=1)
    theirs.set_ylabel("BLEU (dev), paper")
    theirs.set_xticks(list(positions), labels, rotation=60, ha="right", fontsize="small")
    figure.savefig(path, dpi=120)


def passes_made(study: Study, rows: list[Row]) -> float | None:
    """The passes the first base row made over its training pairs (its Trainer's epoch at its last step), once it is
    finished: token batches of the first pairs need not hold as many pairs as the timing run's over all of them."""
    with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
        folder = study.row_folder(rows[0])
        if os.path.isfile(os.path.join(folder, ROW_DONE)):
            return float(read_json(os.path.join(folder, "trainer_state.json"))["epoch"])
    return None


def write_outputs(study: Study, rows: list[Row], results: dict, figure: bool = True) -> str:
    """table3.json, table3.md and (with `figure`) table3.png in the study folder; returns the markdown."""
    data = table(rows, results, study.steps, study.train_pairs or 0, study.passes, passes_made(study, rows))
    text = markdown(data) + "\n" + legend(data)
    write_json(os.path.join(study.folder, "table3.json"), data)
    write_text(os.path.join(study.folder, "table3.md"), text)
    if figure:
        draw(data, os.path.join(study.folder, "table3.png"))
    return text


# ----------------------------------------------------------------------------------------------------------------
# The study


def run_study(folder: str, recipe_options: list[str], *, steps: int | None = None, minutes: float | None = None,
              seeds: int = DEFAULT_SEEDS, groups=GROUPS, figure: bool = True, jobs: int | None = None,
              passes: float | None = None) -> dict:
    """Run (or continue) the study in `folder`: every row of `groups` and the base row over `seeds` seeds, trained
    with the recipe options plus the row's own, `jobs` rows at a time (default: `default_jobs()`). Returns
    table3.json's data; prints and writes the table."""
    check_recipe_options(recipe_options)
    check_passes(recipe_options, steps, passes)
    if figure:
        import_extra("matplotlib", "plot", "The Table 3 figure")  # before hours of training
    base, learning_rate = base_settings(recipe_options)
    rows = plan_rows(base, seeds, groups, learning_rate)
    dev, read = read_data(recipe_options, FIRST_SEED)  # the dev split exists, before anything is written
    study = open_study(folder, recipe_options, steps, minutes, passes)
    study.dev_sets[FIRST_SEED] = dev
    trained = [row for row in rows if row.same_as is None]
    jobs = len(cpu_slots(jobs or default_jobs()))
    study_steps(study, jobs)
    study_pairs(study, read)
    results = {}
    to_train = []
    for row in trained:
        result = finished_row(study, row)
        if result is None:
            to_train.append(row)
        else:
            results[row.key] = result
    if jobs == 1 or len(to_train) <= 1:
        for row in to_train:
            print(training_line(study, row), flush=True)
            results[row.key] = train_row(study, row)
            write_outputs(study, rows, results, figure=False)  # the table so far, after every row
    else:
        slots = cpu_slots(min(jobs, len(to_train)))
        print(f"Training {len(to_train)} rows, {len(slots)} at a time, each on its own CPUs (--jobs)", flush=True)
        planned = {row.key: row for row in to_train}

        def started(key: str, cpus: tuple[int, ...]) -> None:
            print(f"{training_line(study, planned[key])} on CPU {describe_cpus(cpus)}, its log: "
                  f"{log_path(study, key)}", flush=True)

        def done(key: str, result: dict) -> None:
            results[key] = result
            print(f"{key}: finished, dev BLEU {result['dev_bleu']:.2f}, PPL {result['dev_ppl']:.2f} "
                  f"({len(results)} of {len(trained)} rows)", flush=True)
            write_outputs(study, rows, results, figure=False)  # the table so far, after every row

        run_in_processes(study, [(row.key, train_row, (study, row)) for row in to_train], slots, on_start=started,
                         on_done=done)
    text = write_outputs(study, rows, results, figure=figure)
    print("\n" + text + f"\nWrote {os.path.join(folder, 'table3.md')}, table3.json"
          + (" and table3.png" if figure else ""), flush=True)
    return table(rows, results, study.steps, study.train_pairs or 0, study.passes, passes_made(study, rows))
