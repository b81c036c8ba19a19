"""training/precision.py: on the CPU the faster of fp32 and bf16 autocast, measured at the model's widths and kept
per machine; the command line always wins; the GPU rule. The measurement is mocked where the choice is tested, and
run for real (small widths) where the measurement itself is; /proc/cpuinfo's format is written in the test."""

import json

import pytest
import torch

import vanilla_transformer.training.precision as precision
from vanilla_transformer.files.measurements import INSTRUCTION_LIMITS
from vanilla_transformer.training.arguments import parse_arguments

CPUINFO = """processor\t: 0
vendor_id\t: GenuineIntel
model name\t: Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz
flags\t\t: fpu vme sse sse2 avx avx2 avx512f {extra}
bugs\t\t: spectre_v1

processor\t: 1
flags\t\t: fpu vme
"""


@pytest.fixture
def measured(tmp_path, monkeypatch):
    """The CPU's timings as the test says (ms per step by precision); the cache in a fresh folder; every measurement
    recorded with its widths."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(precision, "precision_cache_path", lambda: str(tmp_path / "cache" / "precision.json"))
    monkeypatch.setattr(precision, "_measured", {})
    calls, timings = [], {"fp32": 10.0, "bf16": 20.0}

    def time_training_steps(d_model, d_ff, tokens=precision.MEASURE_TOKENS, seconds=precision.MEASURE_SECONDS):
        calls.append((d_model, d_ff))
        return dict(timings)

    monkeypatch.setattr(precision, "time_training_steps", time_training_steps)
    return calls, timings


def test_cpu_flags_and_model_are_read_from_cpuinfo(tmp_path):
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(CPUINFO.format(extra="avx512_bf16"))
    flags = precision.cpu_flags(str(cpuinfo))
    assert {"avx2", "avx512f", "avx512_bf16"} <= flags and "sse" in flags  # the first processor's line
    assert precision.cpu_has_bf16_matmul(flags) and not precision.cpu_has_bf16_matmul({"avx512_vnni"})
    assert precision.cpu_model(str(cpuinfo)) == "Intel(R) Xeon(R) Platinum 8481C CPU @ 2.70GHz"
    assert precision.cpu_flags(str(tmp_path / "missing")) == set()


@pytest.mark.parametrize("fp32_ms, bf16_ms, bf16", [(10.0, 6.0, True), (10.0, 15.0, False), (10.0, None, False)])
def test_the_faster_precision_is_chosen_whatever_the_flags_say(measured, monkeypatch, fp32_ms, bf16_ms, bf16):
    calls, timings = measured
    timings.clear()
    timings.update({"fp32": fp32_ms, **({"bf16": bf16_ms} if bf16_ms is not None else {})})
    monkeypatch.setattr(precision, "cpu_flags", lambda cpuinfo="/proc/cpuinfo": {"avx512_bf16"})  # flags say bf16
    defaults, line = precision.default_precision(d_model=64, d_ff=256)
    assert defaults == ({"bf16": True, "use_cpu": True} if bf16 else {"bf16": False})
    assert line.endswith("bf16 autocast" if bf16 else ": fp32") and f"fp32 {fp32_ms:.1f} ms" in line
    assert ("bf16 autocast failed" in line) is (bf16_ms is None) and "d_model 64, d_ff 256" in line
    assert calls == [(64, 256)]


def test_the_answer_is_kept_per_machine_and_width(measured, tmp_path, monkeypatch):
    calls, _ = measured
    precision.default_precision(d_model=64, d_ff=256)
    precision.default_precision(d_model=64, d_ff=256)
    assert calls == [(64, 256)]  # once per process
    monkeypatch.setattr(precision, "_measured", {})  # a new process: the file answers
    _, line = precision.default_precision(d_model=64, d_ff=256)
    assert calls == [(64, 256)] and "measured earlier on this machine" in line
    precision.default_precision(d_model=128, d_ff=512)  # other widths: measured
    assert calls == [(64, 256), (128, 512)]
    cache = json.loads((tmp_path / "cache" / "precision.json").read_text())
    assert len(cache) == 2 and all(torch.__version__ in key and precision.cpu_model() in key for key in cache)
    monkeypatch.setattr(precision, "_measured", {})
    monkeypatch.setattr(torch, "__version__", "9.9.9")  # another torch: measured again
    precision.default_precision(d_model=64, d_ff=256)
    assert calls[-1] == (64, 256) and len(calls) == 3


@pytest.mark.parametrize("name, value", [("ONEDNN_MAX_CPU_ISA", "AVX512_CORE_BF16"), ("ATEN_CPU_CAPABILITY", "avx2"),
                                         ("MKL_ENABLE_INSTRUCTIONS", "AVX2")])
def test_an_instruction_limit_in_the_environment_is_measured_apart(measured, tmp_path, monkeypatch, name, value):
    """oneDNN, PyTorch's kernels and MKL obey these variables: bf16 without AMX is another machine (a CPU with
    avx512_bf16 and no AMX), and its answer must neither come from nor replace the machine's own."""
    for limit in INSTRUCTION_LIMITS:
        monkeypatch.delenv(limit, raising=False)
    calls, timings = measured
    timings.update(fp32=10.0, bf16=6.0)
    assert precision.default_precision(d_model=64, d_ff=256)[0]["bf16"] is True
    monkeypatch.setenv(name, value)
    timings.update(fp32=10.0, bf16=15.0)  # slower in bf16 under the limit
    assert precision.default_precision(d_model=64, d_ff=256)[0] == {"bf16": False}
    assert len(calls) == 2
    monkeypatch.setattr(precision, "_measured", {})  # new processes, with and without the limit: both from the file
    assert precision.default_precision(d_model=64, d_ff=256)[0] == {"bf16": False}
    monkeypatch.delenv(name)
    assert precision.default_precision(d_model=64, d_ff=256)[0]["bf16"] is True
    assert len(calls) == 2
    keys = json.loads((tmp_path / "cache" / "precision.json").read_text())
    assert sorted(f"{name}={value}" in key for key in keys) == [False, True]


