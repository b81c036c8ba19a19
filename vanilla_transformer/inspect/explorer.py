"""See the model think: an interactive attention explorer, as a live app, a self-contained page and a Hub Space.

    vanilla-transformer explore MODEL                                   # a live local app (Gradio) on 127.0.0.1:7860
    vanilla-transformer explore MODEL --html OUT.html --text "A man rides a bike." --text "Two dogs."
    vanilla-transformer explore MODEL --space DIR [--model-id USER/NAME] # a folder to publish as a Hugging Face Space

In Python:

- `attention_data(model, tokenizer, text, **generate_kwargs)` runs the model on one text and returns every number the
  views draw, as JSON-ready lists: the tokens as the tokenizer cut them, every layer and head of encoder
  self-attention, decoder masked self-attention and encoder-decoder attention (`[layer][head][query][key]`, read from
  the model's own `output_attentions`), the top-k next-token probabilities at each decoding step, the beams kept at
  each step of a beam search with their scores, and the positional encoding the model adds (section 3.5). The
  decoder-only and encoder-only configurations give the analogous data.
- `write_html(path, data_list)` writes one page (inline JS, CSS and data; no network) with the views of each text.
- `build_app(model, tokenizer)` returns the Gradio app, which shows the same page for the current sentence (one
  renderer for both); its API endpoint `/translate` returns the translation and the attention data.
- `write_space(model_folder_or_id, out_dir)` writes a folder that `huggingface_hub.upload_folder(...,
  repo_type="space")` publishes as a live demo.

Gradio is an optional extra: `pip install "vanilla-transformer[demo]"`. Nothing is fetched from the network at run
time: the app uses system fonts, and Gradio's analytics are turned off.
"""

import html
import json
import math
import os
import pathlib
import shutil
import tempfile
from dataclasses import dataclass, field
from importlib import resources

import torch

CONFIGURATIONS = ("encoder-decoder", "decoder-only", "encoder-only")
TOP_K = 10
MIN_POSITIONS_DRAWN = 32  # the positional-encoding picture shows at least this many positions (or the model's limit)
_INSTALL_HINT = 'pip install "vanilla-transformer[demo]"'
_ASSETS = "explore_assets"


# ----------------------------------------------------------------------------------------------------------------
# Running the model once, with every attention weight (the plots of visualize.py read the same run)


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
    """The most tokens the model reads: its positions (`max_position_embeddings`), or the tokenizer's
    `model_max_length` if smaller."""
    limit = model.config.max_position_embeddings
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < limit:
        limit = tokenizer_limit
    return limit


def _eos_ids(model) -> list[int]:
    generation_config = getattr(model, "generation_config", None)  # encoder-only models have none
    eos = generation_config.eos_token_id if generation_config is not None else None
    if eos is None:
        eos = model.config.eos_token_id
    return [] if eos is None else list(eos) if isinstance(eos, (list, tuple)) else [eos]


class _BeamRecorder:
    """A logits processor that changes nothing and keeps, at each step of beam search, the running hypotheses
    (`input_ids`) and their log-probabilities for the next token (beam search gives processors log-softmaxed scores)."""

    def __init__(self):
        self.calls: list[tuple[torch.Tensor, torch.Tensor]] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        self.calls.append((input_ids.detach().cpu(), scores.detach().float().cpu()))
        return scores

    def steps(self, prefix_length: int, eos_ids: list[int]) -> list[list[tuple[list[int], float]]]:
        """Per step: the distinct hypotheses extended at that step (ids after the first `prefix_length`) with their
        cumulative log-probability, best first. A hypothesis that ended (in </s>) is not extended and is left out."""
        steps, previous = [], {}  # previous: sequence -> (row, cumulative score) at the step before
        for t, (input_ids, scores) in enumerate(self.calls):
            current, seen = {}, set()
            for row, sequence in enumerate(map(tuple, input_ids.tolist())):
                if sequence in seen or (t > 0 and sequence[-1] in eos_ids):
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


