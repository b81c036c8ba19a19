"""Speed benchmark: this model against transformers' own `MarianMTModel`, same size, same weights, one process.

    python benchmarks/speed.py                      # small and base, writes benchmarks/RESULTS.md
    python benchmarks/speed.py --sizes small --repeats 3 --no-write

Both models are built from one `MarianConfig` (ReLU, embeddings scaled by sqrt(d_model) and tied to the output
projection, one shared vocabulary); ours gets Marian's weights through `vanilla_transformer.interop.convert`, so the two
compute the same function and the benchmark checks that they generate the same tokens before it times anything.
Each measurement alternates the two models (ours first on even repeats, Marian first on odd ones) and reports the
median over the repeats and the ratio of the medians, ours / Marian (> 1 means ours is faster or smaller).

Measured:
- training tokens/s (source + target tokens of a forward, backward and Adam step), fp32 and bf16 autocast;
- generation, new tokens/s (every sentence decodes exactly `--new-tokens` tokens), greedy and beam 4, batch 8 and 1;
- memory of a training step: the bytes of activations autograd saves for the backward pass (exact), and the peak
  memory above what the model, optimizer state and batch already hold (CPU: the process's peak resident set, each
  measurement in a fresh process, which the allocator makes vary from run to run: see
  benchmarks/experiments/speed-vs-marian.md; CUDA: `torch.cuda.max_memory_allocated`);
- achieved training GFLOP/s (matmul FLOPs of a step counted by `torch.utils.flop_counter`) as a fraction of the
  machine's matmul peak for the dtype, measured here on large square matrices.
"""

import argparse
import contextlib
import json
import statistics
import subprocess
import sys
import time
from datetime import date
from pathlib import Path

import torch

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401
from transformers import MarianConfig, MarianMTModel  # noqa: E402

from benchmarks.checkout import ROOT  # noqa: E402
from benchmarks.report import RESULTS, machine_description, software_versions, write_section  # noqa: E402
from vanilla_transformer import PAPER_PRESETS, VanillaTransformerForConditionalGeneration  # noqa: E402
from vanilla_transformer.interop.convert import map_weights, marian_config, marian_weight_map  # noqa: E402

SIZES = {  # the multi30k training preset's size, and the paper's base model (Table 3); dropout is set below
    "small": dict(d_model=256, encoder_layers=3, decoder_layers=3, encoder_attention_heads=4, decoder_attention_heads=4,
                  encoder_ffn_dim=1024, decoder_ffn_dim=1024, vocab_size=8000),
    "base": {**{k: v for k, v in PAPER_PRESETS["base"].items() if k != "dropout"}, "vocab_size": 32000},
}
SECTION = "## Speed: ours vs MarianMTModel"


# ----------------------------------------------------------------------------------------------------------------
# The two models


def build_models(size: str, device: str, attn_implementation: str = "sdpa", seed: int = 0):
    """(ours, marian), both in train mode with dropout 0.1, the same weights, on `device`."""
    torch.manual_seed(seed)
    source = MarianConfig(**SIZES[size], activation_function="relu", scale_embedding=True, dropout=0.1,
                          attention_dropout=0.0, activation_dropout=0.0, max_position_embeddings=512,
                          pad_token_id=0, eos_token_id=2, decoder_start_token_id=0, forced_eos_token_id=None,
                          share_encoder_decoder_embeddings=True, tie_word_embeddings=True)
    marian = MarianMTModel._from_config(source, attn_implementation=attn_implementation)
    with torch.no_grad():  # a random (non-zero) logits bias, so that converting it is checked too
        marian.final_logits_bias.normal_(0.0, 0.1)
    ours = VanillaTransformerForConditionalGeneration._from_config(marian_config(source),
                                                                    attn_implementation=attn_implementation)
    ours.load_state_dict(map_weights(ours, marian.state_dict(), marian_weight_map(source)))
    return ours.to(device).train(), marian.to(device).train()


