"""training/precision.py: bf16 autocast only where the CPU reports bf16 matrix instructions, fp32 elsewhere; the
command line always wins. The CPU flags are mocked both ways; /proc/cpuinfo's format is written in the test."""

import pytest
import torch

import vanilla_transformer.training.precision as precision
from vanilla_transformer.training.arguments import parse_arguments

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
