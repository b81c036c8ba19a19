"""`vanilla-transformer serve`: a LibreTranslate-compatible HTTP server over saved model folders.

    from vanilla_transformer.serve import ServeSettings, TranslationEngine, create_app
    engines = [TranslationEngine("outputs/de-en-ct2"), TranslationEngine("outputs/en-fr-ct2")]
    app = create_app(engines, ServeSettings())        # a FastAPI app: run it with uvicorn

The parts, one job each: `engine` (a model folder behind one `translate(sentences)` call, PyTorch or CTranslate2,
one language pair), `models` (the engines of a server and the routes between their languages, pivots included),
`batcher` (gathers the sentences of concurrent requests into one engine call), `detect` (the language of a text,
for `source=auto` and /detect), `text` (sentences in and out of a text, with `sentencex`), `markup` (the text nodes
of an HTML fragment), `files` (translated files kept for download), `limits` (API keys, requests per minute,
request-body size), `metrics` (Prometheus counters), `app` (the routes), `server` (uvicorn, with a clean exit on
SIGTERM). The command is `cli/serve.py`; the guide is docs/serve.md. FastAPI, uvicorn and py3langid are the `serve`
extra.
"""

from vanilla_transformer.serve.settings import ServeSettings

__all__ = ["ServeSettings", "TranslationEngine", "create_app"]


def __getattr__(name):
    # the app and the engine need the `serve` extra (FastAPI) and torch: imported when asked for
    if name == "create_app":
        from vanilla_transformer.serve.app import create_app

        return create_app
    if name == "TranslationEngine":
        from vanilla_transformer.serve.engine import TranslationEngine

        return TranslationEngine
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
