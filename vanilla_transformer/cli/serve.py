"""`vanilla-transformer serve`: a LibreTranslate-compatible HTTP server over saved model folders.

    vanilla-transformer serve outputs/de-en-ct2 outputs/en-fr-ct2 --port 5000
    curl -s localhost:5000/translate -H 'Content-Type: application/json' \\
        -d '{"q": "Zwei Hunde spielen im Schnee.", "source": "auto", "target": "fr"}'

Each MODEL is a folder written by save_pretrained (PyTorch) or by `vanilla-transformer export ctranslate2`
(faster), one language pair each, or a folder of such folders. The languages come from each model card (README.md)
or export, or --source-lang/--target-lang for a single model. A pair no model translates goes through a pivot
language where models chain (de -> en -> fr above). Concurrent requests are batched for each engine
(--max-batch-tokens, --batch-wait-ms). SIGTERM or Ctrl-C stops accepting, answers the requests in flight and exits
0. The guide is docs/serve.md.
"""

import argparse
import ipaddress
import logging
import os

from vanilla_transformer.cli.options import UsageError, checked, existing_file, in_range

# the largest values the options take: beyond them a server would run out of memory or never answer, so a typo
# (an extra zero, "inf") is a usage error at start rather than a server that breaks under its first requests
MOST_BEAMS = 64
MOST_TEXTS = 100_000  # --char-limit, --batch-limit, --req-limit, --max-batch-tokens: ten million, a million
MOST_BODY_BYTES = 1 << 30
MOST_SECONDS = 24 * 3600.0  # --timeout
MOST_BATCH_WAIT_MS = 60_000.0
MOST_WORKERS = 256


def host_address(text: str) -> str:
    """An address to listen on: a name or an IP address, not empty ("" would listen on every interface)."""
    if not text or not text.isprintable() or any(character.isspace() for character in text):
        raise argparse.ArgumentTypeError(f"must be a host name or an IP address (0.0.0.0 for every interface), "
                                         f"got {text!r}")
    return text


def proxy_addresses(text: str) -> str:
    """--forwarded-allow-ips: comma-separated IP addresses or networks (10.0.0.0/8), or "*" for every client."""
    items = [item.strip() for item in text.split(",")]
    for item in items:
        if item != "*":
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise argparse.ArgumentTypeError(f"must be IP addresses or networks separated by commas, or *; "
                                                 f"{item!r} is neither") from None
    return ",".join(items)


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
    parser.add_argument("models", metavar="MODEL", nargs="+",
                        help="saved model folder (PyTorch) or CTranslate2 export, one language pair each, or a folder "
                             "of them")
    parser.add_argument("--host", action=checked(host_address), default="127.0.0.1",
                        help="address to listen on (default 127.0.0.1; 0.0.0.0 for every interface)")
    parser.add_argument("--port", action=checked(in_range(int, 0, 65535)), default=5000,
                        help="port to listen on (default 5000; 0 picks a free one)")
    parser.add_argument("--engine", choices=ENGINES, default="auto",
                        help="pytorch or ctranslate2 (default: what the folder holds)")
    parser.add_argument("--device", help="cpu, cuda, cuda:1, ... (default: cuda when available)")
    parser.add_argument("--compute-type", default="default", help="CTranslate2 only: int8, float32, ...")
    parser.add_argument("--num-beams", action=checked(in_range(int, 1, MOST_BEAMS)),
                        help="beam size (default: the model's generation_config)")
    parser.add_argument("--no-recase", action="store_true",
                        help="translate ALL-CAPS and Title Case sentences as written (by default they are recased "
                             "for the model and their translations given their case)")
    parser.add_argument("--source-lang", help="the model's source language code, for a single MODEL (default: from "
                                              "its model card or export)")
    parser.add_argument("--target-lang", help="the model's target language code, for a single MODEL (default: from "
                                              "its model card or export)")
    limits = parser.add_argument_group("limits")
    limits.add_argument("--char-limit", action=checked(in_range(int, 1, 100 * MOST_TEXTS)), default=defaults.char_limit,
                        help="most characters of q per request (default %(default)s)")
    limits.add_argument("--batch-limit", action=checked(in_range(int, 1, MOST_TEXTS)), default=defaults.batch_limit,
                        help="most texts in a q list (default %(default)s)")
    limits.add_argument("--body-limit", action=checked(in_range(int, 1, MOST_BODY_BYTES)), default=defaults.body_limit,
                        help="most bytes of a request body (default %(default)s)")
    limits.add_argument("--timeout", action=checked(in_range(float, 0.001, MOST_SECONDS)), default=defaults.timeout,
                        help="seconds a request may wait for its translation before a 503 (default %(default)g)")
    limits.add_argument("--read-timeout", action=checked(in_range(float, 0.001, MOST_SECONDS)),
                        default=defaults.read_timeout,
                        help="seconds a client may take to send one request, headers and body, before a 408 "
                             "(default %(default)g)")
    limits.add_argument("--connections-per-client", action=checked(in_range(int, 0, 10 * MOST_TEXTS)),
                        default=defaults.connections_per_client,
                        help="most connections one client address may hold open at once; another gets 429 (0: no "
                             "limit; no limit behind --forwarded-allow-ips, where every connection is the proxy's; "
                             "default %(default)s)")
    limits.add_argument("--req-limit", action=checked(in_range(int, 1, 10 * MOST_TEXTS)),
                        help="most /translate requests per minute per client address (default: no limit)")
    limits.add_argument("--api-keys", metavar="FILE", action=checked(existing_file),
                        help="file of API keys, one a line: /translate (api_key) and /metrics then need one")
    limits.add_argument("--alternatives-limit", action=checked(in_range(int, 0, MOST_BEAMS - 1)),
                        default=defaults.alternatives_limit,
                        help="most alternatives a /translate request may ask for (default %(default)s)")
    limits.add_argument("--forwarded-allow-ips", metavar="ADDRESSES", action=checked(proxy_addresses),
                        help="proxies whose X-Forwarded-For gives the client's address (for --req-limit and the "
                             "log): IP addresses or networks separated by commas, or * (default: trust no proxy "
                             "header)")
    batching = parser.add_argument_group("batching")
    batching.add_argument("--max-batch-tokens", action=checked(in_range(int, 1, 10 * MOST_TEXTS)),
                          default=defaults.max_batch_tokens,
                          help="most source tokens in one engine call (default %(default)s)")
    batching.add_argument("--batch-wait-ms", action=checked(in_range(float, 0, MOST_BATCH_WAIT_MS)),
                          default=defaults.batch_wait_ms,
                          help="how long to wait for more sentences to batch (default %(default)g ms)")
    batching.add_argument("--no-batching", action="store_true", help="one sentence per engine call")
    parser.add_argument("--workers", action=checked(in_range(int, 1, MOST_WORKERS)), default=1,
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
                         batching=not args.no_batching, cors=not args.no_cors, log_texts=args.log_texts,
                         alternatives_limit=args.alternatives_limit, read_timeout=args.read_timeout,
                         connections_per_client=args.connections_per_client or None)


