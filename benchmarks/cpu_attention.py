"""Attention on the CPU: torch's flash-attention kernel against its math kernel, for training in bf16 and fp32.

    python -m benchmarks.cpu_attention [--preset multi30k-pre-ln] [--steps 30] [--repeats 9] [--write]

`torch.nn.functional.scaled_dot_product_attention` picks the CPU flash kernel by default. Its bf16 backward pass is
slow on the short sequences of sentence-level translation, so the training step with bf16 autocast on the CPU asks
for the math kernel (softmax(QK^T / sqrt(d_k)) V as matrix products) when the batch's longest sequence has at most
`training.precision.MATH_ATTENTION_MAX_LENGTH` tokens (training/precision.py). Two measurements back that choice:

- the attention operation alone, forward and backward, at lengths from 16 to 256 tokens (batches of about 2,048
  tokens, 4 heads of 64 dimensions, with and without the causal mask), bf16 and fp32: median of `--repeats` runs of
  each kernel, alternating, and the ratio flash / math (> 1: math is faster);
- the preset's whole training step (forward, label-smoothed loss, backward, fused AdamW) in bf16 autocast on random
  2,048-target-token batches shaped as Multi30k's length buckets make them: two copies of one model, torch's default
  kernel against the math kernel, alternating which goes first, median of `--steps` steps each.

Both kernels compute equation (1); tests/test_precision.py checks that the math kernel's bf16 gradients are as close
to fp32's as the flash kernel's. On a CPU without bf16 matrix instructions bf16 is emulated (and training uses fp32).
`--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import contextlib
import statistics
import time

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402

SECTION = "## Attention on the CPU: flash kernel vs math kernel"
LENGTHS = (16, 40, 100, 160, 192, 256)
KERNELS = ("flash", "math")


def _kernel(name: str):
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel(SDPBackend.FLASH_ATTENTION if name == "flash" else SDPBackend.MATH)


@contextlib.contextmanager
def _bf16_with_kernel(name: str):
    import torch

    with torch.autocast("cpu", dtype=torch.bfloat16), _kernel(name):
        yield


def time_operation(length: int, dtype, causal: bool, repeats: int, tokens: int = 2048, heads: int = 4,
                   head_dim: int = 64) -> dict[str, float]:
    """Median seconds of one forward and backward of attention over (tokens // length) sequences, per kernel."""
    import torch
    import torch.nn.functional as F

    generator = torch.Generator().manual_seed(length)
    shape = (max(1, tokens // length), heads, length, head_dim)
    query, key, value = (torch.randn(shape, generator=generator).to(dtype).requires_grad_() for _ in range(3))
    upstream = torch.randn(shape, generator=generator).to(dtype)
    times = {name: [] for name in KERNELS}
    for repeat in range(repeats + 2):
        for name in KERNELS if repeat % 2 == 0 else reversed(KERNELS):
            start = time.perf_counter()
            with _kernel(name):
                output = F.scaled_dot_product_attention(query, key, value, is_causal=causal)
            output.backward(upstream)
            if repeat >= 2:  # the first two untimed
                times[name].append(time.perf_counter() - start)
            query.grad = key.grad = value.grad = None
    return {name: statistics.median(values) for name, values in times.items()}


def time_training_step(preset: str, steps: int, seed: int = 0) -> dict[str, float]:
    """Median seconds of the preset's bf16-autocast training step with torch's default kernel and with math."""
    import torch

    from benchmarks.training_step import build, random_batch, timed_step
    from vanilla_transformer.training.presets import PRESETS

    vocab_size = PRESETS[preset].data["vocab_size"]
    runs = {name: build(preset, "ours", seed) for name in KERNELS}
    times = {name: [] for name in KERNELS}
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps + 4):
        source, decoder_input, labels = random_batch(step, vocab_size, generator)
        for name in KERNELS if step % 2 == 0 else reversed(KERNELS):
            seconds = timed_step(*runs[name], (source, decoder_input, labels), lambda: _bf16_with_kernel(name))
            if step >= 4:
                times[name].append(seconds)
    return {name: statistics.median(values) for name, values in times.items()}


def measure(preset: str = "multi30k-pre-ln", steps: int = 30, repeats: int = 9,
            lengths: tuple[int, ...] = LENGTHS) -> dict:
    import torch

    operation = [{"dtype": dtype_name, "length": length, "causal": causal,
                  **time_operation(length, dtype, causal, repeats)}
                 for dtype_name, dtype in (("bf16", torch.bfloat16), ("fp32", torch.float32))
                 for length in lengths for causal in (False, True)]
    return {"preset": preset, "steps": steps, "repeats": repeats, "operation": operation,
            "training_step": time_training_step(preset, steps)}


def render(result: dict, command: str) -> str:
    from vanilla_transformer.training.precision import MATH_ATTENTION_MAX_LENGTH

    rows = "\n".join(
        f"| {row['dtype']} | {row['length']} | {'causal' if row['causal'] else 'none'} | {row['flash'] * 1e3:.2f} | "
        f"{row['math'] * 1e3:.2f} | {row['flash'] / row['math']:.2f}x |" for row in result["operation"])
    step = result["training_step"]
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The attention operation alone, forward and backward, about 2,048 tokens per batch (2,048 // length sequences), 4 heads
of 64 dimensions; median of {result["repeats"]} runs of each kernel, alternating. Ratio flash / math: above 1 the math
kernel is faster. Training in bf16 autocast on the CPU uses the math kernel for batches of up to
{MATH_ATTENTION_MAX_LENGTH} tokens (training/precision.py).

| dtype | length | mask | flash ms | math ms | flash / math |
| --- | ---: | --- | ---: | ---: | ---: |
{rows}

The `{result["preset"]}` preset's training step in bf16 autocast (forward, loss, backward, fused AdamW), random
2,048-target-token batches of Multi30k's shapes, two copies of one model alternating; median of {result["steps"]}
steps each:

| attention kernel | s/step | ratio |
| --- | ---: | ---: |
| flash (torch's default) | {step["flash"]:.4f} | 1.00x |
| math (our choice for bf16 on the CPU) | {step["math"]:.4f} | {step["flash"] / step["math"]:.2f}x |
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="multi30k-pre-ln", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=30, help="timed training steps per kernel (after 4 untimed)")
    parser.add_argument("--repeats", type=int, default=9, help="timed runs of the attention operation per kernel")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--lengths", default=None, help=argparse.SUPPRESS)  # tests: fewer lengths
    args = parser.parse_args(argv)
    for option in ("steps", "repeats"):
        if getattr(args, option) < 1:
            parser.error(f"--{option} must be at least 1, got {getattr(args, option)}")
    lengths = tuple(int(n) for n in args.lengths.split(",")) if args.lengths else LENGTHS
    result = measure(args.preset, args.steps, args.repeats, lengths)
    publish(SECTION, render, result, "benchmarks.cpu_attention", argv, args.write, args.results)


if __name__ == "__main__":
    main()