def _generate(model, generate_kwargs: dict, **inputs) -> tuple[torch.Tensor, _BeamRecorder | None]:
    """`model.generate` for one sequence; with beam search, also the recorder of the beams kept at each step."""
    from transformers import LogitsProcessorList

    num_beams = generate_kwargs.get("num_beams") or model.generation_config.num_beams or 1
    recorder = _BeamRecorder() if num_beams > 1 else None
    extra = {"logits_processor": LogitsProcessorList([recorder])} if recorder is not None else {}
    generated = model.generate(**inputs, **generate_kwargs, **extra)[0]
    return generated, recorder


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
    notes = []
    room = limit - 1 if decoder_only else limit  # a decoder-only model needs a position for what it writes
    if len(source_ids) > room:
        if not truncate:
            raise ValueError(f"the text has {len(source_ids)} tokens, more than the {room} this model reads")
        notes.append(f"The text has {len(source_ids)} tokens; the model reads at most {room}, so it was cut to its "
                     f"first {room} tokens.")
        ends_in_eos = not decoder_only and source_ids[-1] == tokenizer.eos_token_id
        source_ids = source_ids[: room - 1] + source_ids[-1:] if ends_in_eos else source_ids[:room]  # keep </s>
    if decoder_only and target is None:
        longest = limit if generate_kwargs.get("max_new_tokens") is None else len(source_ids) + generate_kwargs.pop(
            "max_new_tokens")
        generate_kwargs["max_length"] = min(generate_kwargs.get("max_length") or model.generation_config.max_length
                                            or limit, longest, limit)
    input_ids = torch.tensor([source_ids], device=device)
    eos_ids = _eos_ids(model)
    was_training = model.training
    model.eval()
    recorder = None
    try:
        with torch.no_grad():
            target_generated = target is None and configuration != "encoder-only"
            if configuration == "encoder-decoder":
                if target_generated:
                    generated, recorder = _generate(model, generate_kwargs, input_ids=input_ids,
                                                    attention_mask=torch.ones_like(input_ids))
                    labels = generated[1:]  # (<start>, y_1, ..., </s>, pad...) without <start>
                    eos = torch.isin(labels, torch.tensor(eos_ids, device=labels.device)).nonzero()
                    if len(eos):
                        labels = labels[: int(eos[0]) + 1]
                    target = tokenizer.decode(labels, skip_special_tokens=True)
                    labels = labels[None]
                else:
                    if not target.strip():
                        raise ValueError("the target text is empty; leave it out to attend over the model's "
                                         "translation")
                    labels = tokenizer(text_target=target, return_tensors="pt")["input_ids"].to(device)
                decoder_input_ids = model.prepare_decoder_input_ids_from_labels(labels)  # <start> y_1 ... y_{n-1}
                outputs = model(input_ids=input_ids, decoder_input_ids=decoder_input_ids, output_attentions=True,
                                use_cache=False)
                target_ids, decoder_ids = labels[0].tolist(), decoder_input_ids[0].tolist()
            elif configuration == "decoder-only":
                if target_generated:
                    generated, recorder = _generate(model, generate_kwargs, input_ids=input_ids,
                                                    attention_mask=torch.ones_like(input_ids))
                    sequence = generated[None]
                    target = tokenizer.decode(generated[input_ids.shape[1]:], skip_special_tokens=True)
                else:
                    if not target.strip():
                        raise ValueError("the target text is empty; leave it out to attend over the model's "
                                         "continuation")
                    continuation = tokenizer(target, add_special_tokens=False, return_tensors="pt")["input_ids"]
                    sequence = torch.cat([input_ids, continuation.to(device)], dim=1)
                outputs = model(input_ids=sequence, output_attentions=True)
                decoder_ids = sequence[0].tolist()
                target_ids = decoder_ids[len(source_ids):]
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
        beam_steps=recorder.steps(prefix, eos_ids) if recorder is not None else None,
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


