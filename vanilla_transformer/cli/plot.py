"""`vanilla-transformer plot {attention,positions,training}`: draw a picture of what the model does and save it.

    vanilla-transformer plot attention --model DIR --text "two hundred and five" --kind cross --head all --out attn.png
    vanilla-transformer plot positions --d-model 128 --length 100 --out positions.png
    vanilla-transformer plot training --run OUTPUT_DIR --out training.png

The pictures are drawn by `vanilla_transformer.inspect.plots` (matplotlib: pip install "vanilla-transformer[plot]").
"""

import argparse
import os

from vanilla_transformer.cli.options import UsageError, checked, positive_float, positive_int, torch_device


def _head(value: str) -> int | str:
    if value in ("all", "mean"):
        return value
    try:
        return int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{value!r} is not a head index, 'all' or 'mean'") from None


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, metavar="FILE", help="image to write (.png, .svg, .pdf, ...)")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing --out file")
    parser.add_argument("--dpi", action=checked(positive_float), default=150, help="pixels per inch (default 150)")
    parser.add_argument("--figsize", action=checked(positive_float), nargs=2, metavar=("W", "H"),
                        help="figure size in inches")


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.inspect import ATTENTION_KINDS

    plot = subparsers.add_parser("plot", help="draw attention maps, positional encodings or training curves",
                                 description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    pictures = plot.add_subparsers(dest="picture", required=True)

    parser = pictures.add_parser("attention", help="attention heatmaps of a saved model for one sentence",
                                 description="Heatmap(s) of one layer's attention with the subword tokens as axis "
                                             "labels.")
    parser.add_argument("--model", required=True, metavar="DIR",
                        help="folder written by save_pretrained (model + tokenizer)")
    parser.add_argument("--text", required=True, help="source sentence (a decoder-only model's prompt)")
    parser.add_argument("--target", help="target sentence (default: the model's own translation, or a decoder-only "
                                         "model's own continuation)")
    parser.add_argument("--kind", choices=ATTENTION_KINDS, default="cross",
                        help="cross = decoder over source (default), encoder / decoder = self-attention")
    parser.add_argument("--layer", type=int, default=-1,
                        help="layer index from 0; negative counts from the last (default -1)")
    parser.add_argument("--head", type=_head, default="all", help="head index from 0, 'all' (grid, default) or 'mean'")
    parser.add_argument("--num-beams", action=checked(positive_int),
                        help="beam size when translating (default: the model's generation_config)")
    parser.add_argument("--max-new-tokens", action=checked(positive_int), help="longest translation when translating")
    parser.add_argument("--device", action=checked(torch_device), help="cpu, cuda, ... (default: cuda when available)")
    _add_output_arguments(parser)
    parser.set_defaults(draw=_attention, command_parser=parser)

    parser = pictures.add_parser("positions", help="the positional-encoding matrix as the model computes it",
                                 description="The positional-encoding matrix (section 3.5) as a heatmap, above the "
                                             "curves of a few of its dimensions.")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--d-model", action=checked(positive_int), default=128,
                        help="width of the encoding (default 128)")
    source.add_argument("--model", metavar="DIR",
                        help="draw this saved model's positional encoding instead (learned too)")
    parser.add_argument("--length", action=checked(positive_int), default=100,
                        help="number of positions (default 100)")
    # the values of --layout and --frequencies are the configuration's (checked in _positions, where it is loaded)
    parser.add_argument("--layout",
                        help="interleaved = sin/cos alternating as in the paper (default); concatenated = sines, then "
                             "cosines (tensor2tensor, Marian, fairseq)")
    parser.add_argument("--frequencies",
                        help="wavelengths 10000^(2i/d_model) (paper, default) or 10000^(i/(d_model/2-1)) "
                             "(tensor2tensor)")
    parser.add_argument("--offset", type=int, help="added to every position (default 0; fairseq: pad id + 1)")
    parser.add_argument("--dims", type=int, nargs="+", help="dimensions to draw as curves")
    _add_output_arguments(parser)
    parser.set_defaults(draw=_positions, command_parser=parser)

    parser = pictures.add_parser("training", help="loss, learning rate and BLEU against step from trainer_state.json",
                                 description="Loss, learning rate and evaluation BLEU against the optimisation step, "
                                             "from Trainer's trainer_state.json.")
    parser.add_argument("--run", required=True, metavar="DIR",
                        help="Trainer output folder, a checkpoint-* folder in it, or a trainer_state.json")
    parser.add_argument("--metric", action="append", dest="metrics", metavar="NAME",
                        help="evaluation metric for the last panel, e.g. eval_bleu (repeatable; default: BLEU)")
    _add_output_arguments(parser)
    parser.set_defaults(draw=_training, command_parser=parser)
    return plot