def random_batch(vocab_size: int, batch: int, source_length: int, target_length: int, device: str, seed: int):
    """Random ids (no special tokens); source rows padded to lengths between half and the full length."""
    g = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab_size, (batch, source_length), generator=g)
    lengths = torch.randint(source_length // 2, source_length + 1, (batch,), generator=g)
    lengths[0] = source_length
    attention_mask = (torch.arange(source_length)[None, :] < lengths[:, None]).long()
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    labels = torch.randint(3, vocab_size, (batch, target_length), generator=g)
    return {k: v.to(device) for k, v in dict(input_ids=input_ids, attention_mask=attention_mask, labels=labels).items()}


def synchronize(device: str):
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def autocast(dtype: str, device: str):
    if dtype == "bf16":
        return torch.autocast(device_type=device.split(":")[0], dtype=torch.bfloat16)
    return contextlib.nullcontext()


# ----------------------------------------------------------------------------------------------------------------
# Measurements


def make_train_step(model, batch, dtype: str, device: str):
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)

    def step() -> float:
        with autocast(dtype, device):
            loss = model(**batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss.item()

    return step


def time_call(fn, calls: int, device: str) -> float:
    """Seconds per call, `calls` calls in a row."""
    synchronize(device)
    start = time.perf_counter()
    for _ in range(calls):
        fn()
    synchronize(device)
    return (time.perf_counter() - start) / calls


def alternate(fns: dict, repeats: int, calls: int, device: str) -> dict[str, list[float]]:
    """Seconds per call of each function, `repeats` times, in alternating order; one warm-up call each first."""
    for fn in fns.values():
        fn()
    times = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeats):
        for name in (names if r % 2 == 0 else names[::-1]):
            times[name].append(time_call(fns[name], calls, device))
    return times


def training_speed(size, dtype, args) -> dict:
    ours, marian = build_models(size, args.device)
    batch = random_batch(ours.config.vocab_size, args.batch_size, args.source_length, args.target_length,
                         args.device, seed=1)
    tokens = batch["input_ids"].numel() + batch["labels"].numel()
    steps = {"ours": make_train_step(ours, batch, dtype, args.device),
             "marian": make_train_step(marian, batch, dtype, args.device)}
    times = alternate(steps, args.repeats, args.train_calls, args.device)
    flops = {name: training_flops(model, batch, dtype, args.device)
             for name, model in (("ours", ours), ("marian", marian))}
    return {"tokens": tokens, "seconds": times, "flops": flops}


def training_flops(model, batch, dtype: str, device: str) -> int:
    """FLOPs of one forward and backward pass, as counted by torch (matmuls and attention)."""
    from torch.utils.flop_counter import FlopCounterMode

    counter = FlopCounterMode(display=False)
    with counter:
        with autocast(dtype, device):
            loss = model(**batch).loss
        loss.backward()
    model.zero_grad(set_to_none=True)
    return counter.get_total_flops()


def generation_speed(size, args, batch_size: int, num_beams: int) -> dict:
    ours, marian = build_models(size, args.device)
    ours.eval()
    marian.eval()
    batch = random_batch(ours.config.vocab_size, batch_size, args.source_length, 1, args.device, seed=2)
    batch.pop("labels")
    kwargs = dict(num_beams=num_beams, do_sample=False, length_penalty=0.6, early_stopping=True,
                  min_new_tokens=args.new_tokens, max_new_tokens=args.new_tokens, forced_eos_token_id=None,
                  bad_words_ids=None, num_return_sequences=1)
    outputs = {}

    def run(model, name):
        # every sentence decodes exactly --new-tokens tokens: our source-length bound off, as Marian has none
        own = {"max_length_a": None} if name == "ours" else {}

        def call():
            with torch.inference_mode():
                outputs[name] = model.generate(**batch, **kwargs, **own)
        return call

    times = alternate({"ours": run(ours, "ours"), "marian": run(marian, "marian")}, args.repeats, 1, args.device)
    same = torch.equal(outputs["ours"].cpu(), outputs["marian"].cpu())
    return {"tokens": batch_size * args.new_tokens, "seconds": times, "same_output": same}


MEMORY_CHILD = "--memory-child"