# ----------------------------------------------------------------------------------------------------------------
# The data the views draw


def positions_module(model):
    """The module that makes the model's positional encodings (the encoder's, or the single stack's)."""
    if model.config.is_encoder_decoder:
        return model.get_encoder().embed_positions
    return model.model.embed_positions


def _top_k(logits: torch.Tensor, tokenizer, k: int) -> list[dict]:
    """The k most probable tokens of one softmax distribution, with their ids and probabilities."""
    probabilities = torch.softmax(logits.float(), dim=-1)
    values, ids = probabilities.topk(min(k, probabilities.shape[-1]))
    tokens = tokenizer.convert_ids_to_tokens(ids.tolist())
    return [{"token": token, "id": int(i), "probability": float(p)}
            for token, i, p in zip(tokens, ids.tolist(), values.tolist())]


def _decoding(model, generate_kwargs: dict) -> dict:
    """The decoding actually used: the generation config updated by the call's arguments."""
    config = model.generation_config
    value = {name: generate_kwargs.get(name, getattr(config, name, None))
             for name in ("num_beams", "do_sample", "temperature", "length_penalty", "max_new_tokens", "max_length")}
    value["num_beams"] = value["num_beams"] or 1
    value["strategy"] = "sampling" if value["do_sample"] else "beam search" if value["num_beams"] > 1 else "greedy"
    return value


def attention_data(model, tokenizer, text: str, *, target: str | None = None, top_k: int = TOP_K,
                   **generate_kwargs) -> dict:
    """Everything the explorer draws for one text, as JSON-ready lists and numbers.

    Keys for every configuration: `configuration`, `model` (class name), `text`, `source_tokens`, `target_tokens`,
    `decoder_input_tokens`, `translation`, `encoder_attentions`, `decoder_attentions`, `cross_attentions` (each
    `[layer][head][query][key]`, the model's `output_attentions`; empty where the model has no such attention),
    `steps`, `step_attention`, `decoding`, `positional_encoding`, `notes`; and `label_scores` for a classifier.

    - encoder-decoder: the model translates `text` (`model.generate` with its generation config updated by
      `generate_kwargs`, e.g. `num_beams=4` or `do_sample=True, temperature=0.8`) unless `target` is given.
      `target_tokens` are the translation's tokens y_1 .. </s> (row i of the cross-attention is the step that
      produced token i); `decoder_input_tokens` (<start> y_1 .. y_{n-1}) label the decoder self-attention.
      `steps[t]`: the token produced at step t, the `top_k` most probable next tokens (the model's softmax), and
      with beam search the `beams` extended at that step, with their scores (summed log-probabilities) and whether
      each is a prefix of the final translation (`chosen`). `step_attention` = "cross": the row the step view draws.
    - decoder-only: `source_tokens` is the prompt, `target_tokens` the model's continuation (or `target`),
      `decoder_attentions` the causal self-attention over both (`decoder_input_tokens`); `steps[i]` is the
      next-token distribution at each position i. `step_attention` = "decoder".
    - encoder-only: `encoder_attentions` over `source_tokens`; a masked language model gives `steps` with the top
      tokens at each mask token (at every position when the text has none), a classifier gives `label_scores`
      (softmax probabilities per label). `step_attention` = "encoder".

    `positional_encoding`: the vectors the model adds to its embeddings at positions 0 .. n-1 (its own sinusoids,
    or its learned table), `values[position][dimension]`.
    """
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, got {top_k}")
    run = run_with_attentions(model, tokenizer, text, target, generate_kwargs=generate_kwargs)
    attentions = stacked_attentions(run)
    tokens = tokenizer.convert_ids_to_tokens
    data = {
        "configuration": run.configuration,
        "model": type(model).__name__,
        "text": text,
        "source_tokens": tokens(run.source_ids),
        "target_tokens": tokens(run.target_ids),
        "decoder_input_tokens": tokens(run.decoder_input_ids),
        "translation": run.target,
        "target_generated": run.target_generated,
    }
    for kind in ("encoder", "decoder", "cross"):
        data[f"{kind}_attentions"] = [layer.tolist() for layer in attentions.get(kind, [])]
    data["decoding"] = _decoding(model, generate_kwargs) if run.target_generated else None
    data.update(_steps(model, tokenizer, run, top_k))
    data["positional_encoding"] = _positional_encoding(model, run)
    data["notes"] = run.notes
    return data


