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
import time

import torch

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
from benchmarks.report import machine_description  # noqa: E402
from benchmarks.speed import SIZES, build_models, random_batch  # noqa: E402

# A model whose arithmetic is negligible: its step time is the per-step overhead of the framework and the code.
SIZES.setdefault("tiny", dict(d_model=16, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
                              decoder_attention_heads=4, encoder_ffn_dim=32, decoder_ffn_dim=32, vocab_size=8000))

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


def profile_step(model, batch, cache, encoder_outputs, tokens) -> tuple[float, dict[str, float], int]:
    """Wall time of one cached decoder forward, the self-CPU time of its operators by group (ms), and how many
    aten operators it dispatches (a count, which a busy machine does not change)."""
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
    operators = 0
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        operators += event.count
        ms = event.self_cpu_time_total / 1e3 / 10
        group = next((g for g, prefixes in GROUPS.items() if event.key.startswith(prefixes)),
                     "everything else (element-wise, copies, views)")
        groups[group] += ms
    return wall, groups, operators // 10


def python_calls_per_token(fn, new_tokens: int) -> float:
    """Python function calls per generated token (cProfile's count of calls)."""
    import cProfile
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn)
    return pstats.Stats(profiler).total_calls / new_tokens


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", nargs="+", default=["small", "tiny"], help="small (d 256, 3+3) and tiny (d 16, 3+3)")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    print(f"{machine_description()}; torch {torch.__version__}\n")
    n = args.new_tokens
    for size, batch_size in ((size, batch_size) for size in args.sizes for batch_size in args.batch_sizes):
        ours, marian = (m.eval() for m in build_models(size, "cpu"))
        batch = random_batch(ours.config.vocab_size, batch_size, 24, 1, "cpu", seed=0)
        batch = {k: batch[k] for k in ("input_ids", "attention_mask")}
        for name, model in (("ours", ours), ("Marian", marian)):
            # n tokens each: our source-length bound off, as Marian has none
            fixed = {"max_new_tokens": n, "min_new_tokens": n, **({"max_length_a": None} if name == "ours" else {})}
            with torch.inference_mode():
                encoder = median_seconds(lambda: model.get_encoder()(**batch), args.repeats)
                generate = median_seconds(lambda: model.generate(**batch, num_beams=1, do_sample=False, **fixed),
                                          args.repeats)
            loop = median_seconds(lambda: decode_loop(model, batch, n), args.repeats)
            tokens, cache, encoder_outputs = decode_loop(model, batch, n // 2)
            wall, groups, operators = profile_step(model, batch, cache, encoder_outputs, tokens)
            with torch.inference_mode():
                calls_generate = python_calls_per_token(lambda: model.generate(
                    **batch, num_beams=1, do_sample=False, **fixed), n)
            calls_loop = python_calls_per_token(lambda: decode_loop(model, batch, n), n)
            per_token = lambda seconds: (seconds - encoder) / n * 1e3  # noqa: E731
            print(f"{size}, batch {batch_size}, {name}: generate {per_token(generate):.2f} ms/token, bare forward loop "
                  f"{per_token(loop):.2f} ms/token (generate's own work {per_token(generate) - per_token(loop):.2f}); "
                  f"one forward {wall:.2f} ms = " + ", ".join(f"{g} {ms:.2f}" for g, ms in groups.items())
                  + f", Python and dispatch {wall - sum(groups.values()):.2f}; {operators} aten operators per forward; "
                  f"Python calls per token: generate {calls_generate:.0f}, bare loop {calls_loop:.0f}", flush=True)


if __name__ == "__main__":
    main()
