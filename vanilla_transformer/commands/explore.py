"""`vanilla-transformer explore`: the attention explorer of a saved model, live, as a page, or as a Hub Space.

    vanilla-transformer explore MODEL [--host 127.0.0.1] [--port 7860]       # a live local app; prints its URL
    vanilla-transformer explore MODEL --html OUT.html --text "..." [--text "..."]
    vanilla-transformer explore MODEL --space DIR [--model-id USER/NAME]

The views are described in `vanilla_transformer.explore` and docs/explore.md.
"""

import argparse
import os
import sys


def add_parser(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "explore", help="interactive attention explorer: live app, offline page or Hub Space",
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]))
    parser.add_argument("model", metavar="MODEL", help="folder written by save_pretrained (model + tokenizer)")
    live = parser.add_argument_group("live app (the default)")
    live.add_argument("--host", default="127.0.0.1", help="address to serve on (default 127.0.0.1: this machine only)")
    live.add_argument("--port", type=int, default=7860, help="port (default 7860)")
    page = parser.add_argument_group("static page")
    page.add_argument("--html", metavar="OUT.html", help="write one self-contained page instead of serving")
    page.add_argument("--text", action="append", metavar="TEXT", help="a sentence for the page (repeatable)")
    space = parser.add_argument_group("Hugging Face Space")
    space.add_argument("--space", metavar="DIR", help="write a Space folder (app.py, README.md, requirements.txt, "
                                                      "the model) instead of serving")
    space.add_argument("--model-id", metavar="ID", help="the Space loads this Hub model id instead of a copy of MODEL")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    parser.set_defaults(func=run, parser=parser)
    return parser


def run(args: argparse.Namespace) -> None:
    """Serve, write the page or write the Space; a user error is one line on stderr (exit status 1)."""
    parser = args.parser
    if args.html and args.space:
        parser.error("--html and --space each make one thing: give one of them")
    if args.text and not args.html:
        parser.error("--text is for the page: give --html OUT.html too (the live app has its own text box)")
    if args.html and not args.text:
        parser.error("--html needs at least one --text sentence")
    if args.model_id and not args.space:
        parser.error("--model-id is for --space")
    if not 0 < args.port < 65536:
        parser.error(f"--port must be between 1 and 65535, got {args.port}")
    os.environ.setdefault("GRADIO_ANALYTICS_ENABLED", "False")
    from transformers.utils import logging as hf_logging

    from .. import explore

    hf_logging.disable_progress_bar()  # no "Loading weights" bar from from_pretrained
    try:
        if args.html:  # validate before the (slow) model run
            folder = os.path.dirname(os.path.abspath(args.html))
            if not os.path.isdir(folder):
                raise FileNotFoundError(f"cannot write {args.html}: the folder {folder} does not exist")
        if args.space:
            out = explore.write_space(args.model, args.space, model_id=args.model_id)
            print(f"Wrote the Space folder {out}; publish it with huggingface_hub.upload_folder(folder_path="
                  f"{out!r}, repo_id='USER/NAME', repo_type='space')")
            return
        model, tokenizer = _load_model_and_tokenizer(args.model, args.device)
        if args.html:
            data = [explore.attention_data(model, tokenizer, text) for text in args.text]
            explore.write_html(args.html, data)
            print(f"Wrote {args.html} ({os.path.getsize(args.html) / 1e6:.2f} MB, {len(data)} sentence(s)); "
                  "it opens offline in any browser")
            return
        app = explore.build_app(model, tokenizer)
        app.launch(server_name=args.host, server_port=args.port, prevent_thread_lock=True, quiet=True)
    except (ImportError, OSError, ValueError) as error:
        sys.exit(f"{parser.prog}: error: {' '.join(str(error).split())}")
    print(f"Attention explorer running on {app.local_url} (Ctrl+C stops it)", flush=True)
    try:
        app.block_thread()
    except KeyboardInterrupt:
        pass


def _load_model_and_tokenizer(path: str, device: str | None):
    """The saved model (any of the three configurations) and its tokenizer; a folder that is missing, not a whole
    checkpoint, or a CTranslate2 export is refused with one line (ValueError / FileNotFoundError)."""
    from ..checkpoint import check_checkpoint
    from ..export import is_ctranslate2_folder
    from ..visualize import _load_any_model_and_tokenizer

    if not os.path.exists(path):
        raise FileNotFoundError(f"model folder not found: {path}")
    if os.path.isdir(path) and is_ctranslate2_folder(path):
        raise ValueError(f"{path} is a CTranslate2 folder: it exposes no per-head attention; explore the PyTorch "
                         "checkpoint it was exported from")
    check_checkpoint(path, need_tokenizer=True)
    return _load_any_model_and_tokenizer(path, device)
