"""The HTTP routes: LibreTranslate's POST /translate and GET /languages, plus GET /health, GET /metrics and
GET /frontend/settings (what LibreTranslate's web clients ask first), with OpenAPI docs at /docs.

`create_app(engine, settings)` builds the FastAPI app around a loaded `engine.TranslationEngine`; its lifespan starts
the batcher thread and stops it after the last request in flight (uvicorn shuts the app down only then). Every
answer that is not a translation is {"error": "..."} with its status, as LibreTranslate answers.

What a request costs the CPU before and after the engine (sentence splitting, HTML, token counts, putting the
translations back) runs in a small thread pool, never on the event loop, so a large request does not hold up the
others or /health. The access log (`AccessLog`) is also the last resort: an exception no route answered becomes a
JSON 500 and one log line, a client gone before its answer one line (status 499, as nginx logs it), never a
traceback; what a client sent reaches the log escaped (`loggable`), so it cannot forge lines. Public answers name
no path of the server's machine; /metrics needs an API key when the server has keys.
"""

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from vanilla_transformer.serve.batcher import DynamicBatcher, TranslationError
from vanilla_transformer.serve.engine import language_name
from vanilla_transformer.serve.limits import BodyLimit, RateLimiter, key_is_valid
from vanilla_transformer.serve.markup import join_markup, split_markup
from vanilla_transformer.serve.metrics import ServeMetrics
from vanilla_transformer.serve.protocol import ApiError, TranslateRequest, check_request, loggable, read_fields
from vanilla_transformer.serve.settings import ServeSettings
from vanilla_transformer.serve.text import join_sentences, split_sentences

logger = logging.getLogger("vanilla_transformer.serve")
# threads for the CPU work of requests (splitting, HTML, token counts): off the event loop, and few, as they share
# the interpreter's lock
PREPARE_THREADS = 2


def _split(request: TranslateRequest, engine):
    """(documents, splits, sentences, tokens) of `request`: its HTML documents (None for text), the sentence split
    of each text node or text, all the sentences in order and their token counts."""
    documents = [split_markup(text) if request.format == "html" else None for text in request.texts]
    pieces = [list(document.texts) if document else [text] for document, text in zip(documents, request.texts)]
    splits = [[split_sentences(piece, engine.source_lang) for piece in text_pieces] for text_pieces in pieces]
    sentences = [sentence for text_splits in splits for split in text_splits for sentence in split.sentences]
    return documents, splits, sentences, engine.count_tokens(sentences)


def _join(documents, splits, translations: list[str]) -> list[str]:
    translated = iter(translations)
    answers = []
    for document, text_splits in zip(documents, splits):
        joined = [join_sentences(split, [next(translated) for _ in split.sentences]) for split in text_splits]
        answers.append(join_markup(document, joined) if document else joined[0])
    return answers


async def translate_texts(request: TranslateRequest, engine, batcher: DynamicBatcher, settings: ServeSettings,
                          pool: ThreadPoolExecutor | None = None) -> list[str]:
    """The translation of each text of `request`: its sentences (of each text node, for html) through the batcher,
    put back together. The splitting and joining run in `pool` (default: asyncio's own)."""
    loop = asyncio.get_running_loop()
    documents, splits, sentences, tokens = await loop.run_in_executor(pool, _split, request, engine)
    longest = max(range(len(tokens)), key=tokens.__getitem__, default=None)
    limit = engine.max_input_tokens  # None: unknown, the engine's own refusal answers 400 (batcher)
    if longest is not None and limit is not None and tokens[longest] > limit:
        raise ApiError(400, f"Invalid request: a sentence of q is {tokens[longest]} tokens long, over the "
                            f"{limit} tokens this model reads: "
                            f"{sentences[longest][:60]!r}{'...' if len(sentences[longest]) > 60 else ''}")
    translations = await batcher.translate(sentences, tokens, settings.timeout)
    return await loop.run_in_executor(pool, _join, documents, splits, translations)


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class AccessLog:
    """ASGI middleware: one log line and the metrics of each HTTP request (route, status, milliseconds, client,
    and what the route put in `request.state.log`); and the last resort for exceptions no route answered."""

    def __init__(self, app, metrics: ServeMetrics):
        self.app, self.metrics = app, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        started, status, note = time.perf_counter(), [None], ""

        async def send_status(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_status)
        except ClientDisconnect:  # gone before its body came: nobody to answer
            status[0], note = status[0] or 499, "the client disconnected"
        except Exception as error:  # a bug of ours: one JSON answer and one log line, not a traceback
            note = f"failed: {type(error).__name__}: {' '.join(str(error).split())}"
            if status[0] is None:
                status[0] = 500
                await error_response(500, "the server failed on this request (see its log)")(scope, receive, send)
        finally:
            seconds = time.perf_counter() - started
            route = scope["path"] if scope["path"] in ROUTES else "other"
            self.metrics.requests.labels(route=route, status=str(status[0] or 500)).inc()
            self.metrics.latency.labels(route=route).observe(seconds)
            client = scope.get("client") or ("-", 0)
            extra = " ".join(part for part in (scope.get("state", {}).get("log", ""), note) if part)
            logger.log(logging.ERROR if note.startswith("failed") else logging.INFO, "%s %s %s %d %.1f ms%s",
                       loggable(client[0]), loggable(scope["method"]), loggable(scope["path"]), status[0] or 500,
                       seconds * 1000, f" {loggable(extra)}" if extra else "")


