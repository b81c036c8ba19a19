"""`vanilla-transformer serve`: a LibreTranslate-compatible HTTP server over a saved model folder.

    vanilla-transformer serve outputs/multi30k-ct2 --port 5000
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Zwei Hunde spielen im Schnee.", "source": "de", "target": "en"}'

MODEL is a folder written by save_pretrained (PyTorch) or by `vanilla-transformer export ctranslate2` (faster).
Its languages come from its model card (README.md), or --source-lang/--target-lang. Concurrent requests are
batched for the engine (--max-batch-tokens, --batch-wait-ms). SIGTERM or Ctrl-C stops accepting, answers the
requests in flight and exits 0. The guide is docs/serve.md.
"""

import argparse
import logging

from vanilla_transformer.cli.options import (
    UsageError,
    checked,
    existing_file,
    non_negative_int,
    positive_float,
    positive_int,
)


def add_parser(subparsers) -> argparse.ArgumentParser:
    from vanilla_transformer.checkpoints import ENGINES
    from vanilla_transformer.serve.settings import ServeSettings

    defaults = ServeSettings()  # the server's own defaults, shown by --help

    parser = subparsers.add_parser(
        "serve",
        help="serve a saved model over HTTP (LibreTranslate's API, with dynamic batching)",
        description=__doc__.split("\n\n")[0].split(": ", 1)[1],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("model", metavar="MODEL", help="saved model folder (PyTorch) or CTranslate2 export")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1)")
    parser.add_argument("--port", action=checked(non_negative_int), default=5000,
                        help="port to listen on (default 5000; 0 picks a free one)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="pytorch or ctranslate2 (default: what the folder holds)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--compute-type", default="default", help="CTranslate2 only: int8, float32, ...")
    parser.add_argument("--num-beams", action=checked(positive_int),
                        help="beam size (default: the model's generation_config)")
    parser.add_argument("--source-lang", help="the model's source language code (default: from its model card)")
    parser.add_argument("--target-lang", help="the model's target language code (default: from its model card)")
    limits = parser.add_argument_group("limits")
    limits.add_argument("--char-limit", action=checked(positive_int), default=defaults.char_limit,
                        help="most characters of q per request (default %(default)s)")
    limits.add_argument("--batch-limit", action=checked(positive_int), default=defaults.batch_limit,
                        help="most texts in a q list (default %(default)s)")
    limits.add_argument("--body-limit", action=checked(positive_int), default=defaults.body_limit,
                        help="most bytes of a request body (default %(default)s)")
    limits.add_argument("--timeout", action=checked(positive_float), default=defaults.timeout,
                        help="seconds a request may wait for its translation before a 503 (default %(default)g)")
    limits.add_argument("--req-limit", action=checked(positive_int),
                        help="most /translate requests per minute per client address (default: no limit)")
    limits.add_argument("--api-keys", metavar="FILE", action=checked(existing_file),
                        help="file of API keys, one a line: /translate then needs api_key")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--max-batch-tokens", action=checked(positive_int), default=defaults.max_batch_tokens,
                          help="most source tokens in one engine call (default %(default)s)")
    batching.add_argument("--batch-wait-ms", action=checked(positive_float), default=defaults.batch_wait_ms,
                          help="how long to wait for more sentences to batch (default %(default)g ms)")
    batching.add_argument("--no-batching", action="store_true", help="one sentence per engine call")
    parser.add_argument("--workers", action=checked(positive_int), default=1,
                        help="server processes sharing the address, each with its own copy of the model (default 1)")
    parser.add_argument("--no-cors", action="store_true", help="send no CORS headers (browsers of other origins "
                                                               "cannot call the server)")
    parser.add_argument("--log-texts", action="store_true", help="log the texts of each request (default: sizes)")
    return parser


def settings_from_args(args: argparse.Namespace):
    from vanilla_transformer.serve.limits import read_api_keys
    from vanilla_transformer.serve.settings import ServeSettings

    return ServeSettings(char_limit=args.char_limit, batch_limit=args.batch_limit, body_limit=args.body_limit,
                         timeout=args.timeout, req_limit=args.req_limit,
                         api_keys=read_api_keys(args.api_keys) if args.api_keys else None,
                         max_batch_tokens=args.max_batch_tokens, batch_wait_ms=args.batch_wait_ms,
                         batching=not args.no_batching, cors=not args.no_cors, log_texts=args.log_texts)


def check(args: argparse.Namespace) -> None:
    if args.workers > 1 and args.port == 0:
        raise UsageError("--workers needs a --port of its own (0 picks one per process)")


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.extras import check_extra

    check_extra(["fastapi", "sentencex", "uvicorn"], "serve", "Serving")
    from vanilla_transformer.serve.app import create_app
    from vanilla_transformer.serve.engine import TranslationEngine
    from vanilla_transformer.serve.server import listening_socket, serve
    from vanilla_transformer.serve.workers import serve_workers

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = settings_from_args(args)
    listening_socket(args.host, args.port).close()  # a taken port fails now, not after loading the model
    options = dict(path=args.model, source_lang=args.source_lang, target_lang=args.target_lang, engine=args.engine,
                   device=args.device, compute_type=args.compute_type,
                   **({"num_beams": args.num_beams} if args.num_beams else {}))
    engine = TranslationEngine(**options)  # loaded here first: a bad folder or option fails before any worker
    if args.workers > 1:
        del engine
        serve_workers(options, settings, args.host, args.port, args.workers, graceful_s=args.timeout + 5)
    else:
        serve(create_app(engine, settings), args.host, args.port, graceful_s=args.timeout + 5)
