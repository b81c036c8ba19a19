"""Running the model once on one text, with every attention weight: the run that the explorer's data and the
pictures of `plots.py` read.

`run_with_attentions` translates the text (or continues it, for a decoder-only model), then reads the attention
weights from one teacher-forced forward pass with `output_attentions=True`; with beam search it also keeps the
hypotheses the search extended at each step.
"""

from dataclasses import dataclass, field

import torch
from transformers import LogitsProcessorList

from vanilla_transformer.translate import max_input_tokens

CONFIGURATIONS = ("encoder-decoder", "decoder-only", "encoder-only")


def configuration_of(model) -> str:
    """"encoder-decoder" (translation), "decoder-only" (a causal language model) or "encoder-only" (classifier or
    masked language model)."""
    if model.config.is_encoder_decoder:
        return "encoder-decoder"
    return "decoder-only" if model.can_generate() else "encoder-only"


@dataclass
class AttentionRun:
    """One teacher-forced forward pass with `output_attentions=True`, and the token ids it read.

    encoder-decoder: `source_ids` are the encoder's input, `target_ids` the target (y_1 .. </s>, the model's own
    translation unless one was given) and `decoder_input_ids` = <start> y_1 .. y_{n-1}. decoder-only: `source_ids` is
    the prompt, `target_ids` its continuation and `decoder_input_ids` both, which the model read as one sequence.
    encoder-only: `source_ids` is the text; the other two are empty. `beam_steps` (beam search only) holds, for each
    decoding step, the hypotheses the search extended at that step (token ids after the start token or the prompt)
    with their scores (sums of log-probabilities, as the search ranks them before the length penalty).
    """

    configuration: str
    source_ids: list[int]
    target_ids: list[int]
    decoder_input_ids: list[int]
    target: str
    target_generated: bool
    outputs: object  # the model's ModelOutput: *attentions and logits
    beam_steps: list[list[tuple[list[int], float]]] | None = None
    notes: list[str] = field(default_factory=list)


def input_limit(model, tokenizer) -> int:
    """The most tokens the model reads, as `translate` reads them (`translate.max_input_tokens`: its positions, or
    the tokenizer's `model_max_length` if smaller)."""
    return max_input_tokens(model, tokenizer)


def eos_ids(model) -> list[int]:
    """The ids that end a generated sequence (the generation config's, else the model config's)."""
    generation_config = getattr(model, "generation_config", None)  # encoder-only models have none
    eos = generation_config.eos_token_id if generation_config is not None else None
    if eos is None:
        eos = model.config.eos_token_id
    return [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]


