"""On a CPU, N data-parallel processes of one thread each against one process with N threads, same batch per step.

    python -m benchmarks.cpu_processes [--preset multi30k-pre-ln] [--processes 2] [--steps 20] [--rounds 3] [--write]

One training step of the preset's model (forward, label-smoothed loss, backward, fused AdamW) on random batches of
Multi30k's shapes, `max_tokens` target tokens per step:

- "one process": torch's intra-op threads (`torch.set_num_threads(N)`), the whole batch;
- "N processes": `torch.distributed` (gloo) with `DistributedDataParallel` (what torchrun / accelerate launch give the
  Trainer), one thread each, every process a different batch of `max_tokens / N` tokens, so a step waits for the
  slowest process and for the gradient all-reduce, as in training.

The two alternate in rounds (a round of each, `--rounds` times) so that a machine whose speed drifts affects both
alike. Reported: the median seconds per step of each over all rounds (the first 3 steps of a round untimed), the
ratio, the CPU and its flags. `--write` replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import socket
import statistics
import time

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402
from benchmarks.training_step import BATCH_SHAPES  # noqa: E402

SECTION = "## Training on a CPU: processes against threads"
UNTIMED = 3


def build(preset: str, seed: int = 0):
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy

    recipe = PRESETS[preset]
    config = VanillaTransformerConfig(vocab_size=recipe.data["vocab_size"], **recipe.model)
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(config).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                  fused=True)
    return model, optimizer, LabelSmoothedCrossEntropy(epsilon=0.1), config.vocab_size


def batch(step: int, share: int, parts: int, max_tokens: int, vocab_size: int, seed: int):
    """Batch `share` of `parts` at `step`: a Multi30k shape, max_tokens / parts target tokens."""
    import torch

    sentences, source_length, target_length = BATCH_SHAPES[(step * parts + share) % len(BATCH_SHAPES)]
    sentences = max(1, round(sentences * max_tokens / 2048 / parts))
    generator = torch.Generator().manual_seed(seed * 1_000_003 + step * 101 + share)
    return (torch.randint(4, vocab_size, (sentences, source_length), generator=generator),
            torch.randint(4, vocab_size, (sentences, target_length), generator=generator),
            torch.randint(4, vocab_size, (sentences, target_length), generator=generator))


def train_steps(model, optimizer, loss_function, vocab_size, steps, share, parts, max_tokens, seed) -> list[float]:
    times = []
    for step in range(steps + UNTIMED):
        source, decoder_input, labels = batch(step, share, parts, max_tokens, vocab_size, seed)
        start = time.perf_counter()
        outputs = model(input_ids=source, attention_mask=source.new_ones(source.shape), decoder_input_ids=decoder_input)
        loss = loss_function(outputs, labels, num_items_in_batch=labels.numel())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step >= UNTIMED:
            times.append(time.perf_counter() - start)
    return times


def process_worker(rank: int, world_size: int, port: int, preset: str, steps: int, max_tokens: int, seed: int,
                   results) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        model, optimizer, loss_function, vocab_size = build(preset)
        parallel = DistributedDataParallel(model)
        dist.barrier()
        times = train_steps(parallel, optimizer, loss_function, vocab_size, steps, rank, world_size, max_tokens, seed)
        if rank == 0:
            results.put(times)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def measure(preset: str = "multi30k-pre-ln", processes: int = 2, steps: int = 20, rounds: int = 3,
            max_tokens: int | None = None) -> dict:
    import torch
    import torch.multiprocessing as mp

    from vanilla_transformer.training.presets import PRESETS

    max_tokens = max_tokens or PRESETS[preset].training["max_tokens"]
    threads_before = torch.get_num_threads()
    times = {"one process": [], "processes": []}
    context = mp.get_context("spawn")
    try:
        for round_ in range(rounds):
            torch.set_num_threads(processes)
            model, optimizer, loss_function, vocab_size = build(preset)
            times["one process"] += train_steps(model, optimizer, loss_function, vocab_size, steps, 0, 1, max_tokens,
                                                seed=round_)
            del model, optimizer
            results = context.SimpleQueue()
            mp.start_processes(process_worker, args=(processes, free_port(), preset, steps, max_tokens, round_,
                                                     results), nprocs=processes, join=True, start_method="spawn")
            times["processes"] += results.get()
    finally:
        torch.set_num_threads(threads_before)
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    return {"preset": preset, "processes": processes, "steps": steps, "rounds": rounds, "max_tokens": max_tokens,
            "medians": medians, "ratio": medians["one process"] / medians["processes"]}


def render(result: dict, command: str) -> str:
    n, one, many = result["processes"], result["medians"]["one process"], result["medians"]["processes"]
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The `{result["preset"]}` preset's model, one training step (forward, label-smoothed loss, backward, fused AdamW) of
{result["max_tokens"]:,} target tokens in random batches of Multi30k's shapes; {result["rounds"]} rounds of each
variant in turn, median of {result["steps"]} steps a round. With {n} processes each takes a different batch of
1/{n} of the tokens and the step ends with DistributedDataParallel's gradient all-reduce (gloo), as under
`torchrun --nproc_per_node {n}` (docs/train.md "Processes or threads on a CPU").

| {result["max_tokens"]:,} tokens per step | s/step | ratio |
| --- | ---: | ---: |
| one process, {n} threads | {one:.4f} | 1.00x |
| {n} processes (DistributedDataParallel, gloo), one thread each | {many:.4f} | {result["ratio"]:.2f}x |
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="multi30k-pre-ln", choices=sorted(PRESETS))
    parser.add_argument("--processes", type=int, default=2, help="processes, and threads of the one process")
    parser.add_argument("--steps", type=int, default=20, help="timed steps per round and variant")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of each variant, in turn")
    parser.add_argument("--max_tokens", type=int, default=None, help="target tokens per step (default: the preset's)")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("processes", "steps", "rounds", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1, got {value}")
    if args.processes < 2:
        parser.error(f"--processes must be at least 2, got {args.processes} (the comparison is with one process)")
    result = measure(args.preset, args.processes, args.steps, args.rounds, args.max_tokens)
    publish(SECTION, render, result, "benchmarks.cpu_processes", argv, args.write, args.results)


if __name__ == "__main__":
    main()
