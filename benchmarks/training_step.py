"""Our training step against the Trainer's defaults for the same recipe, on the same model and batches.

    python -m benchmarks.training_step [--preset multi30k] [--steps 40] [--write]

Two copies of one model (the preset's shape, same initial weights) train side by side in one process, alternating
which goes first at every step, on random token-budget batches of the preset's size (lengths as in Multi30k):

- "Trainer defaults": transformers' `LabelSmoother` (what `Seq2SeqTrainer` uses for `--label_smoothing_factor`) and
  `torch.optim.AdamW` as `--optim adamw_torch` makes it (one parameter at a time on a CPU);
- "ours": `training.trainer.LabelSmoothedCrossEntropy` (torch's `cross_entropy(label_smoothing=)`) and the fused
  AdamW of the presets (`--optim adamw_torch_fused`).

Both compute the same loss and the same Adam update (tests/test_training.py); only the time differs. Reported:
the median seconds per step of each (the first 4 steps untimed), the ratio, the CPU and its flags. `--write`
replaces this benchmark's section of benchmarks/RESULTS.md.
"""

import argparse
import contextlib
import statistics
import time

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402

SECTION = "## Training step: our loss and optimiser vs the Trainer's defaults"
# (sentences, source length, target length) of 2,048-target-token batches as Multi30k's length buckets make them
BATCH_SHAPES = [(128, 15, 16), (170, 11, 12), (102, 19, 20), (51, 38, 40), (146, 13, 14), (85, 23, 24)]


def build(preset: str, variant: str, seed: int):
    import torch
    from transformers.trainer_pt_utils import LabelSmoother

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy

    recipe = PRESETS[preset]
    config = VanillaTransformerConfig(vocab_size=recipe.data["vocab_size"], **recipe.model)
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(config).train()
    fused = variant == "ours"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                  fused=fused or None)
    loss = (LabelSmoothedCrossEntropy if fused else LabelSmoother)(epsilon=0.1)
    return model, optimizer, loss


def random_batch(step: int, vocab_size: int, generator, scale: float = 1.0):
    """(source, decoder input, labels): random token ids shaped as BATCH_SHAPES[step], `scale` x its sentences."""
    import torch

    sentences, source_length, target_length = BATCH_SHAPES[step % len(BATCH_SHAPES)]
    sentences = max(1, round(sentences * scale))
    source = torch.randint(4, vocab_size, (sentences, source_length), generator=generator)
    decoder_input = torch.randint(4, vocab_size, (sentences, target_length), generator=generator)
    labels = torch.randint(4, vocab_size, (sentences, target_length), generator=generator)
    return source, decoder_input, labels


def timed_step(model, optimizer, loss_function, batch, context=contextlib.nullcontext) -> float:
    """Seconds of one training step on `batch`: forward, loss and backward inside `context()`, then the optimiser."""
    import torch

    source, decoder_input, labels = batch
    start = time.perf_counter()
    with context():
        outputs = model(input_ids=source, attention_mask=torch.ones_like(source), decoder_input_ids=decoder_input)
        loss = loss_function(outputs, labels, num_items_in_batch=labels.numel())
        loss.backward()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return time.perf_counter() - start


def measure(preset: str = "multi30k", steps: int = 40, max_tokens: int | None = None, seed: int = 0) -> dict:
    import torch

    from vanilla_transformer.training.presets import PRESETS

    recipe = PRESETS[preset]
    vocab_size = recipe.data["vocab_size"]
    scale = (max_tokens or recipe.training["max_tokens"]) / 2048
    runs = {variant: build(preset, variant, seed) for variant in ("Trainer defaults", "ours")}
    times = {variant: [] for variant in runs}
    generator = torch.Generator().manual_seed(seed)
    for step in range(steps + 4):
        source, decoder_input, labels = random_batch(step, vocab_size, generator, scale)
        order = list(runs) if step % 2 == 0 else list(reversed(runs))
        for variant in order:
            seconds = timed_step(*runs[variant], (source, decoder_input, labels))
            if step >= 4:
                times[variant].append(seconds)
    medians = {variant: statistics.median(values) for variant, values in times.items()}
    return {"preset": preset, "steps": steps, "medians": medians,
            "ratio": medians["Trainer defaults"] / medians["ours"]}


def render(result: dict, command: str) -> str:
    defaults, ours = result["medians"]["Trainer defaults"], result["medians"]["ours"]
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The `{result["preset"]}` preset's model, random 2,048-target-token batches, the two variants alternating in one
process; median of {result["steps"]} steps each (forward, loss, backward, optimiser step). Both compute the same loss
and the same Adam update (tests/test_training.py).

| loss and optimiser | s/step | ratio |
| --- | ---: | ---: |
| Trainer defaults: `LabelSmoother`, AdamW one parameter at a time (`adamw_torch`) | {defaults:.4f} | 1.00x |
| ours: `cross_entropy(label_smoothing=)`, fused AdamW (`adamw_torch_fused`) | {ours:.4f} | {result["ratio"]:.2f}x |
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="multi30k", choices=sorted(PRESETS))
    parser.add_argument("--steps", type=int, default=40, help="timed steps per variant (after 4 untimed)")
    parser.add_argument("--max_tokens", type=int, default=None, help="target tokens per batch (default: the preset's)")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.steps < 1:
        parser.error(f"--steps must be at least 1, got {args.steps}")
    if args.max_tokens is not None and args.max_tokens < 1:
        parser.error(f"--max_tokens must be at least 1, got {args.max_tokens}")
    result = measure(args.preset, args.steps, args.max_tokens)
    publish(SECTION, render, result, "benchmarks.training_step", argv, args.write, args.results)


if __name__ == "__main__":
    main()