def run(args: argparse.Namespace) -> None:
    """Draw and save; a user error (bad path, unknown layer, missing matplotlib) is one line on stderr, exit 1."""
    from vanilla_transformer.files.paths import check_output_file
    from vanilla_transformer.files.staging import staged_file
    from vanilla_transformer.inspect.plots import new_figure

    inputs = [getattr(args, name, None) for name in ("model", "run")]
    check_output_file(args.out, inputs=inputs, what="--out", overwrite=args.overwrite)  # before any work
    new_figure()  # fail before loading a model when matplotlib is missing
    fig = args.draw(args)
    image_format = os.path.splitext(args.out)[1][1:].lower() or None  # None: matplotlib's default, png
    with staged_file(args.out, inputs=inputs, what="--out", overwrite=args.overwrite, encoding=None) as f:
        fig.savefig(f, dpi=args.dpi, format=image_format)
    width, height = fig.get_size_inches() * args.dpi
    print(f"Wrote {args.out} ({round(width)}x{round(height)} pixels)")


def _figsize(args: argparse.Namespace) -> tuple[float, float] | None:
    return tuple(args.figsize) if args.figsize else None


def _attention(args: argparse.Namespace):
    from vanilla_transformer.checkpoints.kinds import PYTORCH_KINDS
    from vanilla_transformer.checkpoints.load import load_checkpoint
    from vanilla_transformer.inspect.plots import plot_attention

    loaded = load_checkpoint(args.model, kinds=PYTORCH_KINDS, device=args.device, purpose="plot attention")
    generate_kwargs = {name: getattr(args, name) for name in ("num_beams", "max_new_tokens")
                       if getattr(args, name) is not None}
    return plot_attention(loaded.model, loaded.tokenizer, args.text, args.target, kind=args.kind, layer=args.layer,
                          head=args.head, generate_kwargs=generate_kwargs, figsize=_figsize(args))


def _positions(args: argparse.Namespace):
    from vanilla_transformer.checkpoints.kinds import PYTORCH_KINDS
    from vanilla_transformer.checkpoints.load import load_checkpoint
    from vanilla_transformer.configuration_vanilla_transformer import SINUSOIDAL_FREQUENCIES, SINUSOIDAL_LAYOUTS
    from vanilla_transformer.inspect.plots import plot_positions

    for option, allowed in (("layout", SINUSOIDAL_LAYOUTS), ("frequencies", SINUSOIDAL_FREQUENCIES)):
        if getattr(args, option) is not None and getattr(args, option) not in allowed:
            raise UsageError(f"--{option} must be one of {', '.join(allowed)}, got {getattr(args, option)!r}")
    options = {name: getattr(args, name) for name in ("layout", "frequencies", "offset")
               if getattr(args, name) is not None}
    model = None
    if args.model:
        if options:
            raise ValueError(f"--{'/--'.join(options)} come from the model's config when --model is given")
        model = load_checkpoint(args.model, kinds=PYTORCH_KINDS, device="cpu", need_tokenizer=False,
                                purpose="plot positions").model
    return plot_positions(args.d_model, args.length, model=model, dims=args.dims, **options,
                          **({"figsize": _figsize(args)} if args.figsize else {}))


def _training(args: argparse.Namespace):
    from vanilla_transformer.inspect.plots import plot_training

    return plot_training(args.run, metrics=args.metrics, figsize=_figsize(args))
