"""Which precision a training run uses by default: what the machine does fast, chosen automatically and printed.

- GPU: the usual mixed precision, bf16 autocast where the GPU supports bf16 (Ampere and later), else fp16 with loss
  scaling.
- CPU with bf16 matrix instructions (`avx512_bf16` or AMX, `amx_bf16`, in /proc/cpuinfo's flags): bf16 autocast
  (the loss curve follows fp32's, tests/test_mixed_precision.py).
- Any other CPU: fp32 (without those instructions bf16 is emulated and slower than fp32).

With bf16 autocast on the CPU the training step computes attention with PyTorch's math kernel (softmax(QK^T)V in
matmuls, `sdpa_kernel(SDPBackend.MATH)`) instead of its CPU flash-attention kernel whenever the batch's longest
sequence has at most `MATH_ATTENTION_MAX_LENGTH` tokens: the flash kernel's bf16 backward pass is slower on such
short sequences, and as fast or faster on longer ones (`python -m benchmarks.cpu_attention`;
benchmarks/experiments/math-attention-kernel.md). Both compute equation (1); in fp32 the two kernels are equally
fast and the default (flash) stays.

`--bf16` / `--fp16` on the command line always win.
"""

import contextlib

import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

BF16_MATMUL_FLAGS = ("avx512_bf16", "amx_bf16")
MATH_ATTENTION_MAX_LENGTH = 160  # where the math kernel stops being faster (benchmarks/experiments/math-attention-kernel.md)


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (the first `flags` line of /proc/cpuinfo); empty where there is none (not Linux)."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                name, _, value = line.partition(":")
                if name.strip() == "flags":
                    return set(value.split())
    except OSError:
        pass
    return set()


def cpu_has_bf16_matmul(flags: set[str] | None = None) -> bool:
    return bool(set(BF16_MATMUL_FLAGS) & (cpu_flags() if flags is None else flags))


def default_precision(use_cpu: bool = False) -> tuple[dict, str]:
    """-> (Trainer argument defaults, one line saying what was chosen and why)."""
    if torch.cuda.is_available() and not use_cpu:
        if torch.cuda.is_bf16_supported():
            return {"bf16": True}, "GPU: bf16 mixed precision"
        return {"fp16": True}, "GPU without bf16: fp16 mixed precision"
    flags = cpu_flags()
    found = [flag for flag in BF16_MATMUL_FLAGS if flag in flags]
    if found:  # the Trainer runs bf16 autocast on the CPU only with use_cpu
        return {"bf16": True, "use_cpu": True}, f"CPU with {', '.join(found)}: bf16 autocast"
    listed = "no CPU flags readable" if not flags else f"CPU without {' or '.join(BF16_MATMUL_FLAGS)}"
    return {"bf16": False}, f"{listed}: fp32"


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
