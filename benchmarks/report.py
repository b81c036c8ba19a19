"""What every benchmark report says: the machine it ran on, and its own section of benchmarks/RESULTS.md.

    from benchmarks.report import machine_description, software_versions, write_section

    machine_description()   # "CPU only: 2 cores of AMD EPYC, 2 torch threads, load average 0.9 at the start
                            #  (other work running); CPU flags: avx2"  or  "1 x NVIDIA H100 80GB HBM3, AMD EPYC ..."
    software_versions()     # "torch 2.13.0+cpu, transformers 5.24.0"
    write_section("## Speed: ours vs MarianMTModel", text)   # replaces that section of RESULTS.md, keeps the others
"""

import os
import re
import sys
from collections.abc import Callable
from pathlib import Path

from vanilla_transformer.files.measurements import instruction_limits
from vanilla_transformer.training.precision import cpu_flags as all_cpu_flags
from vanilla_transformer.training.precision import cpu_model  # noqa: F401  (part of this module's report)

RESULTS = Path(__file__).resolve().parent / "RESULTS.md"

# The CPU features that decide how fast fp32 and bf16 matrix products run.
MATMUL_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_bf16")


def cpu_flags(wanted: tuple[str, ...] = MATMUL_FLAGS) -> list[str]:
    """Which of the `wanted` CPU features this machine has (empty where /proc/cpuinfo does not say)."""
    flags = all_cpu_flags()
    return [flag for flag in wanted if flag in flags]


def machine_description() -> str:
    """The GPUs (if any), the CPU model, cores, torch threads, the load at the start, the matmul CPU flags and any
    instruction limit set in the environment (`ONEDNN_MAX_CPU_ISA` and the like)."""
    import torch

    if torch.cuda.is_available():
        machine = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, {cpu_model()}"
    else:
        machine = f"CPU only: {os.cpu_count()} cores of {cpu_model()}, {torch.get_num_threads()} torch threads"
        if hasattr(os, "getloadavg"):
            load = os.getloadavg()[0]
            # the 1-minute load average: below half the cores, what ran before has all but gone
            shared = " (other work running)" if load >= 0.5 * (os.cpu_count() or 1) else ""
            machine += f", load average {load:.1f} at the start{shared}"
    limits = instruction_limits()
    limited = f"; instructions limited by {limits}" if limits else ""
    return f"{machine}; CPU flags: {', '.join(cpu_flags()) or 'none listed'}{limited}"


def software_versions() -> str:
    import torch
    import transformers

    return f"torch {torch.__version__}, transformers {transformers.__version__}"


def write_section(heading: str, text: str, path: str | Path = RESULTS) -> None:
    """Replace the section of `path` that starts with the line `heading` (up to the next "## " heading) by `text`,
    or add `text` at the end; every other section stays as it is. `text` starts with `heading` itself."""
    path = Path(path)
    existing = path.read_text(encoding="utf-8") if path.exists() else "# Benchmark results\n"
    section = re.compile(rf"^{re.escape(heading)}\n.*?(?=^## |\Z)", re.S | re.M)
    if section.search(existing):
        updated = section.sub(lambda _: text.rstrip("\n") + "\n\n", existing, count=1)
    else:
        updated = existing.rstrip("\n") + "\n\n" + text
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(updated.rstrip("\n") + "\n", encoding="utf-8")


def publish(section: str, render: Callable[[dict, str], str], result: dict, module: str, argv: list[str] | None,
            write: bool, results: str | None = None) -> str:
    """Render a timing benchmark's `result` with the command that reproduces it, print it, and with `write` replace
    its `section` of RESULTS.md (or of `results`)."""
    command = f"python -m {module} " + " ".join(argv if argv is not None else sys.argv[1:])
    text = render(result, command.strip())
    print(text)
    if write:
        write_section(section, text, *([results] if results else []))
    return text
