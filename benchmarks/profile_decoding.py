"""Where a decoding step of `generate` spends its time (not a test): ours and MarianMTModel, small size, same weights.

    python benchmarks/profile_decoding.py                 # batch 1 and 8, prints a table for benchmarks/NOTES.md

For each model and batch size, greedy decoding of exactly `--new-tokens` tokens from 24-token sources, measured
three ways (medians of `--repeats`, after a warm-up):

- `generate`: wall time per new token of `model.generate` (minus one encoder pass);
- forward loop: the same decoding as a bare loop (one cached decoder forward and an argmax per token), so the
  difference to `generate` is generate's own per-step work (input preparation, logits processors, stopping
  criteria, cache bookkeeping);
- inside one forward: `torch.profiler` self-CPU time of the aten operators, grouped (matrix products, attention,
  layer norm, element-wise, the rest), and the Python/dispatch time that no operator accounts for.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from speed import build_models, machine, random_batch  # noqa: E402

GROUPS = {
    "matrix products (addmm, mm, bmm, linear)": ("aten::addmm", "aten::mm", "aten::bmm", "aten::matmul"),
    "attention kernel (sdpa)": ("aten::_scaled_dot_product", "aten::scaled_dot_product"),
    "layer norm": ("aten::native_layer_norm", "aten::layer_norm"),
}


def median_seconds(fn, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def decode_loop(model, batch, new_tokens: int):
    """Greedy decoding as a bare loop of cached forwards: what generate does, without generate."""
    with torch.inference_mode():
        encoder_outputs = model.get_encoder()(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
        tokens = torch.full((batch["input_ids"].shape[0], 1), model.config.decoder_start_token_id)
        cache = None
        for _ in range(new_tokens):
            out = model(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"],
                        decoder_input_ids=tokens[:, -1:], past_key_values=cache, use_cache=True)
            cache = out.past_key_values
            tokens = torch.cat([tokens, out.logits[:, -1].argmax(-1, keepdim=True)], dim=1)
    return tokens, cache, encoder_outputs


def profile_step(model, batch, cache, encoder_outputs, tokens) -> tuple[float, dict[str, float]]:
    """Wall time of one cached decoder forward and the self-CPU time of its operators by group (ms)."""
    from torch.profiler import ProfilerActivity, profile

    def step():
        model(encoder_outputs=encoder_outputs, attention_mask=batch["attention_mask"],
              decoder_input_ids=tokens[:, -1:], past_key_values=cache, use_cache=True)
        cache.crop(-1)  # undo the step's cache update: every call decodes the same position

    with torch.inference_mode():
        wall = median_seconds(step, 20) * 1e3
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(10):
                step()
    groups = dict.fromkeys([*GROUPS, "everything else (element-wise, copies, views)"], 0.0)
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        ms = event.self_cpu_time_total / 1e3 / 10
        group = next((g for g, prefixes in GROUPS.items() if event.key.startswith(prefixes)),
                     "everything else (element-wise, copies, views)")
        groups[group] += ms
    return wall, groups


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"{machine()}; torch {torch.__version__}, {torch.get_num_threads()} threads\n")
    ours, marian = (m.eval() for m in build_models("small", "cpu"))
    n = args.new_tokens
    for batch_size in args.batch_sizes:
        batch = random_batch(ours.config.vocab_size, batch_size, 24, 1, "cpu", seed=0)
        batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
        for name, model in (("ours", ours), ("Marian", marian)):
            with torch.inference_mode():
                encoder = median_seconds(lambda: model.get_encoder()(**batch), args.repeats)
                generate = median_seconds(lambda: model.generate(**batch, num_beams=1, do_sample=False,
                                                                 max_new_tokens=n, min_new_tokens=n), args.repeats)
            loop = median_seconds(lambda: decode_loop(model, batch, n), args.repeats)
            tokens, cache, encoder_outputs = decode_loop(model, batch, n // 2)
            wall, groups = profile_step(model, batch, cache, encoder_outputs, tokens)
            per_token = lambda seconds: (seconds - encoder) / n * 1e3  # noqa: E731
            print(f"batch {batch_size}, {name}: generate {per_token(generate):.2f} ms/token, bare forward loop "
                  f"{per_token(loop):.2f} ms/token (generate's own work {per_token(generate) - per_token(loop):.2f}); "
                  f"one forward {wall:.2f} ms = " + ", ".join(f"{g} {ms:.2f}" for g, ms in groups.items())
                  + f", Python and dispatch {wall - sum(groups.values()):.2f}", flush=True)


if __name__ == "__main__":
    main()
