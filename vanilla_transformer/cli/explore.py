"""`vanilla-transformer explore`: the attention explorer of a saved model, live, as a page, or as a Hub Space.

    vanilla-transformer explore MODEL [--host 127.0.0.1] [--port 7860]       # a live local app; prints its URL
    vanilla-transformer explore MODEL --html OUT.html --text "..." [--text "..."]
    vanilla-transformer explore MODEL --space DIR [--model-id USER/NAME]
    vanilla-transformer explore RUN_DIR --training [--html OUT.html]      # how a training run learned

The views are described in `vanilla_transformer.inspect` and docs/explore.md; the training view replays the
recordings a run made with --watch_steps (the demo preset records by default).
"""

import argparse
import os

from vanilla_transformer.cli.options import UsageError, checked, torch_device


def _port(text: str) -> int:
    value = int(text) if text.strip().lstrip("-").isdigit() else None
    if value is None or not 0 < value < 65536:
        raise argparse.ArgumentTypeError(f"must be between 1 and 65535, got {text}")
    return value


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "explore", help="interactive attention explorer: live app, offline page or Hub Space",
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("model", metavar="MODEL", help="folder written by save_pretrained (model + tokenizer); with "
                                                       "--training, a training run's --output_dir")
    parser.add_argument("--training", action="store_true",
                        help="the training view: how the run in MODEL learned, from its watch/ recordings (live app, "
                             "or --html)")
    live = parser.add_argument_group("live app (the default)")
    live.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    live.add_argument("--port", action=checked(_port), default=7860, help="port (default 7860)")
    page = parser.add_argument_group("static page")
    page.add_argument("--html", metavar="OUT.html", help="write one self-contained page instead of serving")
    page.add_argument("--text", action="append", metavar="TEXT", help="a sentence for the page (repeatable)")
    space = parser.add_argument_group("Hugging Face Space")
    space.add_argument("--space", metavar="DIR", help="write a Space folder (app.py, README.md, requirements.txt, "
                                                      "the model) instead of serving")
    space.add_argument("--model-id", metavar="ID", help="the Space loads this Hub model id instead of a copy of MODEL")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing --html file, or a --space folder this project wrote")
    parser.add_argument("--device", type=torch_device, help="cpu, cuda, ... (default: cuda when available)")
    return parser


def check(args: argparse.Namespace) -> None:
    """The options of one of the three outputs: the live app, the page or the Space."""
    if args.training and (args.space or args.text):
        dropped = "--space" if args.space else "--text"
        raise UsageError(f"--training shows the sentences the run recorded: drop {dropped}")
    if args.html and args.space:
        raise UsageError("--html and --space each make one thing: give one of them")
    if args.text and not args.html:
        raise UsageError("--text is for the page: give --html OUT.html too (the live app has its own text box)")
    if args.html and not args.text and not args.training:
        raise UsageError("--html needs at least one --text sentence")
    if args.model_id and not args.space:
        raise UsageError("--model-id is for --space")
    if args.overwrite and not (args.html or args.space):
        raise UsageError("--overwrite is for --html or --space (the live app writes nothing)")


def run(args: argparse.Namespace) -> None:
    """Serve, write the page or write the Space."""
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from vanilla_transformer.files.staging import staged_file
    from vanilla_transformer.inspect.app import build_app
    from vanilla_transformer.inspect.data import attention_data
    from vanilla_transformer.inspect.page import render_page

    _check_outputs(args)  # before the (slow) model run
    if args.training:
        return _run_training_view(args)
    if args.space:
        out = _write_space(args)
        print(f"Wrote the Space folder {out}; publish it with huggingface_hub.upload_folder(folder_path="
              f"{out!r}, repo_id='USER/NAME', repo_type='space')")
        return
    model, tokenizer = load_model_and_tokenizer(args.model, args.device)
    if args.html:
        data = [attention_data(model, tokenizer, text) for text in args.text]
        with staged_file(args.html, inputs=_local(args.model), what="--html", overwrite=args.overwrite) as f:
            f.write(render_page(data))
        print(f"Wrote {args.html} ({os.path.getsize(args.html) / 1e6:.2f} MB, {len(data)} sentence(s)); "
              "it opens offline in any browser")
        return
    _serve(build_app(model, tokenizer), args)


def _run_training_view(args: argparse.Namespace) -> None:
    """The training view of the run folder MODEL: the page, or the live app."""
    from vanilla_transformer.files.staging import staged_file
    from vanilla_transformer.inspect.app import build_training_app
    from vanilla_transformer.inspect.training_view import render_training_page, training_data

    if args.html:
        data = training_data(args.model)
        with staged_file(args.html, inputs=_local(args.model), what="--html", overwrite=args.overwrite) as f:
            f.write(render_training_page(data))
        print(f"Wrote {args.html} ({os.path.getsize(args.html) / 1e6:.2f} MB, {len(data['recordings'])} recorded "
              f"steps, {len(data['sentences'])} sentence(s)); it opens offline in any browser")
        return
    training_data(args.model)  # a folder without recordings is one line now, not an error in the browser
    _serve(build_training_app(args.model), args, what="Training view")


def _serve(app, args: argparse.Namespace, what: str = "Attention explorer") -> None:
    app.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, quiet=True)
    print(f"{what} running on {app.local_url} (Ctrl+C stops it)", flush=True)
    try:
        app.block_thread()
    except KeyboardInterrupt:
        pass


def _check_outputs(args: argparse.Namespace) -> None:
    """--html and --space must not replace or lie inside MODEL, nor replace an existing file or folder without
    --overwrite (and then only a folder this project wrote): `files.paths`' rule, before any work (an
    `OutputError`, one line, exit status 1)."""
    from vanilla_transformer.files.paths import check_output_file, check_output_folder

    if args.html:
        check_output_file(args.html, inputs=_local(args.model), what="--html", overwrite=args.overwrite)
    if args.space:
        check_output_folder(args.space, overwrite=args.overwrite, inputs=_local(args.model))


def _write_space(args: argparse.Namespace) -> str:
    """The Space folder, written whole through `files.staging.staged_folder` (a full disk or a read-only place is
    one line naming --space)."""
    from vanilla_transformer.files.staging import staged_folder
    from vanilla_transformer.inspect.space import write_space

    with staged_folder(args.space, overwrite=args.overwrite, inputs=_local(args.model)) as folder:
        write_space(args.model, folder, model_id=args.model_id)
    return args.space


def _local(model: str) -> list[str]:
    """MODEL as an input path when it is a local file or folder (not a Hub id)."""
    return [model] if os.path.exists(model) else []


def load_model_and_tokenizer(path: str, device: str | None):
    """The saved model (any of the three configurations) and its tokenizer, through the one loader; a CTranslate2
    export is refused with one line (it exposes no per-head attention)."""
    from vanilla_transformer.checkpoints.kinds import PYTORCH_KINDS, folder_kind
    from vanilla_transformer.checkpoints.load import load_checkpoint

    if folder_kind(path) == "ctranslate2":
        raise ValueError(f"{path} is a CTranslate2 folder: it exposes no per-head attention; explore the PyTorch "
                         "checkpoint it was exported from")
    loaded = load_checkpoint(path, kinds=PYTORCH_KINDS, device=device, purpose="explore")
    return loaded.model, loaded.tokenizer
