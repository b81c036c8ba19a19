"""bf16 autocast trains the model like fp32: the loss curve of a short run stays close to the fp32 one."""

import pytest
import torch

from helpers import tiny_model


def reversal_batches(steps: int, seed: int, batch: int = 16, length: int = 6):
    """Random sequences of 10 token types whose target is the source reversed: the loss falls from ln(53) well
    below ln(10) once the model attends to the right source position."""
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        source = torch.randint(3, 13, (batch, length), generator=generator)
        yield source, source.flip(1)


def loss_curve(autocast_dtype, seed: int, steps: int = 100) -> list[float]:
    model = tiny_model(seed).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3, betas=(0.9, 0.98), eps=1e-9)
    losses = []
    for source, target in reversal_batches(steps, seed):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast_dtype is not None):
            output = model(input_ids=source, labels=target)
        loss = output.loss
        assert output.logits.dtype == (autocast_dtype or torch.float32)  # the matrix products ran in bf16
        assert loss.dtype == torch.float32  # ... and the loss in fp32, whatever the autocast
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return losses


@pytest.mark.slow  # trainings
def test_bf16_autocast_loss_curve_follows_fp32(seed):
    fp32 = loss_curve(None, seed)
    bf16 = loss_curve(torch.bfloat16, seed)
    assert fp32[-1] < 0.5 * fp32[0]  # the run learns, so the curves have a shape to compare
    assert all(torch.isfinite(torch.tensor(bf16)))
    assert bf16 != fp32  # bf16 rounding did change the numbers
    window = 10  # compare smoothed curves: bf16 rounding moves single steps more than the trend
    for start in range(0, len(fp32), window):
        mean_fp32 = sum(fp32[start:start + window]) / window
        mean_bf16 = sum(bf16[start:start + window]) / window
        assert abs(mean_bf16 - mean_fp32) <= 0.05 * mean_fp32, (start, mean_fp32, mean_bf16)