class BeamRecorder:
    """A logits processor that changes nothing and keeps, at each step of beam search, the running hypotheses
    (`input_ids`) and their log-probabilities for the next token (beam search gives processors log-softmaxed scores)."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.calls.append((input_ids.detach().cpu(), scores.detach().float().cpu()))
        return scores

    def steps(self, prefix_length: int, eos: list[int]) -> list[list[tuple[list[int], float]]]:
        """Per step: the distinct hypotheses extended at that step (ids after the first `prefix_length`) with their
        cumulative log-probability, best first. A hypothesis that ended (in </s>) is not extended and is left out."""
        steps, previous = [], {}  # previous: sequence -> (row, cumulative score) at the step before
        for t, (input_ids, scores) in enumerate(self.calls):
            current, seen = {}, set()
            for row, sequence in enumerate(map(tuple, input_ids.tolist())):
                if sequence in seen or (t > 0 and sequence[-1] in eos):
                    continue
                seen.add(sequence)
                if t == 0:
                    total = 0.0
                else:
                    parent = previous.get(sequence[:-1])
                    if parent is None:
                        continue
                    parent_row, parent_total = parent
                    total = parent_total + float(self.calls[t - 1][1][parent_row, sequence[-1]])
                current[sequence] = (row, total)
            steps.append(sorted(([list(seq[prefix_length:]), score] for seq, (_, score) in current.items()),
                                key=lambda beam: -beam[1]))
            previous = current
        return [[(tokens, score) for tokens, score in step] for step in steps]


def generate_one(model, generate_kwargs: dict, **inputs) -> tuple[torch.Tensor, BeamRecorder | None]:
    """`model.generate` for one sequence; with beam search, also the recorder of the beams kept at each step."""
    num_beams = generate_kwargs.get("num_beams") or model.generation_config.num_beams or 1
    recorder = BeamRecorder() if num_beams > 1 else None
    extra = {"logits_processor": LogitsProcessorList([recorder])} if recorder is not None else {}
    generated = model.generate(**inputs, **generate_kwargs, **extra)[0]
    return generated, recorder


def cut_to_fit(source_ids: list[int], room: int, keep_last: bool, truncate: bool) -> tuple[list[int], list[str]]:
    """`source_ids` cut to `room` tokens (keeping the last one, </s>, when `keep_last`), with the note that says so;
    a ValueError instead when not `truncate`."""
    if len(source_ids) <= room:
        return source_ids, []
    if not truncate:
        raise ValueError(f"the text has {len(source_ids)} tokens, more than the {room} this model reads")
    note = (f"The text has {len(source_ids)} tokens; the model reads at most {room}, so it was cut to its first "
            f"{room} tokens.")
    return (source_ids[: room - 1] + source_ids[-1:] if keep_last else source_ids[:room]), [note]


def translate_and_read(model, tokenizer, input_ids: torch.Tensor, target: str | None, generate_kwargs: dict,
                       eos: list[int]):
    """encoder-decoder: the translation (generated unless `target` is given) read teacher-forced with every attention.
    Returns (outputs, target text, target ids, decoder input ids, beam recorder or None)."""
    recorder = None
    if target is None:
        generated, recorder = generate_one(model, generate_kwargs, input_ids=input_ids,
                                           attention_mask=torch.ones_like(input_ids))
        labels = generated[1:]  # (<start>, y_1, ..., </s>, pad...) without <start>
        ends = torch.isin(labels, torch.tensor(eos, device=labels.device)).nonzero()
        if len(ends):
            labels = labels[: int(ends[0]) + 1]
        target = tokenizer.decode(labels, skip_special_tokens=True)
        labels = labels[None]
    else:
        if not target.strip():
            raise ValueError("the target text is empty; leave it out to attend over the model's translation")
        labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"].to(input_ids.device)
    decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)  # <start> y_1 ... y_{n-1}
    outputs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_attentions=True, use_cache=False)
    return outputs, target, labels[0].tolist(), decoder_input_ids[0].tolist(), recorder


def continue_and_read(model, tokenizer, input_ids: torch.Tensor, target: str | None, generate_kwargs: dict):
    """decoder-only: the continuation (generated unless `target` is given) read with the prompt as one sequence.
    Returns (outputs, continuation text, continuation ids, the whole sequence's ids, beam recorder or None)."""
    recorder = None
    if target is None:
        generated, recorder = generate_one(model, generate_kwargs, input_ids=input_ids,
                                           attention_mask=torch.ones_like(input_ids))
        sequence = generated[None]
        target = tokenizer.decode(generated[input_ids.shape[1]:], skip_special_tokens=True)
    else:
        if not target.strip():
            raise ValueError("the target text is empty; leave it out to attend over the model's continuation")
        continuation = tokenizer(target, add_special_tokens=False, return_tensors="pt")["input_ids"]
        sequence = torch.cat([input_ids, continuation.to(input_ids.device)], dim=1)
    outputs = model(input_ids=sequence, output_attentions=True)
    decoder_ids = sequence[0].tolist()
    return outputs, target, decoder_ids[input_ids.shape[1]:], decoder_ids, recorder


def run_with_attentions(model, tokenizer, text: str, target: str | None = None, *,
                        generate_kwargs: dict | None = None, truncate: bool = True) -> AttentionRun:
    """Run `model` on `text` (translating it, or continuing it for a decoder-only model, unless `target` is given)
    and read every attention weight from one teacher-forced forward pass with `output_attentions=True`, which gives
    the same weights as step-by-step decoding with the cache. The model is in eval mode meanwhile (no dropout).

    A text longer than the model reads (`input_limit`) is cut to fit when `truncate` (with a note in `notes`).
    """
    if not isinstance(text, str) or not text.strip():
        raise ValueError("the source text is empty: there is nothing to attend to")
    configuration = configuration_of(model)
    generate_kwargs = dict(generate_kwargs or {})
    device = next(model.parameters()).device
    limit = input_limit(model, tokenizer)
    decoder_only = configuration == "decoder-only"
    # a prompt is tokenized as pipeline("text-generation") does: without special tokens (no end-of-text after it)
    source_ids = tokenizer(text, add_special_tokens=not decoder_only)["input_ids"]
    room = limit - 1 if decoder_only else limit  # a decoder-only model needs a position for what it writes
    keep_eos = not decoder_only and bool(source_ids) and source_ids[-1] == tokenizer.eos_token_id
    source_ids, notes = cut_to_fit(source_ids, room, keep_eos, truncate)
    if decoder_only and target is None:
        longest = limit if generate_kwargs.get("max_new_tokens") is None else len(source_ids) + generate_kwargs.pop(
            "max_new_tokens")
        generate_kwargs["max_length"] = min(generate_kwargs.get("max_length") or model.generation_config.max_length
                                            or limit, longest, limit)
    input_ids = torch.tensor([source_ids], device=device)
    eos = eos_ids(model)
    target_generated = target is None and configuration != "encoder-only"
    was_training = model.training
    model.eval()
    recorder = None
    try:
        with torch.no_grad():
            if configuration == "encoder-decoder":
                outputs, target, target_ids, decoder_ids, recorder = translate_and_read(
                    model, tokenizer, input_ids, target, generate_kwargs, eos)
            elif decoder_only:
                outputs, target, target_ids, decoder_ids, recorder = continue_and_read(
                    model, tokenizer, input_ids, target, generate_kwargs)
            else:
                if target is not None:
                    raise ValueError("an encoder-only model reads one text: give no target")
                outputs = model(input_ids=input_ids, output_attentions=True)
                target, target_ids, decoder_ids = "", [], []
    finally:
        model.train(was_training)
    prefix = 1 if configuration == "encoder-decoder" else len(source_ids)
    return AttentionRun(
        configuration=configuration,
        source_ids=source_ids,
        target_ids=target_ids,
        decoder_input_ids=decoder_ids,
        target=target,
        target_generated=target_generated,
        outputs=outputs,
        beam_steps=recorder.steps(prefix, eos) if recorder is not None else None,
        notes=notes,
    )


def stacked_attentions(run: AttentionRun) -> dict[str, list[torch.Tensor]]:
    """The run's attention weights by kind ("encoder", "decoder", "cross"), one (H, Q, K) tensor per layer."""
    out = run.outputs
    if run.configuration == "encoder-decoder":
        kinds = {"encoder": out.encoder_attentions, "decoder": out.decoder_attentions, "cross": out.cross_attentions}
    elif run.configuration == "decoder-only":
        kinds = {"decoder": out.attentions}
    else:
        kinds = {"encoder": out.attentions}
    return {kind: [layer[0].float().cpu() for layer in weights] for kind, weights in kinds.items()}


def positions_module(model):
    """The module that makes the model's positional encodings (the encoder's, or the single stack's)."""
    if model.config.is_encoder_decoder:
        return model.get_encoder().embed_positions
    return model.model.embed_positions