def _steps(model, tokenizer, run: AttentionRun, top_k: int) -> dict:
    """The step view's data: per decoding step (or position) the top-k distribution, the beams, the attention row."""
    logits = getattr(run.outputs, "logits", None)
    if run.configuration == "encoder-decoder":
        steps = []
        target_tokens = tokenizer.convert_ids_to_tokens(run.target_ids)
        for t, token in enumerate(target_tokens):
            step = {"query": t, "token": token, "top_k": _top_k(logits[0, t], tokenizer, top_k)}
            if run.beam_steps is not None and t < len(run.beam_steps):
                step["beams"] = [{"tokens": tokenizer.convert_ids_to_tokens(ids), "score": score,
                                  "chosen": ids == run.target_ids[:t]} for ids, score in run.beam_steps[t]]
            steps.append(step)
        return {"steps": steps, "step_attention": "cross"}
    if run.configuration == "decoder-only":
        sequence = run.decoder_input_ids
        prompt = len(run.source_ids)
        steps = []
        for i in range(len(sequence)):
            step = {"query": i, "token": tokenizer.convert_ids_to_tokens(sequence[i + 1]) if i + 1 < len(sequence)
                    else "", "top_k": _top_k(logits[0, i], tokenizer, top_k)}
            t = i + 1 - prompt  # the continuation's token i + 1 was chosen at search step t
            if run.beam_steps is not None and 0 <= t < len(run.beam_steps):
                step["beams"] = [{"tokens": tokenizer.convert_ids_to_tokens(ids), "score": score,
                                  "chosen": ids == run.target_ids[:t]} for ids, score in run.beam_steps[t]]
            steps.append(step)
        return {"steps": steps, "step_attention": "decoder"}
    if logits is not None and logits.dim() == 3:  # masked language model: (1, S, V)
        mask_id = getattr(tokenizer, "mask_token_id", None)
        positions = [i for i, token_id in enumerate(run.source_ids) if token_id == mask_id] \
            or list(range(len(run.source_ids)))
        source_tokens = tokenizer.convert_ids_to_tokens(run.source_ids)
        steps = [{"query": i, "token": source_tokens[i], "top_k": _top_k(logits[0, i], tokenizer, top_k)}
                 for i in positions]
        return {"steps": steps, "step_attention": "encoder"}
    result = {"steps": [], "step_attention": "encoder"}
    if logits is not None:  # a classifier: (1, num_labels)
        labels = model.config.id2label or {}
        if logits.shape[-1] == 1:  # a regressor: the value itself
            result["label_scores"] = [{"label": labels.get(0, "score"), "score": float(logits[0, 0])}]
        else:
            probabilities = torch.softmax(logits[0].float(), dim=-1).tolist()
            result["label_scores"] = [{"label": labels.get(i, f"LABEL_{i}"), "score": p}
                                      for i, p in enumerate(probabilities)]
    return result


def _positional_encoding(model, run: AttentionRun) -> dict:
    """The model's own positional encoding for positions 0 .. n-1 (n: the longest sequence of this run, at least
    MIN_POSITIONS_DRAWN, at most the model's positions); computed by the model's positional module."""
    from vanilla_transformer.modeling_vanilla_transformer import first_positions

    config = model.config
    longest = max(len(run.source_ids), len(run.decoder_input_ids))
    length = min(max(longest, MIN_POSITIONS_DRAWN), config.max_position_embeddings)
    module = positions_module(model)
    like = next(model.parameters())
    with torch.no_grad():
        values = first_positions(module, length, like, config.position_offset).float().cpu()  # (L, D)
    description = f"{config.position_embedding_type} positions"
    if config.position_embedding_type == "sinusoidal":
        description += f", layout {config.sinusoidal_layout}, frequencies {config.sinusoidal_frequencies}"
    if config.position_offset:
        description += f", offset {config.position_offset}"
    return {"type": config.position_embedding_type, "description": description, "values": values.tolist()}


