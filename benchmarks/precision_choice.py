"""The automatic precision against the faster of fp32 and bf16 autocast, on this CPU.

    python -m benchmarks.precision_choice [--preset multi30k-pre-ln] [--steps 40] [--write]

Two copies of the preset's model (same initial weights) train side by side in one process on the same random
token-budget batches (training_step's), one in fp32 and one in bf16 autocast (with the math attention kernel, as the
trainer runs short bf16 batches), alternating which goes first at every step. Then the automatic choice is made as a
first run on a machine makes it (`training.precision.measured_cpu_precision`, its cache bypassed) and timed.

Reported: the median seconds per step of each precision, the choice and its speed as a share of the faster one's,
the measurement's own timings and how long it took (what it adds to a run's start), the CPU and its flags.
`--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import contextlib
import os
import statistics
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


def render(result: dict, command: str) -> str:
    medians, measured = result["medians"], result["measured"]
    bf16_ms = f"{measured['bf16_ms']:.1f} ms" if "bf16_ms" in measured else "failed"
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The `{result["preset"]}` preset's model trained in fp32 and in bf16 autocast side by side on the same random
token-budget batches, alternating; median of {result["steps"]} steps each (forward, loss, backward, fused AdamW).
Then the automatic choice as a first run makes it: training-shaped steps at d_model {result["widths"][0]}, d_ff
{result["widths"][1]} timed in both precisions (fp32 {measured["fp32_ms"]:.1f} ms, bf16 {bf16_ms}), which took
{result["measuring"]:.2f} s, the time it adds to a run's start (later runs read the answer from the cache).

| precision | s/step | steps/s |
| --- | ---: | ---: |
| fp32 | {medians["fp32"]:.4f} | {1 / medians["fp32"]:.2f} |
| bf16 autocast | {medians["bf16"]:.4f} | {1 / medians["bf16"]:.2f} |

Faster here: {result["faster"]}. The automatic choice: {result["choice"]}, at {100 * result["share"]:.0f} % of the
faster one's steps/s.
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="multi30k-pre-ln", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per precision (after 4 untimed)")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    result = measure(args.preset, args.steps)
    publish(SECTION, render, result, "benchmarks.precision_choice", argv, args.write, args.results)


if __name__ == "__main__":
    main()