ROUTES = ("/translate", "/languages", "/health", "/metrics", "/frontend/settings")


def _describe_request(request: TranslateRequest, settings: ServeSettings) -> str:
    described = f"texts={len(request.texts)} chars={sum(map(len, request.texts))} format={request.format}"
    return described + (f" q={request.texts!r}" if settings.log_texts else "")


def _metrics_key(request: Request) -> str | None:
    """The API key a /metrics request gives: `Authorization: Bearer KEY` (Prometheus' `authorization`), or the
    `api_key` query parameter."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.query_params.get("api_key")


def add_routes(app: FastAPI, engine, settings: ServeSettings, metrics: ServeMetrics) -> None:
    limiter = RateLimiter(settings.req_limit) if settings.req_limit else None

    @app.post("/translate", summary="Translate q (a string or a list of strings) from source into target")
    async def translate_route(request: Request):
        try:
            if limiter is not None:
                client = request.client.host if request.client else "-"
                wait = limiter.retry_after(client)
                if wait:
                    raise ApiError(429, f"Too many requests: over this server's limit of {settings.req_limit} per "
                                        f"minute; try again in {wait} s", {"Retry-After": str(wait)})
            fields = await read_fields(request)
            if settings.api_keys is not None:
                key = fields.get("api_key")
                if not key:
                    raise ApiError(403, "Missing API key: this server needs an api_key with each request")
                if not isinstance(key, str) or not key_is_valid(key, settings.api_keys):
                    raise ApiError(403, "Invalid API key")
            checked = check_request(fields, source_lang=engine.source_lang, target_lang=engine.target_lang,
                                    char_limit=settings.char_limit, batch_limit=settings.batch_limit)
            request.state.log = _describe_request(checked, settings)
            translations = await translate_texts(checked, engine, app.state.batcher, settings, app.state.pool)
        except (ApiError, TranslationError) as error:
            return error_response(error.status, error.message, getattr(error, "headers", None))
        answer = {"translatedText": translations if checked.as_list else translations[0]}
        if checked.auto_source:  # the model reads one language: "auto" is that one
            answer["detectedLanguage"] = {"language": engine.source_lang, "confidence": 100.0}
        return answer

    @app.get("/languages", summary="The languages this server translates, with their targets")
    async def languages_route():
        return [{"code": engine.source_lang, "name": language_name(engine.source_lang),
                 "targets": [engine.target_lang]},
                {"code": engine.target_lang, "name": language_name(engine.target_lang), "targets": []}]

    @app.get("/health", summary="ok when the engine can translate (503 otherwise)")
    async def health_route():
        if not engine.is_usable() or app.state.batcher is None:
            return error_response(503, "the translation engine is not loaded")
        return {"status": "ok", "model": engine.describe(path=False)}

    @app.get("/metrics", summary="Prometheus metrics: requests, latency, batch sizes, engine time (with the server's "
                                 "API keys, one of them as a bearer token or api_key)")
    async def metrics_route(request: Request):
        if settings.api_keys is not None:
            key = _metrics_key(request)
            if not key:
                return error_response(403, "Missing API key: /metrics needs an api_key or an Authorization: Bearer "
                                           "header on this server")
            if not key_is_valid(key, settings.api_keys):
                return error_response(403, "Invalid API key")
        return Response(metrics.text(), media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.get("/frontend/settings", summary="LibreTranslate's client settings: limits and the language pair")
    async def settings_route():
        return {"charLimit": settings.char_limit, "batchLimit": settings.batch_limit,
                "keyRequired": settings.api_keys is not None, "suggestions": False, "filesTranslation": False,
                "supportedFilesFormat": [],
                "language": {"source": {"code": engine.source_lang, "name": language_name(engine.source_lang)},
                             "target": {"code": engine.target_lang, "name": language_name(engine.target_lang)}}}


def create_app(engine, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engine` (an `engine.TranslationEngine`) under `settings`."""
    settings = settings or ServeSettings()
    metrics = ServeMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        batcher = DynamicBatcher(engine, metrics, max_batch_tokens=settings.max_batch_tokens,
                                 wait_s=settings.batch_wait_ms / 1000, batching=settings.batching)
        batcher.start()
        app.state.batcher = batcher
        app.state.pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="request-text")
        logger.info("Translating %s", engine.describe())
        try:
            yield
        finally:
            app.state.batcher = None
            batcher.stop()
            app.state.pool.shutdown()

    app = FastAPI(title="vanilla-transformer serve", lifespan=lifespan,
                  description=f"LibreTranslate-compatible translation with {engine.describe(path=False)}")
    app.state.batcher = app.state.pool = None
    app.state.metrics = metrics
    add_routes(app, engine, settings, metrics)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):  # 404, 405: {"error": ...} as the rest
        return error_response(error.status_code, str(error.detail), getattr(error, "headers", None))

    if settings.cors:
        app.add_middleware(CORSMiddleware, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(BodyLimit, limit=settings.body_limit)
    app.add_middleware(AccessLog, metrics=metrics)
    return app


__all__ = ["ROUTES", "create_app", "translate_texts"]
