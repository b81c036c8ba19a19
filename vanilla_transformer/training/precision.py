"""Which precision a training run uses by default: what the machine does fast, measured, chosen automatically and
printed.

- GPU: the usual mixed precision, bf16 autocast where the GPU supports bf16 (Ampere and later), else fp16 with loss
  scaling.
- CPU: measured, because CPU flags say which instructions exist, not what is fast (a CPU with `avx512_bf16` but no
  AMX can train slower in bf16 autocast than in fp32). The first run on a machine times a few training-shaped steps
  (the feed-forward network's two matrix products at the model's d_model and d_ff, forward and backward) in fp32 and
  in bf16 autocast, alternating, for about a second; picks the faster; prints both timings; and keeps the answer in
  `precision.json` under the Hugging Face cache (`$HF_HOME/vanilla-transformer/`), keyed by the CPU model, the torch
  version, the number of threads, the widths and any instruction limit set in the environment (`ONEDNN_MAX_CPU_ISA`
  and the like), so later runs reuse it. Where bf16 autocast fails, fp32.

With bf16 autocast on the CPU the training step computes attention with PyTorch's math kernel (softmax(QK^T)V in
matmuls, `sdpa_kernel(SDPBackend.MATH)`) instead of its CPU flash-attention kernel whenever the batch's longest
sequence has at most `MATH_ATTENTION_MAX_LENGTH` tokens: the flash kernel's bf16 backward pass is slower on such
short sequences, and as fast or faster on longer ones (`python -m benchmarks.cpu_attention`;
benchmarks/experiments/math-attention-kernel.md). Both compute equation (1); in fp32 the two kernels are equally
fast and the default (flash) stays.

`--bf16` / `--fp16` on the command line always win.
"""

import contextlib
import statistics
import time

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

from vanilla_transformer.files.measurements import (  # noqa: F401  (cpu_model, cpuinfo_field: part of this module)
    cpu_model,
    cpuinfo_field,
    machine_key,
    measurements_path,
    read_measurements,
    write_json_atomically,
)

BF16_MATMUL_FLAGS = ("avx512_bf16", "amx_bf16")  # what the CPU reports; printed beside the measurement
MEASURE_TOKENS = 256  # rows of the timed matrix products (a slice of a training batch)
MEASURE_SECONDS = 1.5  # how long the timed steps may take in all (at least MEASURE_MIN_ROUNDS each)
MEASURE_MIN_ROUNDS = 2
MATH_ATTENTION_MAX_LENGTH = 160  # where the math kernel stops being faster (benchmarks/experiments/math-attention-kernel.md)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (the first `flags` line of /proc/cpuinfo); empty where there is none (not Linux)."""
    return set((cpuinfo_field("flags", cpuinfo) or "").split())


def cpu_has_bf16_matmul(flags: set[str] | None = None) -> bool:
    return bool(set(BF16_MATMUL_FLAGS) & (cpu_flags() if flags is None else flags))


def precision_cache_path() -> str:
    return measurements_path("precision")


def time_training_steps(d_model: int, d_ff: int, tokens: int = MEASURE_TOKENS,
                        seconds: float = MEASURE_SECONDS) -> dict[str, float]:
    """Median milliseconds of one training-shaped step in fp32 and in bf16 autocast on the CPU: the feed-forward
    network's two matrix products (d_model -> d_ff -> d_model) over `tokens` rows, forward and backward, the two
    precisions alternating (so that a change of clock or load touches both alike) for about `seconds`, at least
    `MEASURE_MIN_ROUNDS` steps each. A precision that fails is missing from the answer."""
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(tokens, d_model, generator=generator)
    first = torch.nn.Linear(d_model, d_ff)
    second = torch.nn.Linear(d_ff, d_model)

    def step(bf16: bool) -> float:
        started = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            loss = second(torch.relu(first(inputs))).float().square().mean()
        loss.backward()
        first.zero_grad(set_to_none=True)
        second.zero_grad(set_to_none=True)
        return (time.perf_counter() - started) * 1000

    timings: dict[str, list[float]] = {"fp32": [], "bf16": []}
    for name in list(timings):
        try:
            step(name == "bf16")  # warm-up: kernels chosen, memory allocated
        except RuntimeError:  # bf16 autocast this build or CPU cannot run
            del timings[name]
    started = time.perf_counter()
    while timings and (len(next(iter(timings.values()))) < MEASURE_MIN_ROUNDS
                       or time.perf_counter() - started < seconds):
        for name in timings:
            timings[name].append(step(name == "bf16"))
    return {name: statistics.median(values) for name, values in timings.items()}


