"""Pictures of what the model does: attention maps, positional encodings and training curves.

    vanilla-transformer plot attention --model DIR --text "two hundred and five" --kind cross --head all --out attn.png
    vanilla-transformer plot positions --d-model 128 --length 100 --out positions.png
    vanilla-transformer plot training --run OUTPUT_DIR --out training.png

(the command is `cli/plot.py`; folders are opened by `checkpoints.load.load_checkpoint`.)

Each picture is also a Python function returning a matplotlib `Figure` (`plot_attention`, `plot_positions`,
`plot_training`); `attention_weights` and `positional_encoding_matrix` return the numbers they draw. The figures
are made with matplotlib's object-oriented API (no pyplot state, no backend switching): save them with
`fig.savefig(path)`, or let Jupyter display them. matplotlib is an optional extra:
`pip install "vanilla-transformer[plot]"`.
"""

import json
import math
import os
import textwrap
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers.trainer_utils import get_last_checkpoint

from vanilla_transformer.configuration_vanilla_transformer import VanillaTransformerConfig
from vanilla_transformer.extras import import_extra
from vanilla_transformer.inspect import ATTENTION_KINDS
from vanilla_transformer.inspect.attention_run import run_with_attentions, stacked_attentions
from vanilla_transformer.modeling_vanilla_transformer import first_positions, positional_encoding


def new_figure(**kwargs):
    """A standalone matplotlib Figure with constrained layout, or an ImportError that says how to get matplotlib."""
    figure = import_extra("matplotlib.figure", "plot", "Plotting")
    return figure.Figure(layout="constrained", **kwargs)


# ----------------------------------------------------------------------------------------------------------------
# Attention maps


@dataclass
class AttentionMap:
    """The attention weights of one layer for one sentence pair, with the tokens that label them.

    `weights` has shape (heads, queries, keys); row q of head h is the softmax distribution over keys that query q
    attended to. For `kind="cross"` the queries are the target tokens the decoder outputs (row i is the step that
    produced target token i) and the keys are the source tokens; for `"encoder"` both are the source tokens; for
    `"decoder"` both are the decoder's input tokens (`<s>` then the target shifted right).

    For the models with one stack, `source` is the text: the encoder-only models' input (`"encoder"`), or the
    decoder-only model's prompt, followed by `target` as its continuation (`"decoder"`; queries and keys are the
    prompt's and the continuation's tokens).
    """

    weights: np.ndarray  # (H, Q, K)
    query_tokens: list[str]
    key_tokens: list[str]
    kind: str
    layer: int  # 0-based
    num_layers: int
    source: str
    target: str
    target_generated: bool  # True when the target is the model's own translation


def _check_index(value: int, count: int, what: str, context: str) -> int:
    """`value` as an index into `count` things (negative counts from the last), or a ValueError saying so."""
    if not -count <= value < count:
        raise ValueError(
            f"{what} {value} does not exist: {context} (0..{count - 1}, or -{count}..-1 counting from the last)"
        )
    return value % count


