"""Training, watched: a callback that records, every N steps, what the model makes of a few fixed validation
sentences, so that the explorer can replay the run (`vanilla-transformer explore RUN_DIR --training`).

At each recorded step k (the weights after k optimizer steps, the same weights checkpoint-k holds) and for each
sentence:

- the encoder-decoder (cross) attention of every layer and head, from one teacher-forced forward pass over the
  *reference* translation with `output_attentions=True`, as the explorer reads it (`inspect.attention_run`): the rows
  are the same target tokens at every step, so the picture shows the same grid going from uniform to aligned;
- the model's own greedy translation at that step (`translation_limit` tokens at most).

The sentences go through the model together, as one padded batch: one forward pass and one `generate` per recording,
so that recording costs a run little (benchmarks/watch_overhead.py).

And per recorded step, the gradient norm of each layer (the L2 norm over its parameters' gradients, read before the
optimizer step that produced the recorded weights; none for step 0). The loss curve is the Trainer's log history.

The files, in `RUN_DIR/watch/` (written by the main process of a distributed run only):

- `watch.json`: `{"format", "sentences": [{"source", "reference", "source_tokens", "target_tokens"}], "layers",
  "heads", "steps": [k, ...], "max_steps", "loss": [[step, loss], ...]}`, rewritten at each recording and log;
- `step-0000000k.json`: `{"step", "translations": [...], "grad_norms": {"encoder layer 0": ..., ...},
  "cross": [{"shape": [layers, heads, targets, sources], "uint16": base64}, ...]}` per sentence: each weight w as
  round(w * 65535), little-endian (within 1/131070 of the model's number, two bytes a weight).

Each file is written whole (a temporary file renamed), and listed in the folder's own manifest, so the run folder's
checks (files.manifest) count the folder as this project's whether the run is new or resumed.
"""

import base64
import json
import math
import os
import re

import numpy as np
import torch
from transformers import TrainerCallback

from vanilla_transformer.files import record_entries
from vanilla_transformer.inspect.attention_run import input_limit

FOLDER = "watch"
INDEX = "watch.json"
FORMAT = "vanilla-transformer training watch 1"
STEP_FILE = re.compile(r"^step-(\d+)\.json$")
QUANTUM = 65535  # a weight in [0, 1] is kept as round(w * QUANTUM) in an unsigned 16-bit integer


def step_file(step: int) -> str:
    return f"step-{step:08d}.json"


def pack_weights(weights: np.ndarray) -> dict:
    """Attention weights (each in [0, 1]) as `{"shape", "uint16"}`: round(w * 65535), little-endian, base64."""
    integers = np.clip(np.rint(np.asarray(weights, dtype=np.float64) * QUANTUM), 0, QUANTUM).astype("<u2")
    return {"shape": list(integers.shape), "uint16": base64.b64encode(integers.tobytes()).decode("ascii")}


def unpack_weights(packed: dict) -> np.ndarray:
    """The float32 weights of `pack_weights`' output."""
    integers = np.frombuffer(base64.b64decode(packed["uint16"]), dtype="<u2")
    return (integers.astype(np.float32) / QUANTUM).reshape(packed["shape"])


def layer_of(name: str) -> str:
    """The group a parameter's gradient norm is reported in: "encoder layer 0", ..., "embeddings", "other"."""
    match = re.search(r"(encoder|decoder)\.layers\.(\d+)\.", name)
    if match:
        return f"{match.group(1)} layer {match.group(2)}"
    return "embeddings" if "embed" in name or name.endswith("shared.weight") else "other"


def gradient_norms(model, scale: float = 1.0) -> dict[str, float]:
    """The L2 norm of the gradients of each layer's parameters (`layer_of`), divided by `scale` (a loss scale)."""
    squares: dict[str, torch.Tensor] = {}
    for name, parameter in model.named_parameters():
        if parameter.grad is None:
            continue
        group = layer_of(name)
        square = parameter.grad.detach().float().pow(2).sum()
        squares[group] = squares[group] + square if group in squares else square
    order = sorted(squares, key=lambda g: (g != "embeddings", g.split()[0] != "encoder", g == "other",
                                           int(g.split()[-1]) if g[-1].isdigit() else 0))
    return {group: math.sqrt(float(squares[group])) / scale for group in order}


def pick_sentences(splits: dict, count: int) -> tuple[list[str], list[str]]:
    """The first `count` pairs with both sides non-empty of the validation split (else test, else train), in file
    order: (sources, references)."""
    for split in ("validation", "test", "train"):
        dataset = splits.get(split)
        if dataset is None or "source" not in getattr(dataset, "column_names", ()):
            continue
        first = dataset.select(range(min(len(dataset), 10 * count)))
        sources, references = [], []
        for source, reference in zip(list(first["source"]), list(first["target"])):
            if source.strip() and reference.strip():
                sources.append(source)
                references.append(reference)
            if len(sources) == count:
                break
        if sources:
            return sources, references
    return [], []