def check(args: argparse.Namespace) -> None:
    if len(args.models) > 1 and (args.source_lang or args.target_lang):
        raise UsageError("--source-lang and --target-lang name the languages of a single MODEL; with several, each "
                         "says its own (its model card, or the languages its CTranslate2 export recorded)")
    if args.workers > 1 and args.port == 0:
        raise UsageError("--workers needs a --port of its own (0 picks one per process)")
    if args.batch_wait_ms >= args.timeout * 1000:
        raise UsageError(f"--batch-wait-ms {args.batch_wait_ms:g} is not shorter than --timeout {args.timeout:g} s: "
                         "every request would time out waiting for its batch")


def run(args: argparse.Namespace) -> None:
    from vanilla_transformer.extras import check_extra

    check_extra(["fastapi", "sentencex", "uvicorn", "py3langid"], "serve", "Serving")
    from vanilla_transformer.serve.app import create_app
    from vanilla_transformer.serve.engine import TranslationEngine
    from vanilla_transformer.serve.server import connection_limits, listening_socket, serve
    from vanilla_transformer.serve.workers import serve_workers

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    settings = settings_from_args(args)
    listening_socket(args.host, args.port).close()  # a taken port fails now, not after loading the model
    options = [dict(path=path, source_lang=args.source_lang, target_lang=args.target_lang, engine=args.engine,
                    device=args.device, compute_type=args.compute_type, recase=not args.no_recase,
                    **({"num_beams": args.num_beams} if args.num_beams else {}))
               for path in model_folders(args.models)]
    # loaded here first: a bad folder or option fails before any worker, two folders of one pair before serving
    engines = [TranslationEngine(**engine_options) for engine_options in options]
    app = create_app(engines, settings)
    if args.workers > 1:
        del engines, app
        serve_workers(options, settings, args.host, args.port, args.workers, graceful_s=args.timeout + 5,
                      forwarded_allow_ips=args.forwarded_allow_ips)
    else:
        serve(app, args.host, args.port, graceful_s=args.timeout + 5, forwarded_allow_ips=args.forwarded_allow_ips,
              limits=connection_limits(settings, args.forwarded_allow_ips))


def model_folders(paths: list[str]) -> list[str]:
    """The model folders of MODEL arguments: each that is a model folder itself (config.json in it), and the model
    folders directly inside each that is not (a folder of model folders, in name order); a ValueError naming a
    folder that holds neither. One folder named twice (`m`, `m/`, `./m`, a link to it, or also inside a folder of
    model folders) is served once."""
    folders = []
    for path in paths:
        if not os.path.isdir(path) or os.path.isfile(os.path.join(path, "config.json")):
            folders.append(path)  # the engine says what is wrong with a folder that is not a model's
            continue
        inside = sorted(entry.path for entry in os.scandir(path)
                        if entry.is_dir() and os.path.isfile(os.path.join(entry.path, "config.json")))
        if not inside:
            raise ValueError(f"{path} is neither a model folder (no config.json) nor a folder of model folders")
        folders.extend(inside)
    first = {}  # each folder once, where it first came
    for folder in folders:
        first.setdefault(os.path.realpath(folder), folder)
    return list(first.values())
