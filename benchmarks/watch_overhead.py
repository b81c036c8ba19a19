"""What recording a run for the training view costs (training/watch.py), at the default interval.

    python -m benchmarks.watch_overhead [--preset demo] [--rounds 7] [--steps-per-round 10] [--write]

The preset's model (random weights) trains on random token-budget batches (training_step's), and in each round
`--steps-per-round` timed training steps (forward, label-smoothed loss, backward, fused AdamW) alternate with one
timed recording as `TrainingWatch` makes it: the gradient norm of each layer (read after the backward, before the
optimizer step) and, for 3 number-word sentences, the cross-attention over the reference and the greedy translation
(`watch.record_step`). A model with random weights does not stop its greedy translation early, so each translation
runs to its limit (`watch.translation_limit`): the recording's worst case, that of the first steps of a run.

Reported: the median seconds of a step and of a recording, and the recording's cost as a share of the training time
between two recordings at the default interval (the demo preset's --watch_steps, a fraction of --max_steps, applied
to this preset's --max_steps), the goal being under 2 %. `--write` replaces this benchmark's section of
benchmarks/RESULTS.md.
"""

import argparse
import math
import statistics
import time

if not __package__:  # run as `python benchmarks/NAME.py`: put the checkout on sys.path
    import checkout  # noqa: F401

from benchmarks.report import machine_description, publish, software_versions  # noqa: E402
from benchmarks.training_step import random_batch  # noqa: E402

SECTION = "## Training, watched: what recording costs a run"
SENTENCES = 3


def default_interval(preset_name: str) -> int:
    """The steps between two recordings: --watch_steps of the demo preset (a fraction of --max_steps, or steps)
    applied to this preset's --max_steps."""
    from vanilla_transformer.training.presets import PRESETS

    every = PRESETS["demo"].data["watch_steps"]
    max_steps = PRESETS[preset_name].training["max_steps"]
    return int(every) if every >= 1 else max(1, math.ceil(every * max_steps))


def measure(preset: str = "demo", rounds: int = 7, steps_per_round: int = 10, seed: int = 0) -> dict:
    import torch

    from vanilla_transformer import VanillaTransformerConfig, VanillaTransformerForConditionalGeneration
    from vanilla_transformer.training.numbers import number_translation_splits
    from vanilla_transformer.training.presets import PRESETS
    from vanilla_transformer.training.tokenizer import train_tokenizer
    from vanilla_transformer.training.trainer import LabelSmoothedCrossEntropy
    from vanilla_transformer.training.watch import gradient_norms, record_step, translation_limit

    recipe = PRESETS[preset]
    splits = number_translation_splits(train_size=2000, validation_size=SENTENCES, test_size=1, seed=seed)
    tokenizer = train_tokenizer(splits["train"]["source"] + splits["train"]["target"],
                                vocab_size=recipe.data["vocab_size"], model_max_length=recipe.data["max_source_length"])
    config = VanillaTransformerConfig(vocab_size=recipe.data["vocab_size"], pad_token_id=tokenizer.pad_token_id,
                                      bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                                      decoder_start_token_id=tokenizer.bos_token_id, **recipe.model)
    torch.manual_seed(seed)
    model = VanillaTransformerForConditionalGeneration(config).train()
    limit = recipe.data["max_target_length"] + 1  # the trained model's generation limit (training.build)
    model.generation_config.max_length = limit
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9, weight_decay=0.0,
                                  fused=True)
    loss_function = LabelSmoothedCrossEntropy(epsilon=0.1)
    sources, references = splits["validation"]["source"], splits["validation"]["target"]
    generator = torch.Generator().manual_seed(seed)
    scale = recipe.training["max_tokens"] / 2048
    steps, recordings = [], []
    for round_ in range(rounds + 1):  # round 0 warms up, untimed
        for step in range(steps_per_round):
            source, decoder_input, labels = random_batch(round_ * steps_per_round + step, config.vocab_size,
                                                         generator, scale)
            started = time.perf_counter()
            outputs = model(input_ids=source, attention_mask=torch.ones_like(source), decoder_input_ids=decoder_input)
            loss_function(outputs, labels, num_items_in_batch=labels.numel()).backward()
            stepped = time.perf_counter()
            if step == steps_per_round - 1:  # the recording's gradient norms: before the optimizer step
                gradient_norms(model)
            norms = time.perf_counter() - stepped
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            if round_:
                steps.append(time.perf_counter() - started - norms)
        started = time.perf_counter()
        record_step(model, tokenizer, sources, references, translation_limit(model, tokenizer, references))
        if round_:
            recordings.append(time.perf_counter() - started + norms)
    step_s, record_s = statistics.median(steps), statistics.median(recordings)
    interval = default_interval(preset)
    return {"preset": preset, "rounds": rounds, "steps_per_round": steps_per_round, "step_s": step_s,
            "record_s": record_s, "interval": interval, "overhead": record_s / (interval * step_s)}


def render(result: dict, command: str) -> str:
    return f"""{SECTION}

Measured {time.strftime("%Y-%m-%d")} on {machine_description()}; {software_versions()}.
Command: `{command}`

The `{result["preset"]}` preset's model (random weights) on random token-budget batches: {result["rounds"]} rounds of
{result["steps_per_round"]} timed training steps then one timed recording ({SENTENCES} sentences: cross-attention
over the reference, greedy translation to its limit, the layers' gradient norms), medians.

| | seconds |
| --- | ---: |
| training step | {result["step_s"]:.4f} |
| recording | {result["record_s"]:.4f} |

At the default interval ({result["interval"]} steps for this preset's --max_steps) recording adds
{100 * result["overhead"]:.2f} % to the training time (goal: under 2 %).
"""


def main(argv: list[str] | None = None) -> None:
    from vanilla_transformer.training.presets import PRESETS

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="demo", choices=sorted(PRESETS))
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (after one untimed)")
    parser.add_argument("--steps-per-round", type=int, default=10, help="timed training steps per round")
    parser.add_argument("--write", action="store_true", help="replace this section of benchmarks/RESULTS.md")
    parser.add_argument("--results", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("rounds", "steps_per_round"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be at least 1, got {getattr(args, name)}")
    result = measure(args.preset, args.rounds, args.steps_per_round)
    publish(SECTION, render, result, "benchmarks.watch_overhead", argv, args.write, args.results)


if __name__ == "__main__":
    main()
