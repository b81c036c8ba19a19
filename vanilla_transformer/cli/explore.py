"""`vanilla-transformer explore`: the attention explorer of a saved model, live, as a page, or as a Hub Space.

    vanilla-transformer explore MODEL [--host 127.0.0.1] [--port 7860]       # a live local app; prints its URL
    vanilla-transformer explore MODEL --html OUT.html --text "..." [--text "..."]
    vanilla-transformer explore MODEL --space DIR [--model-id USER/NAME]

The views are described in `vanilla_transformer.inspect` and docs/explore.md.
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
    parser.add_argument("model", metavar="MODEL", help="folder written by save_pretrained (model + tokenizer)")
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
    parser.add_argument("--device", type=torch_device, help="cpu, cuda, ... (default: cuda when available)")
    return parser


def run(args: argparse.Namespace) -> None:
    """Serve, write the page or write the Space."""
    if args.html and args.space:
        raise UsageError("--html and --space each make one thing: give one of them")
    if args.text and not args.html:
        raise UsageError("--text is for the page: give --html OUT.html too (the live app has its own text box)")
    if args.html and not args.text:
        raise UsageError("--html needs at least one --text sentence")
    if args.model_id and not args.space:
        raise UsageError("--model-id is for --space")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from vanilla_transformer.inspect.app import build_app
    from vanilla_transformer.inspect.data import attention_data
    from vanilla_transformer.inspect.page import write_html
    from vanilla_transformer.inspect.space import write_space

    if args.html:  # validate before the (slow) model run
        folder = os.path.dirname(os.path.abspath(args.html))
        if not os.path.isdir(folder):
            raise FileNotFoundError(f"cannot write {args.html}: the folder {folder} does not exist")
    if args.space:
        out = write_space(args.model, args.space, model_id=args.model_id)
        print(f"Wrote the Space folder {out}; publish it with huggingface_hub.upload_folder(folder_path="
              f"{out!r}, repo_id='USER/NAME', repo_type='space')")
        return
    model, tokenizer = load_model_and_tokenizer(args.model, args.device)
    if args.html:
        data = [attention_data(model, tokenizer, text) for text in args.text]
        write_html(args.html, data)
        print(f"Wrote {args.html} ({os.path.getsize(args.html) / 1e6:.2f} MB, {len(data)} sentence(s)); "
              "it opens offline in any browser")
        return
    app = build_app(model, tokenizer)
    app.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, quiet=True)
    print(f"Attention explorer running on {app.local_url} (Ctrl+C stops it)", flush=True)
    try:
        app.block_thread()
    except KeyboardInterrupt:
        pass


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
