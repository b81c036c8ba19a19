"""`vanilla-transformer serve`: a LibreTranslate-compatible HTTP server over a saved model folder.

    from vanilla_transformer.serve import ServeSettings, TranslationEngine, create_app
    engine = TranslationEngine("outputs/multi30k-ct2", source_lang="de", target_lang="en")
    app = create_app(engine, ServeSettings())        # a FastAPI app: run it with uvicorn

The parts, one job each: `engine` (the model folder behind one `translate(sentences)` call, PyTorch or CTranslate2),
`batcher` (gathers the sentences of concurrent requests into one engine call), `text` (sentences in and out of a
text, with `sentencex`), `markup` (the text nodes of an HTML fragment), `limits` (API keys, requests per minute,
request-body size), `metrics` (Prometheus counters), `app` (the routes), `server` (uvicorn, with a clean exit on
SIGTERM). The command is `cli/serve.py`; the guide is docs/serve.md. FastAPI and uvicorn are the `serve` extra.
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