@pytest.mark.parametrize("content", ["{not json", "[1, 2]", '{"x": 1}', ""])
def test_a_damaged_cache_means_measuring_again(measured, tmp_path, content):
    calls, _ = measured
    path = tmp_path / "cache" / "precision.json"
    path.parent.mkdir()
    path.write_text(content)
    assert precision.default_precision(d_model=32, d_ff=64)[0] == {"bf16": False}
    assert calls == [(32, 64)] and len(json.loads(path.read_text())) >= 1


def test_an_unwritable_cache_only_means_measuring_again(measured, tmp_path, monkeypatch):
    calls, _ = measured
    blocker = tmp_path / "file"
    blocker.write_text("")  # a file where the cache folder would be
    monkeypatch.setattr(precision, "precision_cache_path", lambda: str(blocker / "precision.json"))
    assert precision.default_precision(d_model=32, d_ff=64)[0] == {"bf16": False}
    assert calls == [(32, 64)]


def test_the_measurement_times_both_precisions_within_its_budget():
    import time

    started = time.perf_counter()
    timings = precision.time_training_steps(32, 64, tokens=16, seconds=0.2)
    assert time.perf_counter() - started < 10  # a budget, plus warm-up (generous: the machine may be busy)
    assert set(timings) <= {"fp32", "bf16"} and "fp32" in timings
    assert all(value > 0 for value in timings.values())


def test_the_recipe_trains_in_the_measured_precision_and_the_command_line_wins(measured, monkeypatch, tmp_path):
    calls, timings = measured
    for bf16 in (True, False):
        monkeypatch.setattr(precision, "_measured", {})
        (tmp_path / "cache" / "precision.json").unlink(missing_ok=True)  # a machine measured for the first time
        timings.update(fp32=10.0, bf16=5.0 if bf16 else 50.0)
        _, _, args, _ = parse_arguments(["--report_to", "none", "--d_model", "48", "--ffn_dim", "96"])
        assert args.bf16 is bf16 and not args.fp16 and calls[-1] == (48, 96)
        _, _, args, _ = parse_arguments(["--report_to", "none", "--bf16", str(not bf16), "--use_cpu", "true"])
        assert args.bf16 is (not bf16)
    _, _, args, _ = parse_arguments(["--report_to", "none", "--preset", "multi30k"])  # the preset's widths
    assert calls[-1] == (256, 1024)