# the measurements of this process, by cache key (a run asks more than once: options, log line)
_measured: dict[str, dict] = {}


def measured_cpu_precision(d_model: int, d_ff: int, cache_path: str | None = None) -> dict:
    """{"fp32_ms", "bf16_ms" (absent where bf16 failed), "choice": "fp32"|"bf16", "cached": bool, "key"} for this
    machine and these widths: read from the cache file when it holds them, else measured and written there
    (atomically; an unreadable or unwritable cache only means measuring again)."""
    cache_path = cache_path or precision_cache_path()
    key = machine_key(f"torch {torch.__version__}", f"{torch.get_num_threads()} threads", f"d_model {d_model} d_ff {d_ff}")
    if key in _measured:
        return _measured[key]
    cache = read_measurements(cache_path)
    entry = cache.get(key)
    if isinstance(entry, dict) and entry.get("choice") in ("fp32", "bf16") and "fp32_ms" in entry:
        result = {**entry, "cached": True, "key": key}
    else:
        timings = time_training_steps(d_model, d_ff)
        bf16_faster = "bf16" in timings and timings["bf16"] < timings["fp32"]
        entry = {f"{name}_ms": round(value, 3) for name, value in timings.items()}
        entry["choice"] = "bf16" if bf16_faster else "fp32"
        cache[key] = entry
        write_json_atomically(cache_path, cache)
        result = {**entry, "cached": False, "key": key}
    _measured[key] = result
    return result


def default_precision(use_cpu: bool = False, d_model: int = 512, d_ff: int = 2048) -> tuple[dict, str]:
    """-> (Trainer argument defaults, one line saying what was chosen and why). On the CPU the choice is measured
    at the model's widths (`measured_cpu_precision`)."""
    if torch.cuda.is_available() and not use_cpu:
        if torch.cuda.is_bf16_supported():
            return {"bf16": True}, "GPU: bf16 mixed precision"
        return {"fp16": True}, "GPU without bf16: fp16 mixed precision"
    measured = measured_cpu_precision(d_model, d_ff)
    flags = [flag for flag in BF16_MATMUL_FLAGS if flag in cpu_flags()]
    timings = f"fp32 {measured['fp32_ms']:.1f} ms, " + (f"bf16 autocast {measured['bf16_ms']:.1f} ms"
                                                         if "bf16_ms" in measured else "bf16 autocast failed")
    source = "measured earlier on this machine" if measured["cached"] else "measured now"
    line = (f"CPU {cpu_model()} ({', '.join(flags) if flags else 'no ' + ' or '.join(BF16_MATMUL_FLAGS)}): "
            f"{timings} per training-shaped step (d_model {d_model}, d_ff {d_ff}; {source}, kept in "
            f"{precision_cache_path()}): ")
    if measured["choice"] == "bf16":  # the Trainer runs bf16 autocast on the CPU only with use_cpu
        return {"bf16": True, "use_cpu": True}, line + "bf16 autocast"
    return {"bf16": False}, line + "fp32"


def precision_in_use(training_args) -> str:
    """One line for the log and the model card: the precision this run trains in."""
    device = "GPU" if str(training_args.device).startswith("cuda") else "CPU"
    if training_args.bf16:
        if device == "CPU":
            return (f"bf16 autocast on the CPU, attention by the math kernel in batches of up to "
                    f"{MATH_ATTENTION_MAX_LENGTH} tokens")
        return f"bf16 autocast on the {device}"
    if training_args.fp16:
        return f"fp16 mixed precision on the {device}"
    return f"fp32 on the {device}"



def uses_math_attention(training_args, inputs) -> bool:
    """Whether a training step on `inputs` computes attention with the math kernel (see the module's docstring)."""
    if not training_args.bf16 or str(training_args.device).startswith("cuda"):
        return False
    lengths = [value.shape[-1] for key, value in inputs.items()
               if key in ("input_ids", "labels", "decoder_input_ids") and hasattr(value, "shape") and value.dim() >= 2]
    return bool(lengths) and max(lengths) <= MATH_ATTENTION_MAX_LENGTH


def attention_kernel(training_args, inputs):
    """A context for one training step: the math attention kernel where `uses_math_attention`, else nothing."""
    if not uses_math_attention(training_args, inputs):
        return contextlib.nullcontext()

    return sdpa_kernel(SDPBackend.MATH)
