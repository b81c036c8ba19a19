"""The automatic precision against the faster of fp32 and bf16 autocast, on this CPU.

    python -m benchmarks.precision_choice [--preset multi30k-pre-ln] [--steps 40] [--limit NAME=VALUE ...] [--write]

Two copies of the preset's model (same initial weights) train side by side in one process on the same random
token-budget batches (training_step's), one in fp32 and one in bf16 autocast (with the math attention kernel, as the
trainer runs short bf16 batches), alternating which goes first at every step. Then the automatic choice is made as a
first run on a machine makes it (`training.precision.measured_cpu_precision`, its cache bypassed) and timed.

`--limit ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16` (repeatable) measures the same again, in a new process, with the
instructions the math libraries use limited by that environment variable (files/measurements.py INSTRUCTION_LIMITS):
on a CPU with AMX, oneDNN limited to AVX512_CORE_BF16 runs bf16 as a CPU with avx512_bf16 and no AMX does. Every
configuration runs in its own process, one after the other, in the same run.

Reported per configuration: the median seconds per step of each precision, the choice and its speed as a share of the
faster one's, the measurement's own timings and how long it took (what it adds to a run's start); the CPU and its
flags. `--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402
from benchmarks.training_step import random_batch, timed_step  # noqa: E402

SECTION = "## Precision: the automatic choice vs the faster of fp32 and bf16"


def bf16_context():
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    stack = contextlib.ExitStack()
    stack.enter_context(torch.autocast("cpu", dtype=torch.bfloat16))
    stack.enter_context(sdpa_kernel(SDPBackend.MATH))  # the batches are short (training.precision)
    return stack


def measure(preset: str = "multi30k-pre-ln", steps: int = 40, seed: int = 0) -> dict:
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training import precision
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy

    recipe = PRESETS[preset]
    config = VanillaTransformerConfig(vocab_size=recipe.data["vocab_size"], **recipe.model)
    runs = {}
    for name in ("fp32", "bf16"):
        torch.manual_seed(seed)
        model = VanillaTransformerForConditionalGeneration(config).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                      fused=True)
        runs[name] = (model, optimizer, LabelSmoothedCrossEntropy(epsilon=0.1))
    contexts = {"fp32": contextlib.nullcontext, "bf16": bf16_context}
    scale = recipe.training["max_tokens"] / 2048
    times = {name: [] for name in runs}
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps + 4):
        batch = random_batch(step, recipe.data["vocab_size"], generator, scale)
        for name in (list(runs) if step % 2 == 0 else list(reversed(runs))):
            seconds = timed_step(*runs[name], batch, contexts[name])
            if step >= 4:
                times[name].append(seconds)
    medians = {name: statistics.median(values) for name, values in times.items()}

    with tempfile.TemporaryDirectory() as folder:  # a first run on this machine: nothing cached
        started = time.perf_counter()
        measured = precision.measured_cpu_precision(config.d_model, config.encoder_ffn_dim,
                                                    cache_path=os.path.join(folder, "precision.json"))
        measuring = time.perf_counter() - started
    faster = min(medians, key=medians.get)
    return {"preset": preset, "steps": steps, "medians": medians, "faster": faster, "choice": measured["choice"],
            "share": medians[faster] / medians[measured["choice"]], "measured": measured, "measuring": measuring,
            "widths": (config.d_model, config.encoder_ffn_dim)}


def measure_apart(preset: str, steps: int, limit: str | None) -> dict:
    """`measure` in a new process (the libraries read their instruction limits when they load), with `limit`
    ("NAME=VALUE") set in its environment, or none of INSTRUCTION_LIMITS set."""
    from vanilla_transformer.files.measurements import INSTRUCTION_LIMITS

    env = {name: value for name, value in os.environ.items() if name not in INSTRUCTION_LIMITS}
    if limit:
        name, _, value = limit.partition("=")
        env[name] = value
    with tempfile.TemporaryDirectory() as folder:
        path = os.path.join(folder, "result.json")
        subprocess.run([sys.executable, "-m", "benchmarks.precision_choice", "--preset", preset, "--steps", str(steps),
                        "--result-file", path], env=env, check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
        with open(path, encoding="utf-8") as f:
            return {**json.load(f), "limit": limit}


def render(results: list[dict], command: str) -> str:
    first = results[0]
    rows = []
    for result in results:
        medians, measured = result["medians"], result["measured"]
        bf16_ms = f"{measured['bf16_ms']:.1f}" if "bf16_ms" in measured else "failed"
        rows.append(f"| {result['limit'] or 'as the machine is'} | {medians['fp32']:.4f} ({1 / medians['fp32']:.2f}) "
                    f"| {medians['bf16']:.4f} ({1 / medians['bf16']:.2f}) | {result['faster']} "
                    f"| {measured['fp32_ms']:.1f} / {bf16_ms} | {result['measuring']:.2f} | {result['choice']} "
                    f"| {100 * result['share']:.0f} % |")
    table = "\n".join(rows)
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The `{first["preset"]}` preset's model trained in fp32 and in bf16 autocast side by side on the same random
token-budget batches, alternating; median of {first["steps"]} steps each (forward, loss, backward, fused AdamW).
Then the automatic choice as a first run makes it: training-shaped steps at d_model {first["widths"][0]}, d_ff
{first["widths"][1]} timed in both precisions; the time that took is what it adds to a run's start (later runs read
the answer from the cache). Each configuration in its own process, one after the other; a row with an instruction
limit is the same machine with its math libraries limited by that environment variable (oneDNN limited to
AVX512_CORE_BF16 runs bf16 as a CPU with avx512_bf16 and no AMX does). bf16 is autocast. Timed: the automatic
choice's own timings; timing: how long it took; share: the automatic choice's steps/s as a share of the faster's.

| limit | fp32 s/step (steps/s) | bf16 s/step (steps/s) | faster | timed: fp32 / bf16 ms | timing, s | choice | share |
| --- | ---: | ---: | --- | ---: | ---: | --- | ---: |
{table}
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.files.measurements import INSTRUCTION_LIMITS
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="multi30k-pre-ln", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per precision (after 4 untimed)")
    parser.add_argument("--limit", action="append", default=[], metavar="NAME=VALUE",
                        help="also measure with this instruction limit in the environment, e.g. "
                             "ONEDNN_MAX_CPU_ISA=AVX512_CORE_BF16 (repeatable)")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--result-file", default=None, help=argparse.SUPPRESS)  # a configuration's process
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    for limit in args.limit:
        name, equals, value = limit.partition("=")
        if name not in INSTRUCTION_LIMITS or not equals or not value:
            parser.error(f"--limit takes NAME=VALUE with NAME one of {', '.join(INSTRUCTION_LIMITS)}, got {limit!r}")
    if args.result_file:
        result = measure(args.preset, args.steps)
        with open(args.result_file, "w", encoding="utf-8") as f:
            json.dump(result, f)
        return
    results = [measure_apart(args.preset, args.steps, limit) for limit in [None, *args.limit]]
    publish(SECTION, render, results, "benchmarks.precision_choice", argv, args.write, args.results)


if __name__ == "__main__":
    main()
