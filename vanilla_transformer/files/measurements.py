"""Measurements kept between runs under the Hugging Face cache (`$HF_HOME/vanilla-transformer/NAME.json`), keyed by
what they depend on (the CPU model among it): what is fast on a machine is measured there once, not read off its
flags. Reading and writing never fail a run: an unreadable cache is empty, an unwritable one is not written (the
next run measures again); writes are atomic. No torch here: the CTranslate2 engine uses it too."""

import json
import os
import platform
import tempfile

from huggingface_hub import constants as hub_constants


def cpuinfo_field(name: str, cpuinfo: str = "/proc/cpuinfo") -> str | None:
    """The value of the first `name: value` line of /proc/cpuinfo (Linux), or None."""
    try:
        with open(cpuinfo, encoding="utf-8") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() == name:
                    return value.strip()
    except OSError:
        pass
    return None


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name, e.g. "AMD EPYC 7B13" (/proc/cpuinfo), else the platform's processor name."""
    return cpuinfo_field("model name", cpuinfo) or platform.processor() or platform.machine() or "unknown CPU"


# environment variables that limit the instructions the math libraries use (oneDNN, PyTorch's own kernels, MKL,
# CTranslate2): what is fast under one of them is not what is fast on the machine, so they are part of every key
INSTRUCTION_LIMITS = ("ONEDNN_MAX_CPU_ISA", "DNNL_MAX_CPU_ISA", "ATEN_CPU_CAPABILITY", "MKL_ENABLE_INSTRUCTIONS",
                      "CT2_FORCE_CPU_ISA")


def usable_cpus() -> list[int]:
    """The CPUs this process may run on: its affinity where the system tells it (a container or `taskset` may give
    it fewer than the machine has), else all of the machine's."""
    try:
        return sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return list(range(os.cpu_count() or 1))


def instruction_limits() -> str:
    """The instruction limits set in the environment, as "NAME=value, ..." ("" where none is set)."""
    return ", ".join(f"{name}={os.environ[name]}" for name in INSTRUCTION_LIMITS if os.environ.get(name))


def machine_key(*parts: str) -> str:
    """A measurement's cache key: the CPU model, `parts`, and the instruction limits where any is set."""
    limits = instruction_limits()
    return " | ".join([cpu_model(), *parts, *([limits] if limits else [])])


def measurements_path(name: str) -> str:
    return os.path.join(hub_constants.HF_HOME, "vanilla-transformer", f"{name}.json")


def read_measurements(path: str) -> dict:
    """The cache file's entries ({} where it is missing, unreadable or not a JSON object)."""
    try:
        with open(path, encoding="utf-8") as f:
            cache = json.load(f)
    except (OSError, ValueError):
        return {}
    return cache if isinstance(cache, dict) else {}


def write_json_atomically(path: str, value) -> None:
    """`value` as JSON to `path` through a temporary file renamed over it; nothing where it cannot be written."""
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        descriptor, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".measurements-", suffix=".tmp")
        try:
            with os.fdopen(descriptor, "w", encoding="utf-8") as f:
                json.dump(value, f, indent=1, sort_keys=True)
            os.replace(temporary, path)
        except BaseException:
            os.unlink(temporary)
            raise
    except OSError:
        pass  # no cache: the next run measures again


__all__ = ["INSTRUCTION_LIMITS", "cpu_model", "cpuinfo_field", "instruction_limits", "machine_key", "measurements_path",
           "read_measurements", "write_json_atomically"]