# ----------------------------------------------------------------------------------------------------------------
# The page: one renderer (explore_assets/), used by the static page and shown inside the live app


def _asset(name: str) -> str:
    return resources.files(__package__).joinpath(_ASSETS, name).read_text(encoding="utf-8")


def _rounded(value, digits: int):
    """`value` with its floats rounded to `digits` decimals (the page's JSON stays small)."""
    if isinstance(value, float):
        return round(value, digits) if math.isfinite(value) else None
    if isinstance(value, list):
        return [_rounded(item, digits) for item in value]
    if isinstance(value, dict):
        return {key: _rounded(item, 4 if key == "positional_encoding" else digits) for key, item in value.items()}
    return value


def page_json(data_list: list[dict]) -> str:
    """The data as the page embeds it: attention weights and probabilities to 6 decimals, positional encodings to 4,
    and `</` escaped so that no text of the data can end the script element."""
    text = json.dumps(_rounded(list(data_list), 6), ensure_ascii=False, separators=(",", ":"))
    return text.replace("</", "<\\/").replace("<!--", "<\\!--")


def render_page(data_list: list[dict], title: str = "Attention explorer") -> str:
    """The self-contained page (HTML with inline CSS, JS and data) for `data_list` (one `attention_data` per text)."""
    if not data_list:
        raise ValueError("no texts to show: give at least one attention_data")
    page = _asset("page.html")
    # each placeholder is replaced once, data last, so nothing in the data is taken for a placeholder
    page = page.replace("{{TITLE}}", html.escape(title))
    page = page.replace("/*{{STYLE}}*/", _asset("explore.css"))
    page = page.replace("/*{{SCRIPT}}*/", _asset("explore.js"))
    return page.replace("{{DATA}}", page_json(data_list))


def write_html(path: str | os.PathLike, data_list: list[dict], title: str = "Attention explorer") -> str:
    """Write the page for `data_list` to `path` (atomically: a temporary file beside it, then a rename); returns the
    path. The data are embedded as JSON in `<script type="application/json" id="attention-data">`."""
    path = os.fspath(path)
    folder = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {path}: the folder {folder} does not exist")
    if os.path.isdir(path):
        raise IsADirectoryError(f"cannot write {path}: it is a folder; give a file name such as explore.html")
    page = render_page(data_list, title)
    handle, staging = tempfile.mkstemp(dir=folder, prefix=".explore-", suffix=".html")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as f:
            f.write(page)
        os.replace(staging, path)
    except BaseException:
        if os.path.exists(staging):
            os.remove(staging)
        raise
    return path


# ----------------------------------------------------------------------------------------------------------------
# The live app (Gradio)


DECODING_CHOICES = ("greedy", "beam search", "sampling")
MAX_TEXT_CHARACTERS = 2000  # a text box longer than this is cut before tokenizing (the model reads far fewer tokens)


def _gradio():
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")  # before gradio is imported: no analytics calls
    try:
        import gradio as gr
    except ImportError as error:
        raise ImportError(f"The explorer app needs gradio, which is not installed: {_INSTALL_HINT}") from error
    return gr


def offline_theme():
    """Gradio's default look with system fonts: the default theme would load its fonts from Google."""
    gr = _gradio()
    return gr.themes.Default(font=[gr.themes.Font("system-ui"), "sans-serif"],
                             font_mono=[gr.themes.Font("ui-monospace"), "monospace"])