def attention_weights(
    model,
    tokenizer,
    text: str,
    target: str | None = None,
    *,
    kind: str = "cross",
    layer: int = -1,
    generate_kwargs: dict | None = None,
) -> AttentionMap:
    """All heads of one layer's attention for `text` (and `target`), read from the model's `output_attentions`.

    Without `target`, the model translates `text` first (`model.generate`, with its generation_config updated by
    `generate_kwargs`), and the attention is that of its own translation. The decoder then reads the target
    teacher-forced in one forward pass, which gives the same weights as step-by-step decoding with the cache.
    `layer` counts from 0; negative values count from the last layer.
    """
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind={kind!r} is not one of {list(ATTENTION_KINDS)}")
    if not text or not text.strip():
        raise ValueError("the source text is empty: there is nothing to attend to")
    config = model.config
    if config.is_encoder_decoder:
        side = "encoder" if kind == "encoder" else "decoder"
        num_layers = config.encoder_layers if kind == "encoder" else config.decoder_layers
        layer = _check_index(layer, num_layers, "layer", f"the {side} has {num_layers} layers")
    else:  # decoder-only (kind="decoder": the prompt, then the continuation) or encoder-only (kind="encoder")
        decoder_only = model.can_generate()
        stack = "decoder-only" if decoder_only else "encoder-only"
        if kind != ("decoder" if decoder_only else "encoder"):
            raise ValueError(f"kind={kind!r} does not exist in this {stack} model: its attention is kind="
                             f"{'decoder' if decoder_only else 'encoder'!r} (self-attention"
                             f"{', masked' if decoder_only else ''})")
        if target is not None and not decoder_only:
            raise ValueError("an encoder-only model reads one text: give no target")
        num_layers = config.decoder_layers if decoder_only else config.encoder_layers
        layer = _check_index(layer, num_layers, "layer", f"the {stack} model has {num_layers} layers")

    run = run_with_attentions(model, tokenizer, text, target, generate_kwargs=generate_kwargs, truncate=False)
    source_tokens = tokenizer.convert_ids_to_tokens(run.source_ids)
    if kind == "cross":
        queries, keys = tokenizer.convert_ids_to_tokens(run.target_ids), source_tokens
    elif kind == "encoder":
        queries, keys = source_tokens, source_tokens
    else:
        queries = keys = tokenizer.convert_ids_to_tokens(run.decoder_input_ids)
    return AttentionMap(
        weights=stacked_attentions(run)[kind][layer].numpy(),  # (H, Q, K)
        query_tokens=queries,
        key_tokens=keys,
        kind=kind,
        layer=layer,
        num_layers=num_layers,
        source=text,
        target=run.target or "",
        target_generated=run.target_generated,
    )


_AXIS_LABELS = {
    "cross": ("source token", "target token (output)"),
    "encoder": ("source token (key)", "source token (query)"),
    "decoder": ("decoder input (key)", "decoder input (query)"),
}
_TITLES = {"cross": "encoder-decoder attention", "encoder": "encoder self-attention",
           "decoder": "decoder self-attention (masked)"}