def write_json(path: str, value) -> None:
    """`value` as JSON in `path`, whole or not at all (a hidden file beside it, then a rename)."""
    staging = os.path.join(os.path.dirname(path), f".watch-{os.getpid()}-{os.path.basename(path)}")
    try:
        with open(staging, "w", encoding="utf-8") as f:
            json.dump(value, f, separators=(",", ":"), ensure_ascii=False)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.remove(staging)
        raise


def record_step(model, tokenizer, sources: list[str], references: list[str], max_new_tokens: int) -> dict:
    """One recording of all the sentences in one batch: per sentence the cross-attention over its reference
    (`[layer][head][target][source]`, packed) from one teacher-forced forward pass with `output_attentions=True`, the
    greedy translation (at most `max_new_tokens` tokens), and the tokens. Padding changes neither: padded keys get
    no weight and padded rows are cut off. The model is in eval mode meanwhile (no dropout)."""
    limit = input_limit(model, tokenizer)
    source_ids = [tokenizer(text, truncation=True, max_length=limit)["input_ids"] for text in sources]
    target_ids = [tokenizer(text_target=text, truncation=True, max_length=limit)["input_ids"] for text in references]
    device = next(model.parameters()).device
    pad, start = model.config.pad_token_id, model.config.decoder_start_token_id

    def padded(rows):
        width = max(map(len, rows))
        return torch.tensor([row + [pad] * (width - len(row)) for row in rows], device=device)

    input_ids = padded(source_ids)
    attention_mask = torch.tensor([[1] * len(row) + [0] * (input_ids.shape[1] - len(row)) for row in source_ids],
                                  device=device)
    decoder_input_ids = padded([[start] + row[:-1] for row in target_ids])  # <start> y_1 .. y_{n-1}
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            outputs = model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids,
                            output_attentions=True, use_cache=False)
            generated = model.generate(input_ids=input_ids, attention_mask=attention_mask, num_beams=1,
                                       do_sample=False, max_new_tokens=max_new_tokens)
    finally:
        model.train(was_training)
    cross = torch.stack(outputs.cross_attentions).float().cpu()  # (layers, batch, heads, targets, sources)
    return {
        "cross": [pack_weights(cross[:, i, :, : len(target), : len(source)].numpy())
                  for i, (source, target) in enumerate(zip(source_ids, target_ids))],
        "translations": tokenizer.batch_decode(generated, skip_special_tokens=True),
        "tokens": [{"source_tokens": tokenizer.convert_ids_to_tokens(source),
                    "target_tokens": tokenizer.convert_ids_to_tokens(target)}
                   for source, target in zip(source_ids, target_ids)],
    }


def translation_limit(model, tokenizer, references: list[str]) -> int:
    """The most tokens a recorded translation may have: twice the longest reference's plus 10 (a half-trained model
    may repeat itself to the end), at most the model's generation limit."""
    longest = max(len(tokenizer(text_target=text)["input_ids"]) for text in references)
    ceiling = getattr(model.generation_config, "max_length", None) or input_limit(model, tokenizer)
    return max(1, min(2 * longest + 10, ceiling))


