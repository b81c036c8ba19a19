"""Choose a time-budget recipe on `val`, at the step count of a slow machine, on a fast one (not a test).

    python -m benchmarks.recipe_sweep --data_dir ../shared/data/multi30k --minutes 30 \
        --configs benchmarks/recipe_sweep_multi30k.json --parallel 10 --output_dir outputs/recipe-sweep

A 30-minute run on 2 CPU cores makes ~1,300 steps; trying a dozen recipes there takes a day. Here every
configuration trains with `--max_train_minutes M --budget_seconds_per_step S`, S being the step time measured on
the slow machine for that configuration (batch size, vocabulary and model size change it): the run makes exactly
the plan the slow machine would make (steps, warmup, decay, the checkpoints to average, training/budget.py) and
only runs it faster. Several runs share one GPU side by side (`--parallel`). Each run averages its planned
checkpoints and scores `val` (sacreBLEU, chrF, the literature's BLEU): the test sets are never looked at here.

`--configs` is a JSON object: name -> {"seconds_per_step": S, "options": [training.train options...]}; options
name the preset and whatever they change (`--learning_rate`, `--warmup_steps`, `--seed`, ...). The table of
results, best first, is printed and written to OUTPUT_DIR/results.md (OUTPUT_DIR/results.jsonl holds every number,
OUTPUT_DIR/NAME/ each run, OUTPUT_DIR/logs/NAME.log its output).
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def read_configs(path: str) -> dict[str, dict]:
    try:
        configs = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as error:
        raise SystemExit(f"error: cannot read --configs {path}: {error}")
    problems = [name for name, config in configs.items()
                if not isinstance(config, dict) or not isinstance(config.get("options"), list)
                or not isinstance(config.get("seconds_per_step"), int | float) or config["seconds_per_step"] <= 0]
    if not configs or problems:
        raise SystemExit(f"error: --configs {path}: every entry needs \"seconds_per_step\" (> 0) and \"options\" "
                         f"(a list); not so for {', '.join(problems) or 'any (the file is empty)'}")
    return configs


def training_command(name: str, config: dict, args) -> list[str]:
    data = args.data_dir
    return [sys.executable, "-m", "vanilla_transformer.training.train",
            "--train_source", os.path.join(data, "train.en"), "--train_target", os.path.join(data, "train.de"),
            "--validation_source", os.path.join(data, "val.en"), "--validation_target", os.path.join(data, "val.de"),
            "--max_train_minutes", str(args.minutes), "--budget_seconds_per_step", str(config["seconds_per_step"]),
            "--literature_bleu", "true", "--disable_tqdm", "true", "--report_to", "none",
            # float32, as on the AVX2 CPUs the recipes are made for (a config's own --bf16 true comes later and wins)
            "--bf16", "false", "--fp16", "false",
            "--output_dir", os.path.join(args.output_dir, name), "--overwrite_output_dir", "true",
            *[str(option) for option in config["options"]]]


def result_row(name: str, config: dict, args, returncode: int, seconds: float) -> dict:
    row = {"name": name, "seconds_per_step": config["seconds_per_step"], "options": config["options"],
           "wall_seconds": round(seconds, 1), "returncode": returncode}
    path = os.path.join(args.output_dir, name, "all_results.json")
    if returncode == 0 and os.path.isfile(path):
        metrics = json.loads(Path(path).read_text(encoding="utf-8"))
        row.update({key: metrics.get(f"validation_{key}") for key in ("bleu", "chrf", "literature_bleu")})
        state = Path(args.output_dir, name, "trainer_state.json")  # the steps made (a plan's, or --max_steps)
        row["steps"] = (json.loads(state.read_text(encoding="utf-8"))["global_step"] if state.is_file()
                        else metrics.get("time_budget", {}).get("total_steps"))
    else:
        log = Path(args.output_dir, "logs", f"{name}.log").read_text(encoding="utf-8", errors="replace")
        row["error"] = next((line for line in reversed(log.splitlines()) if line.strip()), "no output")[:300]
    return row


def run_all(configs: dict[str, dict], args) -> list[dict]:
    os.makedirs(os.path.join(args.output_dir, "logs"), exist_ok=True)
    threads = str(args.threads or (1 if args.parallel > 1 else os.cpu_count() or 1))
    env = {**os.environ, "OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, "TOKENIZERS_PARALLELISM": "false",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    Path(args.output_dir, "results.jsonl").write_text("", encoding="utf-8")  # this sweep's rows only
    waiting, running, rows = list(configs.items()), [], []
    while waiting or running:
        while waiting and len(running) < args.parallel:
            name, config = waiting.pop(0)
            log = open(os.path.join(args.output_dir, "logs", f"{name}.log"), "w", encoding="utf-8")
            process = subprocess.Popen(training_command(name, config, args), stdout=log, stderr=subprocess.STDOUT,
                                       env=env, cwd=ROOT)
            running.append((name, config, process, log, time.monotonic()))
            print(f"started {name}", flush=True)
        time.sleep(1)
        for item in [item for item in running if item[2].poll() is not None]:
            name, config, process, log, started = item
            running.remove(item)
            log.close()
            rows.append(result_row(name, config, args, process.returncode, time.monotonic() - started))
            with open(os.path.join(args.output_dir, "results.jsonl"), "a", encoding="utf-8") as f:
                f.write(json.dumps(rows[-1]) + "\n")
            print(f"finished {name}: " + (f"val BLEU {rows[-1]['bleu']:.2f}" if "bleu" in rows[-1]
                                           else rows[-1]["error"]), flush=True)
    return rows


def results_table(rows: list[dict], minutes: float) -> str:
    lines = [f"Recipes for a {minutes:g}-minute budget, scored on val (average of the planned checkpoints, beam 4), "
             "best first:", "",
             "| configuration | s/step | steps | val BLEU | chrF | literature BLEU | options |",
             "| --- | --- | --- | --- | --- | --- | --- |"]
    for row in sorted(rows, key=lambda row: -(row.get("bleu") if row.get("bleu") is not None else -1)):
        if "bleu" in row:
            scores = f"{row['steps']} | {row['bleu']:.2f} | {row['chrf']:.2f} | {row['literature_bleu']:.2f}"
        else:
            scores = f"failed: {row['error']} | | |"
        lines.append(f"| {row['name']} | {row['seconds_per_step']:g} | {scores} | `{' '.join(row['options'])}` |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data_dir", required=True, help="folder with train and val .en/.de files")
    parser.add_argument("--minutes", type=float, required=True, help="the budget the recipes are made for")
    parser.add_argument("--configs", required=True, help="JSON: name -> {seconds_per_step, options}")
    parser.add_argument("--parallel", type=int, default=1, help="runs side by side (default 1)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per run (default: 1 when parallel)")
    parser.add_argument("--output_dir", default=os.path.join("outputs", "recipe-sweep"))
    args = parser.parse_args(argv)
    if args.minutes <= 0 or args.parallel < 1:
        parser.error("--minutes must be positive and --parallel at least 1")
    missing = [f"{split}.{lang}" for split in ("train", "val") for lang in ("en", "de")
               if not os.path.isfile(os.path.join(args.data_dir, f"{split}.{lang}"))]
    if missing:
        parser.error(f"--data_dir {args.data_dir} lacks {', '.join(missing)}")
    configs = read_configs(args.configs)
    args.output_dir = os.path.abspath(args.output_dir)
    args.data_dir = os.path.abspath(args.data_dir)
    rows = run_all(configs, args)
    table = results_table(rows, args.minutes)
    Path(args.output_dir, "results.md").write_text(table, encoding="utf-8")
    print("\n" + table)
    return rows


if __name__ == "__main__":
    main()