def plot_attention(
    model,
    tokenizer,
    text: str,
    target: str | None = None,
    *,
    kind: str = "cross",
    layer: int = -1,
    head: int | str = "all",
    generate_kwargs: dict | None = None,
    figsize: tuple[float, float] | None = None,
    cmap: str = "viridis",
):
    """Heatmap(s) of one layer's attention with the subword tokens as axis labels; returns a matplotlib Figure.

    `kind`: "cross" (target tokens x source tokens), "encoder" or "decoder" self-attention. `head`: a head index
    (0-based, negative counts from the last), "all" for a grid of every head, or "mean" for their average. All
    panels share one colour scale from 0 to the largest weight drawn. See `attention_weights` for `target`,
    `layer` and `generate_kwargs`. Each panel's `ax.images[0].get_array()` is the (queries, keys) matrix drawn.
    """
    if kind not in ATTENTION_KINDS:
        raise ValueError(f"kind={kind!r} is not one of {list(ATTENTION_KINDS)}")
    side = "encoder" if kind == "encoder" else "decoder"
    num_heads = getattr(model.config, f"{side}_attention_heads")
    if isinstance(head, (int, np.integer)) and not isinstance(head, bool):  # check before translating
        head = _check_index(int(head), num_heads, "head", f"each {side} layer has {num_heads} heads")
    elif head not in ("all", "mean"):
        raise ValueError(f"head={head!r} must be a head index, 'all' or 'mean'")
    attention = attention_weights(model, tokenizer, text, target, kind=kind, layer=layer,
                                  generate_kwargs=generate_kwargs)
    if head == "all":
        panels = [(f"head {h}", attention.weights[h]) for h in range(num_heads)]
    elif head == "mean":
        panels = [(f"mean of {num_heads} heads", attention.weights.mean(axis=0))]
    else:
        panels = [(f"head {head}", attention.weights[head])]

    n_queries, n_keys = len(attention.query_tokens), len(attention.key_tokens)
    cell = 0.26  # inches per token
    panel_width, panel_height = max(2.4, cell * n_keys + 1.0), max(2.2, cell * n_queries + 1.0)

    def badness(ncols: int) -> float:  # grids near a 3:2 landscape shape, with few empty cells, read best
        nrows = math.ceil(len(panels) / ncols)
        return abs(math.log(ncols * panel_width / (nrows * panel_height) / 1.5)) + 0.3 * (ncols * nrows - len(panels))

    ncols = min(range(1, min(len(panels), 6) + 1), key=badness)
    nrows = math.ceil(len(panels) / ncols)
    if model.config.is_encoder_decoder:
        target_note = "the model's translation" if attention.target_generated else "given target"
        sentences = (f"{textwrap.shorten(attention.source, 70)!r} → {textwrap.shorten(attention.target, 70)!r} "
                     f"({target_note})")
    elif attention.target:  # decoder-only: the prompt and its continuation
        target_note = "the model's continuation" if attention.target_generated else "given continuation"
        sentences = (f"{textwrap.shorten(attention.source, 70)!r} + {textwrap.shorten(attention.target, 70)!r} "
                     f"({target_note})")
    else:
        sentences = repr(textwrap.shorten(attention.source, 140))
    title = (f"{_TITLES[attention.kind]}, layer {attention.layer} of {attention.num_layers} (counted from 0)\n"
             f"{sentences}")
    if figsize is None:
        title_width = 0.085 * max(len(line) for line in title.splitlines())  # 10-point characters
        figsize = (max(ncols * panel_width + 1.2, title_width), nrows * panel_height + 0.8)
    fig = new_figure(figsize=figsize)
    axes = fig.subplots(nrows, ncols, squeeze=False)
    vmax = max(float(matrix.max()) for _, matrix in panels)
    x_label, y_label = _AXIS_LABELS[attention.kind]
    for index, ax in enumerate(axes.flat):
        if index >= len(panels):
            ax.set_axis_off()
            continue
        name, matrix = panels[index]
        image = ax.imshow(matrix, cmap=cmap, vmin=0.0, vmax=vmax, aspect="auto", interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xticks(range(n_keys), attention.key_tokens, rotation=90, fontsize=7)
        ax.set_yticks(range(n_queries), attention.query_tokens, fontsize=7)
        bottom = index + ncols >= len(panels)  # no panel below this one
        left = index % ncols == 0
        ax.tick_params(labelbottom=bottom, labelleft=left)
        if left:
            ax.set_ylabel(y_label, fontsize=8)
        if bottom:
            ax.set_xlabel(x_label, fontsize=8)
    fig.colorbar(image, ax=axes.ravel().tolist(), shrink=0.8, label="attention weight")
    fig.suptitle(title, fontsize=10)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Positional encodings


def _sinusoidal_config(d_model: int, layout: str, frequencies: str, offset: int,
                       length: int) -> VanillaTransformerConfig:
    # one head, so that any even d_model is a valid configuration; only the positional options matter here
    return VanillaTransformerConfig(
        d_model=d_model, encoder_attention_heads=1, decoder_attention_heads=1, sinusoidal_layout=layout,
        sinusoidal_frequencies=frequencies, position_offset=offset, max_position_embeddings=length,
    )


def positional_encoding_matrix(
    length: int,
    d_model: int = 512,
    *,
    layout: str = "interleaved",
    frequencies: str = "paper",
    offset: int = 0,
    config: VanillaTransformerConfig | None = None,
    model=None,
) -> np.ndarray:
    """The (length, d_model) matrix the model adds to the embeddings of positions 0 .. length - 1.

    It is computed by the model's own positional module: that of `model`'s encoder when a model is given (learned
    positions included), else the one `config` would build, else that of a config with `d_model`, `layout`,
    `frequencies` and `offset` (see `VanillaTransformerConfig`).
    """
    if length < 1:
        raise ValueError(f"length must be at least 1, got {length}")
    if model is not None:  # the encoder's (or the one stack's) positions
        module = (model.get_encoder() if model.config.is_encoder_decoder else model.model).embed_positions
        like = next(model.parameters())
    else:
        config = config if config is not None else _sinusoidal_config(d_model, layout, frequencies, offset, length)
        if config.position_embedding_type != "sinusoidal":
            raise ValueError("learned position embeddings are weights: pass the trained model (model=...) to see them")
        module = positional_encoding(config)
        like = torch.empty(0)
    offset = (model.config if model is not None else config).position_offset
    with torch.no_grad():
        return first_positions(module, length, like, offset).float().cpu().numpy()  # (L, D)


def plot_positions(
    d_model: int = 128,
    length: int = 100,
    *,
    layout: str = "interleaved",
    frequencies: str = "paper",
    offset: int = 0,
    config: VanillaTransformerConfig | None = None,
    model=None,
    dims: Sequence[int] | None = None,
    figsize: tuple[float, float] = (9.0, 7.0),
    cmap: str = "RdBu_r",
):
    """The positional-encoding matrix (section 3.5) as a heatmap, above the curves of a few of its dimensions.

    Arguments as for `positional_encoding_matrix`. `dims` picks the dimensions drawn as curves (default: the sine
    dimensions of four frequencies, from fast to slow). The heatmap is `fig.axes[0].images[0].get_array()`, rows =
    positions, columns = dimensions. Returns a matplotlib Figure.
    """
    if model is not None:
        config = model.config
    elif config is None:
        config = _sinusoidal_config(d_model, layout, frequencies, offset, length)
    matrix = positional_encoding_matrix(length, config=config, model=model)
    width = matrix.shape[1]
    if dims is None:  # the sines of four frequencies, from fast to slow
        half = width // 2
        frequency_indices = sorted({max(half // 16, 1), max(half // 8, 1), max(half // 4, 1), max(half // 2, 1)})
        concatenated = config.position_embedding_type == "sinusoidal" and config.sinusoidal_layout == "concatenated"
        dims = [i if concatenated else min(2 * i, width - 1) for i in frequency_indices]
    dims = [_check_index(dim, width, "dimension", f"the encoding has {width} dimensions") for dim in dims]
    description = f"{config.position_embedding_type} positions"
    if config.position_embedding_type == "sinusoidal":
        description += f", layout={config.sinusoidal_layout}, frequencies={config.sinusoidal_frequencies}"
    if config.position_offset:
        description += f", offset={config.position_offset}"
    if model is not None:
        description = f"{type(model).__name__}: {description}"

    fig = new_figure(figsize=figsize)
    heat_ax, curve_ax = fig.subplots(2, 1, height_ratios=[3, 2])
    limit = float(np.abs(matrix).max())
    image = heat_ax.imshow(matrix, cmap=cmap, vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
    heat_ax.set_xlabel("embedding dimension")
    heat_ax.set_ylabel("position")
    heat_ax.set_title(f"Positional encoding, d_model={width}, positions 0..{length - 1}\n({description})", fontsize=10)
    fig.colorbar(image, ax=heat_ax, label="value")
    positions = np.arange(length)
    for dim in dims:
        curve_ax.plot(positions, matrix[:, dim], label=f"dim {dim}")
    curve_ax.set_xlabel("position")
    curve_ax.set_ylabel("value")
    curve_ax.set_xlim(0, max(length - 1, 1))
    curve_ax.legend(fontsize=8, loc="upper right", ncols=min(len(dims), 4))
    curve_ax.grid(alpha=0.3)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Training curves


def find_trainer_state(run: str) -> str:
    """The trainer_state.json of a run: `run` itself, `run/trainer_state.json` (a checkpoint folder, or an output
    folder after `trainer.save_state()`), else that of the latest `run/checkpoint-*` folder (transformers'
    `get_last_checkpoint`, as `Trainer` resumes)."""
    if not os.path.exists(run):
        raise FileNotFoundError(f"run folder not found: {run}")
    if os.path.isfile(run):
        return run
    direct = os.path.join(run, "trainer_state.json")
    if os.path.isfile(direct):
        return direct
    latest = get_last_checkpoint(run)
    if latest is None or not os.path.isfile(os.path.join(latest, "trainer_state.json")):
        raise FileNotFoundError(
            f"no trainer_state.json in {run} or in a checkpoint-* folder inside it; Trainer writes one with each "
            "checkpoint and with trainer.save_state()"
        )
    return os.path.join(latest, "trainer_state.json")


def _is_bleu(key: str) -> bool:
    return key.startswith("eval_") and "bleu" in key


def plot_training(run: str, *, metrics: Sequence[str] | None = None, figsize: tuple[float, float] | None = None):
    """Loss, learning rate and evaluation BLEU against the optimisation step, from Trainer's `trainer_state.json`.

    `run` is a Trainer output folder, one of its `checkpoint-*` folders, or the json file itself. `metrics` names
    the evaluation metrics of the last panel (default: every logged `eval_*bleu*`; the panel is left out when
    there is none). Each curve is a `Line2D` of the figure whose data are the logged values. Returns a Figure.
    """
    path = find_trainer_state(run)
    try:
        with open(path, encoding="utf-8") as f:
            history = json.load(f)["log_history"]
    except (json.JSONDecodeError, KeyError, TypeError) as error:
        raise ValueError(f"{path} is not a Trainer state file (no readable log_history): {error}") from None

    def series(key: str) -> tuple[list[int], list[float]]:
        points = [(entry["step"], entry[key]) for entry in history if key in entry and "step" in entry]
        return [p[0] for p in points], [float(p[1]) for p in points]

    logged = {key for entry in history for key in entry}
    if not ({"loss", "eval_loss", "learning_rate"} & logged):
        raise ValueError(f"{path} has no logged loss or learning rate yet (log_history has {len(history)} entries)")
    if metrics is None:
        metrics = sorted(key for key in logged if _is_bleu(key))
    else:
        missing = [m for m in metrics if m not in logged]
        if missing:
            available = sorted(k for k in logged if k.startswith("eval_"))
            raise ValueError(f"metric(s) {missing} not in {path}; logged evaluation values: {available}")

    panels = 2 + bool(metrics)
    fig = new_figure(figsize=figsize or (8.0, 2.6 * panels))
    axes = fig.subplots(panels, 1, sharex=True, squeeze=False)[:, 0]

    ax = axes[0]
    for key, label, style in (("loss", "training loss", "-"), ("eval_loss", "evaluation loss", "o-")):
        steps, values = series(key)
        if steps:
            ax.plot(steps, values, style, label=label, markersize=4)
    ax.set_ylabel("loss")
    ax.legend(fontsize=8)

    ax = axes[1]
    steps, values = series("learning_rate")
    ax.plot(steps, values, "-", color="tab:green", label="learning rate")
    ax.set_ylabel("learning rate")
    ax.ticklabel_format(axis="y", style="sci", scilimits=(-3, 3))

    if metrics:
        ax = axes[2]
        for key in metrics:
            steps, values = series(key)
            ax.plot(steps, values, "o-", label=key.removeprefix("eval_"), markersize=4)
        ax.set_ylabel("BLEU" if all(_is_bleu(m) for m in metrics) else "evaluation metric")
        ax.legend(fontsize=8)
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("step")
    name = os.path.basename(os.path.normpath(os.path.dirname(path)))
    fig.suptitle(f"Training curves: {name}", fontsize=10)
    return fig


# ----------------------------------------------------------------------------------------------------------------
# Saving


def save_figure(fig, out: str, dpi: float = 150) -> None:
    """Write `fig` to `out` (format from the extension); the image is figsize x dpi pixels."""
    folder = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(folder):
        raise FileNotFoundError(f"cannot write {out}: the folder {folder} does not exist")
    fig.savefig(out, dpi=dpi)