def test_gpu_gets_the_usual_mixed_precision(monkeypatch, measured):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    for supported, expected in ((True, {"bf16": True}), (False, {"fp16": True})):
        monkeypatch.setattr(torch.cuda, "is_bf16_supported", lambda: supported)
        assert precision.default_precision()[0] == expected
    calls, _ = measured
    assert calls == []
    assert precision.default_precision(use_cpu=True)[0] == {"bf16": False}  # --use_cpu on a GPU machine: measured
    assert len(calls) == 1


# ---------------------------------------------------------------------------------------------------------------
# With bf16 autocast on the CPU, attention of short batches by PyTorch's math kernel (its flash kernel's bf16 backward
# is slower there); the oracle for the numbers is the flash kernel itself, chosen by torch's default dispatch.


def _attention_kernels_run(step) -> set[str]:
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        step()
    names = {event.key for event in prof.key_averages()}
    return {kernel for kernel, op in [("flash", "aten::_scaled_dot_product_flash_attention_for_cpu"),
                                      ("math", "aten::_scaled_dot_product_attention_math")] if op in names}


def _trainer_and_inputs(tmp_path, seed: int, length: int, bf16: bool):
    from helpers import random_batch, tiny_model
    from vanilla_transformer.training.trainer import TranslationTrainer, TranslationTrainingArguments

    model = tiny_model(seed, max_position_embeddings=256).train()
    args = TranslationTrainingArguments(output_dir=str(tmp_path), learning_rate=1e-3, report_to="none",
                                        use_cpu=True, bf16=bf16)
    trainer = TranslationTrainer(model=model, args=args)
    input_ids, attention_mask = random_batch(seed, length=length)
    labels, _ = random_batch(seed + 100, length=length - 1)
    inputs = dict(input_ids=input_ids, attention_mask=attention_mask,
                  decoder_input_ids=model.prepare_decoder_input_ids_from_labels(labels), labels=labels)
    return trainer, inputs


@pytest.mark.parametrize("length, bf16, kernel", [(12, True, "math"), (precision.MATH_ATTENTION_MAX_LENGTH, True, "math"),
                                                  (precision.MATH_ATTENTION_MAX_LENGTH + 20, True, "flash"),
                                                  (12, False, "flash")])
def test_bf16_training_steps_on_the_cpu_use_the_math_attention_kernel_for_short_batches(tmp_path, seed, length, bf16,
                                                                                       kernel):
    trainer, inputs = _trainer_and_inputs(tmp_path, seed, length, bf16)
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):  # as accelerate runs the prepared model
        assert _attention_kernels_run(lambda: trainer.training_step(trainer.model, dict(inputs))) == {kernel}
    assert precision.uses_math_attention(trainer.args, inputs) is (kernel == "math")
    assert ("math kernel" in precision.precision_in_use(trainer.args)) is bf16


def test_the_math_kernel_step_computes_the_flash_kernels_loss_and_gradients(tmp_path, seed):
    trainer, inputs = _trainer_and_inputs(tmp_path, seed, 14, bf16=True)
    model = trainer.model  # tiny_config has no dropout: the same function each time

    def gradients(step):
        model.zero_grad(set_to_none=True)
        loss = step()
        return loss.item(), [p.grad.float().clone() for p in model.parameters() if p.grad is not None]

    with torch.autocast("cpu", dtype=torch.bfloat16):  # as accelerate wraps the prepared model's forward
        ours = gradients(lambda: trainer.training_step(model, dict(inputs)))
    exact = gradients(lambda: _backward(trainer.compute_loss(model, dict(inputs))))  # fp32, no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):  # the flash kernel, as torch picks it by default
        assert _attention_kernels_run(lambda: model(**inputs).loss) == {"flash"}
        flash = gradients(lambda: _backward(trainer.compute_loss(model, dict(inputs))))

    def error(run):  # relative distance of all gradients from fp32's
        difference = torch.cat([(mine - true).flatten() for mine, true in zip(run[1], exact[1])])
        true = torch.cat([gradient.flatten() for gradient in exact[1]])
        return (torch.linalg.vector_norm(difference) / torch.linalg.vector_norm(true)).item()

    assert len(ours[1]) == len(flash[1]) == len(exact[1]) > 0
    assert abs(ours[0] - exact[0]) <= 2 * abs(flash[0] - exact[0]) + 1e-3 * exact[0]
    assert 0 < error(ours) <= 2 * error(flash) and error(ours) < 0.2  # bf16 rounding, no more than flash's


def _backward(loss):
    loss.backward()
    return loss.detach()
