"""training/precision.py: bf16 autocast only where the CPU reports bf16 matrix instructions, fp32 elsewhere; the
command line always wins. The CPU flags are mocked both ways; /proc/cpuinfo's format is written in the test."""

import pytest
import torch

import training.precision as precision
from training.train import parse_arguments

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu vme sse sse2 avx avx2 avx512f {extra}
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu vme
"""


@pytest.mark.parametrize("extra, bf16", [("avx512_bf16", True), ("amx_bf16 amx_tile", True),
                                         ("avx512_vnni", False), ("", False)])
def test_cpu_flags_decide_bf16(tmp_path, monkeypatch, extra, bf16):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(extra=extra))
    flags = precision.cpu_flags(str(cpuinfo))
    assert {"avx2", "avx512f"} <= flags and "sse" in flags  # the first processor's line
    assert precision.cpu_has_bf16_matmul(flags) is bf16

    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": flags)
    defaults, line = precision.default_precision()
    assert defaults == ({"bf16": True, "use_cpu": True} if bf16 else {"bf16": False})
    assert line.endswith("bf16 autocast" if bf16 else ": fp32")
    _, _, args, _ = parse_arguments(["--report_to", "none"])
    assert args.bf16 is bf16 and not args.fp16
    _, _, args, _ = parse_arguments(["--report_to", "none", "--bf16", str(not bf16), "--use_cpu", "true"])  # it wins
    assert args.bf16 is (not bf16)


def test_no_cpuinfo_means_fp32(tmp_path, monkeypatch):
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": set())
    assert precision.default_precision() == ({"bf16": False}, "no CPU flags readable: fp32")


def test_gpu_gets_the_usual_mixed_precision(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported, expected in ((True, {"bf16": True}), (False, {"fp16": True})):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
        assert precision.default_precision()[0] == expected
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": set())
    assert precision.default_precision(use_cpu=True)[0] == {"bf16": False}  # --use_cpu on a GPU machine