class TrainingWatch(TrainerCallback):
    """Records the watch files (see the module's docstring) every `every` steps (a number below 1: that fraction
    of the run's max_steps), at step 0 and at the last step, into `output_dir/watch/`."""

    def __init__(self, output_dir: str, sources: list[str], references: list[str], every: float):
        if not sources or len(sources) != len(references):
            raise ValueError("the training watch needs sentences with their references")
        if not every > 0:
            raise ValueError(f"the training watch records every N steps: N must be positive, got {every}")
        self.folder = os.path.join(output_dir, FOLDER)
        self.sources, self.references = list(sources), list(references)
        self.every = every
        self.index = None  # watch.json, once the first recording made it
        self.norms = None  # the gradient norms read before the optimizer step that will be recorded

    def interval(self, state) -> int:
        if self.every >= 1:
            return int(self.every)
        return max(1, math.ceil(self.every * state.max_steps)) if state.max_steps and state.max_steps > 0 else 1

    def wanted(self, step: int, state) -> bool:
        return step % self.interval(state) == 0

    # the Trainer loads a resumed state after on_train_begin: the folder is prepared at the first step instead
    def on_step_begin(self, args, state, control, model=None, processing_class=None, **kwargs):
        if self.index is None and state.is_world_process_zero:
            self.start(state)
            if state.global_step == 0:
                self.record(model, processing_class, state)

    def on_pre_optimizer_step(self, args, state, control, model=None, optimizer=None, **kwargs):
        if state.is_world_process_zero and self.wanted(state.global_step + 1, state):
            scaler = getattr(optimizer, "scaler", None)
            scale = scaler.get_scale() if scaler is not None and scaler.is_enabled() and not args.max_grad_norm else 1
            self.norms = gradient_norms(model, scale)

    def on_step_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.is_world_process_zero and self.index is not None and self.wanted(state.global_step, state):
            self.record(model, processing_class, state)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if state.is_world_process_zero and self.index is not None and logs and "loss" in logs:
            self.write_index(state)

    def on_train_end(self, args, state, control, model=None, processing_class=None, **kwargs):
        if state.is_world_process_zero and self.index is not None:
            if state.global_step not in self.index["steps"]:
                self.record(model, processing_class, state)
            else:
                self.write_index(state)

    def start(self, state) -> None:
        """A new run starts an empty folder; a resumed one keeps the steps up to where it resumes."""
        os.makedirs(self.folder, exist_ok=True)
        resumed = state.global_step > 0
        self.index = {"format": FORMAT, "sentences": [], "layers": 0, "heads": 0, "steps": []}
        if resumed:
            try:
                with open(os.path.join(self.folder, INDEX), encoding="utf-8") as f:
                    saved = json.load(f)
                if saved.get("format") == FORMAT:
                    self.index.update({key: saved[key] for key in ("sentences", "layers", "heads") if key in saved})
            except (OSError, ValueError):
                pass
        kept = []
        for name in os.listdir(self.folder):
            match = STEP_FILE.match(name)
            if (match and int(match.group(1)) > state.global_step) or name.startswith(".watch-") or (
                    name == INDEX and not resumed):
                os.remove(os.path.join(self.folder, name))
            elif match:
                kept.append(int(match.group(1)))
        self.index["steps"] = sorted(kept)

    def record(self, model, tokenizer, state) -> None:
        step = state.global_step
        recording = record_step(model, tokenizer, self.sources, self.references,
                                translation_limit(model, tokenizer, self.references))
        norms, self.norms = (self.norms if step > 0 else None), None
        write_json(os.path.join(self.folder, step_file(step)),
                   {"step": step, "translations": recording["translations"], "grad_norms": norms,
                    "cross": recording["cross"]})
        shape = recording["cross"][0]["shape"]
        self.index.update(layers=shape[0], heads=shape[1], sentences=[
            {"source": source, "reference": reference, **tokens}
            for source, reference, tokens in zip(self.sources, self.references, recording["tokens"])])
        self.index["steps"] = sorted({*self.index["steps"], step})
        self.write_index(state, [step_file(step)])

    def write_index(self, state, written=()) -> None:
        self.index["max_steps"] = state.max_steps
        self.index["loss"] = [[entry["step"], entry["loss"]] for entry in state.log_history
                              if "loss" in entry and "step" in entry]
        write_json(os.path.join(self.folder, INDEX), self.index)
        record_entries(self.folder, [INDEX, *written])


def watch_callbacks(data_args, training_args, splits) -> list:
    """The run's `TrainingWatch` when --watch_steps asks for one (an empty list otherwise)."""
    if not data_args.watch_steps:
        return []
    sources, references = pick_sentences(splits, data_args.watch_sentences)
    if not sources:
        return []
    return [TrainingWatch(training_args.output_dir, sources, references, data_args.watch_steps)]


def read_watch(run_dir: str) -> dict:
    """The recordings of a run: watch.json with each step's file as `"recordings"` (in step order). A ValueError
    (one line) when `run_dir` has none."""
    folder = os.path.join(os.fspath(run_dir), FOLDER)
    path = os.path.join(folder, INDEX)
    if not os.path.isfile(path):
        raise ValueError(f"{run_dir} has no training recordings ({FOLDER}/{INDEX}): train with --watch_steps N "
                         "(the demo preset records by default)")
    try:
        with open(path, encoding="utf-8") as f:
            index = json.load(f)
        if index.get("format") != FORMAT:
            raise ValueError(f"{path} is not a training watch file of this version")
        recordings = []
        for step in index["steps"]:
            with open(os.path.join(folder, step_file(step)), encoding="utf-8") as f:
                recordings.append(json.load(f))
    except (OSError, json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"cannot read the training recordings in {folder}: {error}") from None
    return {**index, "recordings": recordings}