def memory_child(size: str, name: str, dtype: str, args) -> None:
    """In a fresh process: the peak memory one training step adds to what the model, optimizer and batch hold."""
    ours, marian = build_models(size, args.device)
    model = ours if name == "ours" else marian
    batch = random_batch(model.config.vocab_size, args.batch_size, args.source_length, args.target_length,
                         args.device, seed=1)
    step = make_train_step(model, batch, dtype, args.device)
    step()  # allocates Adam's state, which stays
    if args.device.startswith("cuda"):
        torch.cuda.synchronize()
        baseline = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        peak = torch.cuda.max_memory_allocated() - baseline
    else:
        import ctypes
        import gc

        gc.collect()
        ctypes.CDLL("libc.so.6").malloc_trim(0)
        baseline = rss_kib("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak resident set size (VmHWM)
        step()
        peak = (rss_kib("VmHWM") - baseline) * 1024
    print(json.dumps({"peak_bytes": peak}))


def saved_activation_bytes(model, batch) -> int:
    """Bytes of the tensors autograd saves for the backward pass of one training step (each storage once, weights
    not counted): the deterministic part of a training step's memory, where the resident-set peak is noisy."""
    storages = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = model(**batch).loss
    loss.backward()
    model.zero_grad(set_to_none=True)
    weights = {p.untyped_storage().data_ptr() for p in model.parameters()}
    return sum(size for pointer, size in storages.items() if pointer not in weights)


def rss_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def training_memory(size, dtype, args) -> dict:
    if not args.device.startswith("cuda") and not Path("/proc/self/clear_refs").exists():
        return {}
    peaks = {"ours": [], "marian": []}
    for r in range(args.memory_repeats):
        for name in (("ours", "marian") if r % 2 == 0 else ("marian", "ours")):
            command = [sys.executable, __file__, MEMORY_CHILD, size, name, dtype, "--device", args.device,
                       "--batch-size", str(args.batch_size), "--source-length", str(args.source_length),
                       "--target-length", str(args.target_length)]
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            peaks[name].append(json.loads(out.strip().splitlines()[-1])["peak_bytes"])
    return peaks


def matmul_peak(dtype: str, device: str, n: int = 1024, repeats: int = 3, seconds: float = 0.5) -> float:
    """The best GFLOP/s of an n x n x n matrix product in `dtype` on this machine (each repeat runs for about
    `seconds`: a CPU without bf16 instructions multiplies bf16 matrices orders of magnitude slower than fp32, in a
    scalar kernel: benchmarks/NOTES.md)."""
    torch_dtype = torch.bfloat16 if dtype == "bf16" else torch.float32
    a = torch.randn(n, n, device=device).to(torch_dtype)
    b = torch.randn(n, n, device=device).to(torch_dtype)
    once = time_call(lambda: torch.mm(a, b), 1, device)  # also the warm-up
    calls = max(1, int(seconds / once))
    best = min(time_call(lambda: torch.mm(a, b), calls, device) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


# ----------------------------------------------------------------------------------------------------------------
# Report


def median_ratio(seconds: dict[str, list[float]]) -> tuple[float, float, float]:
    """(ours median, Marian median, Marian / ours): > 1 when ours takes less time."""
    ours, marian = statistics.median(seconds["ours"]), statistics.median(seconds["marian"])
    return ours, marian, marian / ours


def run(args) -> str:
    lines = [f"{SECTION}", "",
             f"Measured {date.today().isoformat()} on {machine_description()}; {software_versions()}, "
             "`attn_implementation=\"sdpa\"` for both.",
             "Command: `python benchmarks/speed.py " + " ".join(sys.argv[1:]) + "`", "",
             f"Training batch {args.batch_size} x ({args.source_length} source + {args.target_length} target) tokens, "
             f"Adam, dropout 0.1; generation of exactly {args.new_tokens} new tokens per sentence from "
             f"{args.source_length}-token sources (padded rows included). Medians of {args.repeats} alternating "
             "repeats; ratio = ours / Marian in speed (Marian's time / ours), so > 1 means ours is faster.", ""]
    peaks = {dtype: matmul_peak(dtype, args.device) for dtype in ("fp32", "bf16")}
    lines.append("Matmul peak of this machine (1024^3 products, best of 3): "
                 + ", ".join(f"{d} {p:,.1f} GFLOP/s" for d, p in peaks.items()) + ".")
    dtypes = list(args.dtypes)
    if "bf16" in dtypes and peaks["bf16"] < peaks["fp32"] and not args.force_bf16:
        dtypes.remove("bf16")
        lines.append("bf16 training is not measured: this machine multiplies bf16 matrices "
                     f"{peaks['fp32'] / peaks['bf16']:,.0f}x "
                     "slower than fp32 (no bf16 matrix instructions, so torch falls back to a scalar kernel); "
                     "`--force-bf16` measures it anyway.")
    lines.append("")
    lines.append("| size | measurement | ours | Marian | ratio |")
    lines.append("| --- | --- | ---: | ---: | ---: |")
    fp32_marian_tokens = {}
    summary = {}
    for size in args.sizes:
        for dtype in dtypes:
            result = training_speed(size, dtype, args)
            ours_s, marian_s, ratio = median_ratio(result["seconds"])
            tokens = result["tokens"]
            if dtype == "fp32":
                fp32_marian_tokens[size] = tokens / marian_s
            lines.append(f"| {size} | training tok/s, {dtype} | {tokens / ours_s:,.0f} | {tokens / marian_s:,.0f} "
                         f"| {ratio:.2f}x |")
            gflops = {n: result["flops"][n] / s / 1e9 for n, s in (("ours", ours_s), ("marian", marian_s))}
            lines.append(f"| {size} | training GFLOP/s, {dtype} (share of the {dtype} matmul peak) "
                         f"| {gflops['ours']:.0f} ({gflops['ours'] / peaks[dtype]:.0%}) "
                         f"| {gflops['marian']:.0f} ({gflops['marian'] / peaks[dtype]:.0%}) | |")
            summary[f"{size} train {dtype}"] = ratio
            if dtype == "bf16" and size in fp32_marian_tokens:
                vs = (tokens / ours_s) / fp32_marian_tokens[size]
                lines.append(f"| {size} | training tok/s, ours bf16 vs Marian fp32 | {tokens / ours_s:,.0f} "
                             f"| {fp32_marian_tokens[size]:,.0f} | {vs:.2f}x |")
                summary[f"{size} train ours-bf16 vs marian-fp32"] = vs
            print(lines[-1], flush=True)
        if not args.skip_memory:
            ours, marian = build_models(size, args.device)
            batch = random_batch(ours.config.vocab_size, args.batch_size, args.source_length, args.target_length,
                                 args.device, seed=1)
            saved = {name: saved_activation_bytes(model, batch) for name, model in (("ours", ours), ("marian", marian))}
            lines.append(f"| {size} | activations saved for backward, fp32 (MiB) | {saved['ours'] / 2**20:,.1f} "
                         f"| {saved['marian'] / 2**20:,.1f} | {saved['marian'] / saved['ours']:.2f}x |")
            summary[f"{size} saved activations"] = saved["marian"] / saved["ours"]
            print(lines[-1], flush=True)
            del ours, marian
            peaks_mem = training_memory(size, "fp32", args)
            if peaks_mem:
                ours_m, marian_m = statistics.median(peaks_mem["ours"]), statistics.median(peaks_mem["marian"])
                lines.append(f"| {size} | peak training-step memory, fp32 (MiB) | {ours_m / 2**20:,.0f} "
                             f"| {marian_m / 2**20:,.0f} | {marian_m / ours_m:.2f}x |")
                summary[f"{size} memory"] = marian_m / ours_m
                print(lines[-1], flush=True)
        for num_beams in (1, 4):
            for batch_size in (8, 1):
                result = generation_speed(size, args, batch_size, num_beams)
                ours_s, marian_s, ratio = median_ratio(result["seconds"])
                kind = "greedy" if num_beams == 1 else f"beam {num_beams}"
                note = "" if result["same_output"] else " (outputs differ!)"
                lines.append(f"| {size} | {kind}, batch {batch_size}, new tok/s{note} | "
                             f"{result['tokens'] / ours_s:,.0f} | {result['tokens'] / marian_s:,.0f} | {ratio:.2f}x |")
                summary[f"{size} {kind} b{batch_size}"] = ratio
                print(lines[-1], flush=True)
    lines.append("")
    print(json.dumps(summary, indent=1))
    return "\n".join(lines) + "\n"


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", nargs="+", choices=sorted(SIZES), default=["small", "base"])
    parser.add_argument("--dtypes", nargs="+", choices=["fp32", "bf16"], default=["fp32", "bf16"])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--repeats", type=int, default=7, help="alternating repeats per measurement")
    parser.add_argument("--train-calls", type=int, default=1, help="training steps per timed repeat")
    parser.add_argument("--memory-repeats", type=int, default=3)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--force-bf16", action="store_true", help="measure bf16 even where it is slower than fp32")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--source-length", type=int, default=24)
    parser.add_argument("--target-length", type=int, default=24)
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--no-write", action="store_true", help="print the table, do not update RESULTS.md")
    return parser.parse_args(argv)


def main():
    if len(sys.argv) > 1 and sys.argv[1] == MEMORY_CHILD:
        size, name, dtype = sys.argv[2:5]
        memory_child(size, name, dtype, parse_args(sys.argv[5:]))
        return
    args = parse_args()
    text = run(args)
    print(text)
    if not args.no_write:
        write_section(SECTION, text)
        print(f"Wrote {RESULTS.relative_to(ROOT)}")


if __name__ == "__main__":
    main()
