"""Several server processes on one address: `vanilla-transformer serve MODEL --workers N`.

uvicorn's supervisor binds the address once and starts N worker processes that share it (the kernel spreads the
connections over them); each worker builds its own app with `app_from_environment`, from the description
`serve_workers` leaves in the environment variable `SPEC_VARIABLE` (a worker is a fresh interpreter). Each worker
loads its own copy of the models and batches its own requests; the translated files of /translate_file are kept in
one folder for all of them, so that a download reaches its file whichever worker the kernel hands it to. SIGTERM
to the supervisor stops the workers, each answering its requests in flight first.
"""

import dataclasses
import json
import logging
import os
import shutil
import tempfile

from vanilla_transformer.serve.app import create_app
from vanilla_transformer.serve.engine import TranslationEngine
from vanilla_transformer.serve.server import connection_limits, uvicorn_options
from vanilla_transformer.serve.settings import ServeSettings

SPEC_VARIABLE = "VANILLA_TRANSFORMER_SERVE_SPEC"
# uvicorn pickles its configuration for each worker: the HTTP protocol is named by this module's attribute
PROTOCOL_NAME = "HTTPProtocol"


def spec_from_environment() -> tuple[list[dict], ServeSettings, str | None]:
    """The engines' options, the settings and the trusted proxies `serve_workers` left in `SPEC_VARIABLE`."""
    spec = json.loads(os.environ[SPEC_VARIABLE])
    settings = spec["settings"]
    if settings["api_keys"] is not None:
        settings["api_keys"] = frozenset(settings["api_keys"])
    return spec["engines"], ServeSettings(**settings), spec["forwarded_allow_ips"]


def app_from_environment():
    """The app described by `SPEC_VARIABLE`: uvicorn's factory in each worker process."""
    if not logging.getLogger().handlers:  # a spawned worker: log as the command does
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s [%(process)d] %(message)s")
    engines, settings, _ = spec_from_environment()
    return create_app([TranslationEngine(**options) for options in engines], settings)


def __getattr__(name: str):
    """`HTTPProtocol`: the connections' protocol of the settings in `SPEC_VARIABLE`, which uvicorn imports by name
    in each worker (a class made at run time cannot be pickled)."""
    if name != PROTOCOL_NAME:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    from vanilla_transformer.serve.connections import guarded_protocol

    _, settings, forwarded_allow_ips = spec_from_environment()
    return guarded_protocol(**connection_limits(settings, forwarded_allow_ips))


def serve_workers(engine_options: list[dict], settings, host: str, port: int, workers: int, graceful_s: float,
                  forwarded_allow_ips: str | None = None) -> None:
    """Serve with `workers` processes until SIGTERM or Ctrl-C. `engine_options`: `TranslationEngine`'s arguments,
    one dict per model;
    `forwarded_allow_ips` as for `server.serve`."""
    import uvicorn

    files = tempfile.mkdtemp(prefix="vanilla-transformer-files-")  # translated files, for whichever worker is asked
    fields = dataclasses.asdict(dataclasses.replace(settings, files_folder=files))
    fields["api_keys"] = sorted(settings.api_keys) if settings.api_keys is not None else None
    os.environ[SPEC_VARIABLE] = json.dumps({"engines": engine_options, "settings": fields,
                                            "forwarded_allow_ips": forwarded_allow_ips})
    logging.getLogger("vanilla_transformer.serve").info("Serving at http://%s:%d with %d worker processes", host,
                                                        port, workers)
    options = uvicorn_options(forwarded_allow_ips=forwarded_allow_ips, graceful_s=graceful_s)
    try:
        uvicorn.run("vanilla_transformer.serve.workers:app_from_environment", factory=True, host=host, port=port,
                    workers=workers, http=f"{__name__}:{PROTOCOL_NAME}", **options)
    finally:
        shutil.rmtree(files, ignore_errors=True)


__all__ = ["SPEC_VARIABLE", "app_from_environment", "serve_workers"]