def decoding_arguments(strategy: str, num_beams: float, temperature: float) -> dict:
    """generate's arguments for one of DECODING_CHOICES; a ValueError names a bad value."""
    if strategy == "greedy":
        return {"num_beams": 1, "do_sample": False}
    if strategy == "beam search":
        num_beams = int(num_beams)
        if num_beams < 1:
            raise ValueError(f"the number of beams must be at least 1, got {num_beams}")
        return {"num_beams": num_beams, "do_sample": False}
    if strategy == "sampling":
        if not temperature or temperature <= 0:
            raise ValueError(f"the temperature must be positive, got {temperature}")
        return {"num_beams": 1, "do_sample": True, "temperature": float(temperature)}
    raise ValueError(f"decoding {strategy!r} is not one of {', '.join(DECODING_CHOICES)}")


def explore_text(model, tokenizer, text: str, strategy: str = "greedy", num_beams: int = 4,
                 temperature: float = 1.0) -> tuple[str, dict, str]:
    """What the app's Translate button (and its `/translate` endpoint) does: (translation, attention data, the
    views as an iframe). A ValueError says what is wrong with the input."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError("The source text is empty: type a sentence.")
    notes = []
    if len(text) > MAX_TEXT_CHARACTERS:
        notes.append(f"The text has {len(text)} characters; only the first {MAX_TEXT_CHARACTERS} were read.")
        text = text[:MAX_TEXT_CHARACTERS]
    generate_kwargs = decoding_arguments(strategy, num_beams, temperature) \
        if configuration_of(model) != "encoder-only" else {}
    data = attention_data(model, tokenizer, text, **generate_kwargs)
    data["notes"] = notes + data["notes"]
    return data["translation"], data, iframe(data)


def iframe(data: dict) -> str:
    """The page for one text inside an iframe (its scripts run there, apart from the app's)."""
    page = render_page([data])
    return (f'<iframe id="explorer-frame" title="Attention explorer" srcdoc="{html.escape(page, quote=True)}" '
            'style="width:100%;height:1200px;border:0" sandbox="allow-scripts"></iframe>')


# The app's side of explore.js's tellHeight: the frame takes the height of the page it shows (no inner scrolling).
_FIT_FRAME_JS = """
window.addEventListener("message", function (event) {
  var height = event.data && event.data["vanilla-transformer-explorer-height"];
  var frame = element.querySelector("iframe");
  if (height && frame && event.source === frame.contentWindow) frame.style.height = (height + 16) + "px";
});
"""


def _default_decoding(model) -> tuple[str, int, float]:
    config = getattr(model, "generation_config", None)
    if config is None:  # encoder-only: nothing is generated
        return "greedy", 2, 1.0
    strategy = "sampling" if config.do_sample else "beam search" if (config.num_beams or 1) > 1 else "greedy"
    return strategy, max(config.num_beams or 1, 2), float(config.temperature or 1.0)


def build_app(model, tokenizer, title: str | None = None):
    """The live explorer: a **Source** text box, decoding choices (defaults from the model's generation config), a
    **Translate** button, the translation, and the views of the explorer page for that sentence. Its API endpoint
    `/translate` (text, decoding, beams, temperature) returns (translation, attention data, views HTML).

    Returns a `gr.Blocks`; its `launch()` uses system fonts (no Google fonts) and Gradio's analytics are off.
    """
    gr = _gradio()
    configuration = configuration_of(model)

    class OfflineBlocks(gr.Blocks):
        def launch(self, *args, **kwargs):
            kwargs.setdefault("theme", offline_theme())
            return super().launch(*args, **kwargs)

    name = getattr(model.config, "_name_or_path", "") or type(model).__name__
    title = title or f"Attention explorer: {os.path.basename(os.path.normpath(name)) or name}"
    strategy, beams, temperature = _default_decoding(model)
    verb = {"encoder-decoder": "Translate", "decoder-only": "Continue", "encoder-only": "Analyse"}[configuration]

    def run(text, strategy, num_beams, temperature):
        try:
            return explore_text(model, tokenizer, text, strategy, num_beams, temperature)
        except ValueError as error:
            raise gr.Error(str(error), print_exception=False) from None

    with OfflineBlocks(title=title, analytics_enabled=False) as app:
        gr.Markdown(f"## {html.escape(title)}\n{type(model).__name__} ({configuration}): every layer and head of "
                    "its attention for your sentence. Hover a token to see what it attends to and what attends to it.")
        with gr.Row():
            with gr.Column(scale=3):
                source = gr.Textbox(label="Source", lines=2, placeholder="Type a sentence", elem_id="source")
            with gr.Column(scale=2):
                decoding = gr.Radio(list(DECODING_CHOICES), value=strategy, label="Decoding", elem_id="decoding",
                                    visible=configuration != "encoder-only")
                with gr.Row():
                    num_beams = gr.Slider(1, 8, value=beams, step=1, label="Beams (beam search)",
                                          visible=configuration != "encoder-only")
                    temp = gr.Slider(0.05, 2.0, value=temperature, step=0.05, label="Temperature (sampling)",
                                     visible=configuration != "encoder-only")
        button = gr.Button(verb, variant="primary", elem_id="translate")
        translation = gr.Textbox(label={"encoder-decoder": "Translation", "decoder-only": "Continuation",
                                        "encoder-only": "Text"}[configuration], interactive=False,
                                 elem_id="translation")
        views = gr.HTML(elem_id="views", js_on_load=_FIT_FRAME_JS)
        with gr.Accordion("Attention data (JSON)", open=False):
            data = gr.JSON(label="attention data")
        inputs = [source, decoding, num_beams, temp]
        button.click(run, inputs, [translation, data, views], api_name="translate")
        source.submit(run, inputs, [translation, data, views], api_name=False)
    return app


# ----------------------------------------------------------------------------------------------------------------
# A Hugging Face Space


SPACE_README = """---
title: {title}
emoji: 🔍
colorFrom: indigo
colorTo: blue
sdk: gradio
app_file: app.py
pinned: false
---

# {title}

An interactive attention explorer for {model_name}, the Transformer of
[Attention Is All You Need](https://arxiv.org/abs/1706.03762) (Vaswani et al., 2017): type a sentence and see every
layer and head of its encoder self-attention, decoder masked self-attention and encoder-decoder attention, the
decoding step by step (top-k probabilities, beams) and the positional encoding. Made with
`vanilla-transformer explore --space`.
"""

SPACE_APP = '''"""The attention explorer of {model_name} (written by `vanilla-transformer explore --space`)."""

import os

os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")

import transformers  # noqa: E402

import vanilla_transformer  # noqa: E402  (registers the model with the Auto classes)
from vanilla_transformer.inspect.explorer import build_app  # noqa: E402

MODEL = {model_ref}

config = transformers.AutoConfig.from_pretrained(MODEL)
model_class = getattr(vanilla_transformer, (config.architectures or ["VanillaTransformerForConditionalGeneration"])[0])
model = model_class.from_pretrained(MODEL).eval()
tokenizer = transformers.AutoTokenizer.from_pretrained(MODEL)
demo = build_app(model, tokenizer)

if __name__ == "__main__":
    demo.launch()
'''

# the package as the Space runs it: its modules (every subpackage) and data files
_PACKAGE_FILES = ("**/*.py", "cards/templates/*", f"inspect/{_ASSETS}/*")


def _space_requirements() -> str:
    """The Space's requirements: the package's own dependencies (from its metadata when installed) and gradio."""
    from importlib import metadata

    try:
        requires = [r for r in (metadata.requires("vanilla-transformer") or []) if "extra ==" not in r]
        demo = [r.split(";")[0].strip() for r in (metadata.requires("vanilla-transformer") or [])
                if 'extra == "demo"' in r]
    except metadata.PackageNotFoundError:
        requires, demo = [], []
    requires = requires or ["torch>=2.13", "transformers>=5.18,<6", "tokenizers>=0.21", "safetensors>=0.4",
                            "huggingface_hub>=1.0", "Jinja2>=3.1", "tqdm>=4.66"]
    demo = demo or ["gradio>=6.0"]
    return "\n".join(requires + demo) + "\n"


def write_space(model_folder_or_id: str | os.PathLike, out_dir: str | os.PathLike, *, model_id: str | None = None,
                title: str | None = None) -> str:
    """Write a Hugging Face Space folder: README.md (front matter `sdk: gradio`, `app_file: app.py`), app.py,
    requirements.txt, a copy of this package (the Space runs the same explorer) and the model: a copy of the local
    folder's files under `model/`, or, with `model_id` (or a `model_folder_or_id` that is not a local folder), the
    Hub model id that app.py loads. Publish it with `huggingface_hub.upload_folder(folder_path=out_dir,
    repo_id=..., repo_type="space")`.

    `out_dir` must not exist or be empty; it is written whole in a staging folder beside it, then renamed.
    """
    source = os.fspath(model_folder_or_id)
    out_dir = os.fspath(out_dir)
    local = os.path.isdir(source)
    if model_id is None and not local:
        if os.path.exists(source) or source.startswith((".", "/")) or source.count("/") > 1:
            raise FileNotFoundError(f"model folder not found: {source}")
        model_id = source  # a Hub model id, e.g. user/name
    if local:
        from vanilla_transformer.checkpoints.kinds import is_ctranslate2_folder
        from vanilla_transformer.checkpoints.validate import check_checkpoint

        if is_ctranslate2_folder(source):
            raise ValueError(f"{source} is a CTranslate2 folder: it exposes no per-head attention; give the "
                             "PyTorch checkpoint it was exported from")
        check_checkpoint(source, need_tokenizer=True)
    if os.path.exists(out_dir) and (not os.path.isdir(out_dir) or os.listdir(out_dir)):
        raise FileExistsError(f"{out_dir} exists and is not an empty folder; give a new folder for the Space")
    parent = os.path.dirname(os.path.abspath(out_dir))
    if not os.path.isdir(parent):
        raise FileNotFoundError(f"cannot write {out_dir}: the folder {parent} does not exist")

    name = model_id or os.path.basename(os.path.normpath(source))
    title = title or f"Attention explorer: {name}"[:60]
    staging = tempfile.mkdtemp(dir=parent, prefix=".space-")
    try:
        with open(os.path.join(staging, "README.md"), "w", encoding="utf-8") as f:
            f.write(SPACE_README.format(title=title.replace(":", " -"), model_name=f"`{name}`"))
        with open(os.path.join(staging, "app.py"), "w", encoding="utf-8") as f:
            f.write(SPACE_APP.format(model_name=name, model_ref=repr(model_id) if model_id else
                                     'os.path.join(os.path.dirname(os.path.abspath(__file__)), "model")'))
        with open(os.path.join(staging, "requirements.txt"), "w", encoding="utf-8") as f:
            f.write(_space_requirements())
        package = pathlib.Path(__file__).resolve().parent.parent  # vanilla_transformer/
        for pattern in _PACKAGE_FILES:
            for path in sorted(package.glob(pattern)):
                if path.is_file():
                    target = os.path.join(staging, "vanilla_transformer", os.fspath(path.relative_to(package)))
                    os.makedirs(os.path.dirname(target), exist_ok=True)
                    shutil.copyfile(path, target)
        if model_id is None:
            model_folder = os.path.join(staging, "model")
            os.makedirs(model_folder)
            for entry in sorted(os.listdir(source)):
                if os.path.isfile(os.path.join(source, entry)) and not entry.startswith("."):
                    shutil.copyfile(os.path.join(source, entry), os.path.join(model_folder, entry))
        if os.path.isdir(out_dir):
            os.rmdir(out_dir)  # empty (checked above)
        os.replace(staging, out_dir)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out_dir

