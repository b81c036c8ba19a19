"""The HTTP routes: LibreTranslate's POST /translate, POST /detect, POST /translate_file with GET /download_file/NAME,
GET /languages and GET /frontend/settings, plus GET /health and GET /metrics, with OpenAPI docs at /docs.

`create_app(engines, settings)` builds the FastAPI app around loaded `engine.TranslationEngine`s (one or several,
each one language pair: `models.ServedModels` routes a request to its engine, or through a pivot language); its
lifespan starts one batcher thread per engine and stops them after the last request in flight (uvicorn shuts the
app down only then). Every answer that is not a translation is {"error": "..."} with its status, as LibreTranslate
answers.

`source=auto` detects each text's language (`detect.LanguageDetector`) among the sources that reach the target,
and translates each text from its own: `detectedLanguage` is one object for a string `q`, a list of them (one per
text) for a list. `alternatives=n` answers each text's n other translations from a wider beam search (the text's
best translation then comes from that search too); for `format=html` there are none, as in LibreTranslate.

What a request costs the CPU before and after the engine (language detection, sentence splitting, HTML, token
counts, putting the translations back) runs in a small thread pool, never on the event loop, so a large request
does not hold up the others or /health. The access log (`AccessLog`) is also the last resort: an exception no route
answered becomes a JSON 500 and one log line, a client gone before its answer one line (status 499, as nginx logs
it), never a traceback; what a client sent reaches the log escaped (`loggable`), so it cannot forge lines. Public
answers name no path of the server's machine; /metrics needs an API key when the server has keys.
"""

import asyncio
import logging
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import FileResponse, JSONResponse, Response
from starlette.exceptions import HTTPException
from starlette.requests import ClientDisconnect

from vanilla_transformer.serve.batcher import DynamicBatcher, TranslationError
from vanilla_transformer.serve.detect import LanguageDetector
from vanilla_transformer.serve.engine import language_name
from vanilla_transformer.serve.files import MEDIA_TYPES, TranslatedFiles, file_format, read_text
from vanilla_transformer.serve.limits import BodyLimit, RateLimiter, key_is_valid
from vanilla_transformer.serve.markup import join_markup, split_markup
from vanilla_transformer.serve.metrics import ServeMetrics
from vanilla_transformer.serve.models import ServedModels
from vanilla_transformer.serve.protocol import (
    ApiError,
    TranslateRequest,
    check_request,
    loggable,
    read_fields,
    texts_field,
)
from vanilla_transformer.serve.settings import ServeSettings
from vanilla_transformer.serve.text import join_sentences, split_sentences

logger = logging.getLogger("vanilla_transformer.serve")
# threads for the CPU work of requests (splitting, HTML, token counts): off the event loop, and few, as they share
# the interpreter's lock
PREPARE_THREADS = 2
# Requests of at most this many texts and characters in all are split and joined on the event loop itself: the work
# is linear in the text, and at this size costs the loop less than handing it to a thread and back, which costs
# every request CPU time and a wake-up of the loop (the timings: benchmarks/experiments/serving.md). Larger ones go
# to the threads.
INLINE_TEXTS, INLINE_CHARACTERS = 8, 500


def _split(texts: list[str], text_format: str, engine):
    """(documents, splits, sentences, tokens) of `texts`: their HTML documents (None for text), the sentence split
    of each text node or text, all the sentences in order and their token counts."""
    documents = [split_markup(text) if text_format == "html" else None for text in texts]
    pieces = [list(document.texts) if document else [text] for document, text in zip(documents, texts)]
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


def _join_hypotheses(documents, splits, hypotheses: list[list[str]], count: int) -> tuple[list[str], list[list[str]]]:
    """(the best translation of each text, its other distinct translations): the k-th of each text puts together
    the k-th hypothesis of each of its sentences."""
    ranked = [_join(documents, splits, [sentence[k] for sentence in hypotheses]) for k in range(count)]
    best = ranked[0]
    others = [list(dict.fromkeys(text for text in (ranked[k][i] for k in range(1, count)) if text not in ("", best[i])))
              for i in range(len(best))]
    return best, others


async def translate_texts(texts: list[str], text_format: str, engine, batcher: DynamicBatcher,
                          settings: ServeSettings, pool: ThreadPoolExecutor | None = None,
                          hypotheses: int = 1, what: str = "q") -> tuple[list[str], list[list[str]] | None]:
    """(the translation of each text by `engine`, and with `hypotheses` n over 1 its other translations, else
    None): its sentences (of each text node, for html) through the batcher, put back together. The splitting and
    joining run in `pool` (default: asyncio's own), or here for a few short texts (`INLINE_TEXTS`,
    `INLINE_CHARACTERS`). `what` the texts are, for errors ("q")."""
    loop = asyncio.get_running_loop()
    inline = len(texts) <= INLINE_TEXTS and sum(map(len, texts)) <= INLINE_CHARACTERS

    async def run(function, *args):
        return function(*args) if inline else await loop.run_in_executor(pool, function, *args)

    documents, splits, sentences, tokens = await run(_split, texts, text_format, engine)
    longest = max(range(len(tokens)), key=tokens.__getitem__, default=None)
    limit = engine.max_input_tokens  # None: unknown, the engine's own refusal answers 400 (batcher)
    if longest is not None and limit is not None and tokens[longest] > limit:
        raise ApiError(400, f"Invalid request: a sentence of {what} is {tokens[longest]} tokens long, over the "
                            f"{limit} tokens the {engine.source_lang} -> {engine.target_lang} model reads: "
                            f"{sentences[longest][:60]!r}{'...' if len(sentences[longest]) > 60 else ''}")
    translations = await batcher.translate(sentences, tokens, settings.timeout, hypotheses)
    if hypotheses == 1:
        return await loop.run_in_executor(pool, _join, documents, splits, translations), None
    return await loop.run_in_executor(pool, _join_hypotheses, documents, splits, translations, hypotheses)


async def translate_through(texts: list[str], text_format: str, chain: list, batchers: dict, settings: ServeSettings,
                            pool: ThreadPoolExecutor | None = None, alternatives: int = 0, what: str = "q"):
    """`texts` through each engine of `chain` in turn (a pivot: each one's translations are the next one's texts,
    as two requests by hand would give): (translations, the alternatives of the last engine or None). `what` the
    texts are, for errors ("q", "the file")."""
    first = what
    others = None
    for position, engine in enumerate(chain):
        last = position == len(chain) - 1
        count = alternatives + 1 if last and alternatives and text_format == "text" else 1
        what = first if position == 0 else (f"the {engine.source_lang} translation of {first} (on the way through a "
                                            "pivot)")
        texts, others = await translate_texts(texts, text_format, engine, batchers[id(engine)], settings, pool, count,
                                              what)
    if alternatives and others is None:  # html: none, as LibreTranslate answers
        others = [[] for _ in texts]
    return texts, others


def error_response(status: int, message: str, headers: dict | None = None) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status, headers=headers)


class JSONErrorCORS(CORSMiddleware):
    """Starlette's CORS middleware, its refusal of a preflight answered `{"error": ...}` as every other error."""

    def preflight_response(self, request_headers):
        response = super().preflight_response(request_headers)
        if response.status_code < 400:
            return response
        headers = {name: value for name, value in response.headers.items()
                   if name not in ("content-type", "content-length")}
        return error_response(response.status_code, bytes(response.body).decode(), headers)


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


ROUTES = ("/translate", "/detect", "/translate_file", "/languages", "/health", "/metrics", "/frontend/settings")


def _describe_request(request: TranslateRequest, settings: ServeSettings) -> str:
    described = (f"{request.source}->{request.target} texts={len(request.texts)} "
                 f"chars={sum(map(len, request.texts))} format={request.format}")
    if request.alternatives:
        described += f" alternatives={request.alternatives}"
    return described + (f" q={request.texts!r}" if settings.log_texts else "")


def _metrics_key(request: Request) -> str | None:
    """The API key a /metrics request gives: `Authorization: Bearer KEY` (Prometheus' `authorization`), or the
    `api_key` query parameter."""
    scheme, _, credentials = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() == "bearer" and credentials.strip():
        return credentials.strip()
    return request.query_params.get("api_key")


def _check_key(fields: dict, settings: ServeSettings) -> None:
    if settings.api_keys is not None:
        key = fields.get("api_key")
        if not key:
            raise ApiError(403, "Missing API key: this server needs an api_key with each request")
        if not isinstance(key, str) or not key_is_valid(key, settings.api_keys):
            raise ApiError(403, "Invalid API key")


async def _uploaded_file(request: Request) -> tuple[str, bytes]:
    """(file name, bytes) of the `file` field of a multipart form (read by `read_fields` first, so parsed once); an
    `ApiError` (400) without one, as LibreTranslate answers."""
    content_type = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if content_type != "multipart/form-data":
        raise ApiError(400, "Invalid request: missing file parameter (send the file as multipart/form-data)")
    form = await request.form()
    try:
        upload = form.get("file")
        if upload is None or isinstance(upload, str):
            raise ApiError(400, "Invalid request: missing file parameter")
        if not upload.filename:
            raise ApiError(400, "Invalid request: empty file")
        return upload.filename, await upload.read()
    finally:
        await form.close()


def _detect_all(detector: LanguageDetector, texts: list[str], among: list[str]) -> list[dict]:
    """The most likely language of each text (LibreTranslate's detectedLanguage objects)."""
    return [detector.detect(text, among)[0] for text in texts]


class Translator:
    """What the routes translate with: the served models, a batcher per engine (while the app runs), the
    language detector and the thread pool for the CPU work of requests."""

    def __init__(self, models: ServedModels, settings: ServeSettings):
        self.models, self.settings = models, settings
        self.detector = LanguageDetector(models.sources)
        self.batchers: dict[int, DynamicBatcher] | None = None
        self.pool: ThreadPoolExecutor | None = None

    def start(self, metrics: ServeMetrics) -> None:
        settings = self.settings
        self.pool = ThreadPoolExecutor(PREPARE_THREADS, thread_name_prefix="request-text")
        batchers = {id(engine): DynamicBatcher(engine, metrics, max_batch_tokens=settings.max_batch_tokens,
                                               wait_s=settings.batch_wait_ms / 1000, batching=settings.batching)
                    for engine in self.models.engines}
        for batcher in batchers.values():
            batcher.start()
        self.batchers = batchers

    def stop(self) -> None:
        batchers, self.batchers = self.batchers, None
        for batcher in (batchers or {}).values():
            batcher.stop()
        if self.pool is not None:
            self.pool.shutdown()

    def is_ready(self) -> bool:
        return self.batchers is not None and all(engine.is_usable() for engine in self.models.engines)

    def detectable(self, target: str | None = None) -> list[str]:
        """The sources `source=auto` chooses from: those that reach `target` (any target: None) and the detector
        knows; an `ApiError` (400) when there are none."""
        among = self.models.sources if target is None else self.models.sources_to(target)
        among = [code for code in among if code in self.detector.detectable]
        if not among:
            into = f"into {target} " if target else ""
            raise ApiError(400, f"Invalid request: source=auto cannot detect the language here (no language this "
                                f"server translates {into}is one the language detector knows): give source")
        return among

    async def detect(self, texts: list[str], target: str | None = None) -> list[dict]:
        """The detectedLanguage of each text, among the sources that reach `target` (all sources: None)."""
        among = self.detectable(target)
        return await asyncio.get_running_loop().run_in_executor(self.pool, _detect_all, self.detector, texts, among)

    async def translate(self, request: TranslateRequest):
        """(translations, alternatives or None, detectedLanguage of each text or None, the pivots taken, as
        "en->fr via de") of `request`."""
        if self.batchers is None:
            raise TranslationError(503, "the server is not running its translation engine (starting or stopping)")
        if not request.auto_source:
            self.models.route(request.source, request.target)  # a pair not served: 400 before any work
        elif request.target not in self.models.codes:
            raise ApiError(400, f"{request.target} is not supported as target language: this server translates "
                                f"{self.models.describe_pairs()}")
        detected = await self.detect(request.texts, request.target) if request.auto_source else None
        sources = [found["language"] for found in detected] if detected else [request.source] * len(request.texts)
        groups = {source: [i for i, code in enumerate(sources) if code == source] for source in dict.fromkeys(sources)}
        chains = {source: self.models.route(source, request.target) for source in groups}  # all checked first
        results = await asyncio.gather(*(
            translate_through([request.texts[i] for i in indices], request.format, chains[source], self.batchers,
                              self.settings, self.pool, request.alternatives, request.what)
            for source, indices in groups.items()))
        translations, alternatives = [""] * len(request.texts), [[] for _ in request.texts]
        for indices, (texts, others) in zip(groups.values(), results):
            for position, i in enumerate(indices):
                translations[i] = texts[position]
                if others is not None:
                    alternatives[i] = others[position]
        pivots = [f"{source}->{request.target} via {'+'.join(engine.target_lang for engine in chain[:-1])}"
                  for source, chain in chains.items() if len(chain) > 1]
        return translations, (alternatives if request.alternatives else None), detected, pivots


def add_translation_routes(app: FastAPI, translator: Translator, settings: ServeSettings, limiter) -> None:
    """POST /translate, /detect and /translate_file, and GET /download_file/NAME."""

    def limit(request: Request) -> None:
        if limiter is not None:
            client = request.client.host if request.client else "-"
            wait = limiter.retry_after(client)
            if wait:
                raise ApiError(429, f"Too many requests: over this server's limit of {settings.req_limit} per "
                                    f"minute; try again in {wait} s", {"Retry-After": str(wait)})

    @app.post("/translate", summary="Translate q (a string or a list of strings) from source into target")
    async def translate_route(request: Request):
        try:
            limit(request)
            fields = await read_fields(request)
            _check_key(fields, settings)
            checked = check_request(fields, char_limit=settings.char_limit, batch_limit=settings.batch_limit,
                                    alternatives_limit=settings.alternatives_limit)
            request.state.log = _describe_request(checked, settings)
            translations, alternatives, detected, pivots = await translator.translate(checked)
            if pivots:
                request.state.log += f" pivot={','.join(pivots)}"
        except (ApiError, TranslationError) as error:
            return error_response(error.status, error.message, getattr(error, "headers", None))
        answer = {"translatedText": translations if checked.as_list else translations[0]}
        if detected is not None:
            answer["detectedLanguage"] = detected if checked.as_list else detected[0]
        if alternatives is not None:
            answer["alternatives"] = alternatives if checked.as_list else alternatives[0]
        return answer

    @app.post("/detect", summary="The languages q may be in, most likely first, among those this server translates "
                                 "from")
    async def detect_route(request: Request):
        try:
            limit(request)
            fields = await read_fields(request)
            _check_key(fields, settings)
            texts, _ = texts_field(fields, char_limit=settings.char_limit, batch_limit=settings.batch_limit)
            request.state.log = f"texts={len(texts)} chars={sum(map(len, texts))}"
            among = translator.detectable()
            loop = asyncio.get_running_loop()  # the texts of a list together: one answer, as LibreTranslate's
            return await loop.run_in_executor(translator.pool, translator.detector.detect, "\n".join(texts), among)
        except ApiError as error:
            return error_response(error.status, error.message, error.headers)

    @app.post("/translate_file", summary="Translate a .txt or .html file from source into target; answers the URL "
                                         "to download its translation from")
    async def translate_file_route(request: Request):
        try:
            limit(request)
            fields = await read_fields(request)
            _check_key(fields, settings)
            filename, data = await _uploaded_file(request)
            text_format = file_format(filename)
            text = read_text(data)
            checked = check_request({**fields, "q": text, "format": text_format, "alternatives": 0},
                                    char_limit=settings.char_limit, batch_limit=1, what="the file")
            request.state.log = _describe_request(checked, settings) + " file"
            translations, _, _, pivots = await translator.translate(checked)
            if pivots:
                request.state.log += f" pivot={','.join(pivots)}"
            name = await asyncio.get_running_loop().run_in_executor(
                translator.pool, app.state.files.store, filename, translations[0])
        except (ApiError, TranslationError) as error:
            return error_response(error.status, error.message, getattr(error, "headers", None))
        return {"translatedFileUrl": str(request.url_for("download_file", name=name))}

    # `name:path`: every path under /download_file/ is this route's, slashes and dot segments (decoded from %2f,
    # %2e) included, so that none is redirected (the router's trailing-slash redirect) or answered by another
    # route: each gets this 404 unless it is exactly the name of a file this server wrote. No API key, as
    # LibreTranslate's download route asks none: the name, 128 random bits, is the key.
    @app.get("/download_file/{name:path}", name="download_file", summary="A file /translate_file translated")
    async def download_file_route(name: str):
        path = app.state.files.path(name)
        if path is None:
            return error_response(404, "Not found: no such translated file (they are kept for "
                                       f"{app.state.files.keep_s / 60:g} minutes)")
        media_type = MEDIA_TYPES[file_format(name)]
        return FileResponse(path, media_type=media_type, filename=app.state.files.download_name(name))


def add_routes(app: FastAPI, translator: Translator, settings: ServeSettings, metrics: ServeMetrics) -> None:
    models = translator.models
    add_translation_routes(app, translator, settings, RateLimiter(settings.req_limit) if settings.req_limit else None)

    @app.get("/languages", summary="The languages this server translates, with their targets")
    async def languages_route():
        return models.languages()

    @app.get("/health", summary="ok when every engine can translate (503 otherwise)")
    async def health_route():
        if not translator.is_ready():
            return error_response(503, "the translation engine is not loaded")
        return {"status": "ok", "model": "; ".join(engine.describe(path=False) for engine in models.engines)}

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

    @app.get("/frontend/settings", summary="LibreTranslate's client settings: limits, keys, files, the languages "
                                           "first shown")
    async def settings_route():
        return frontend_settings(translator, settings)


def frontend_settings(translator: Translator, settings: ServeSettings) -> dict:
    """LibreTranslate's GET /frontend/settings, for this server."""
    models = translator.models
    if translator.detector.detectable:
        source = {"code": "auto", "name": "Auto Detect"}
        target_code = models.targets(models.sources[0])[0]
    else:
        source_code = models.sources[0]
        source = {"code": source_code, "name": language_name(source_code)}
        target_code = models.targets(source_code)[0]
    return {"charLimit": settings.char_limit, "batchLimit": settings.batch_limit,
            "frontendTimeout": settings.frontend_timeout_ms, "apiKeys": settings.api_keys is not None,
            "keyRequired": settings.api_keys is not None, "suggestions": False, "filesTranslation": True,
            "supportedFilesFormat": SUPPORTED_FILES,
            "language": {"source": source, "target": {"code": target_code, "name": language_name(target_code)}}}


SUPPORTED_FILES = [".txt", ".html"]


def create_app(engines, settings: ServeSettings | None = None) -> FastAPI:
    """The FastAPI app serving `engines` (an `engine.TranslationEngine`, or a list of them: one per language pair)
    under `settings`."""
    settings = settings or ServeSettings()
    models = ServedModels(engines if isinstance(engines, (list, tuple)) else [engines])
    translator = Translator(models, settings)
    metrics = ServeMetrics()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        translator.start(metrics)
        app.state.files.open()
        models.log_routes()
        translator.detector.log()
        try:
            yield
        finally:
            translator.stop()
            app.state.files.close()

    described = "; ".join(engine.describe(path=False) for engine in models.engines)
    app = FastAPI(title="vanilla-transformer serve", lifespan=lifespan,
                  description=f"LibreTranslate-compatible translation with {described}")
    app.state.metrics, app.state.translator = metrics, translator
    app.state.files = TranslatedFiles(settings.files_folder)
    add_routes(app, translator, settings, metrics)

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, error: HTTPException):  # 404, 405: {"error": ...} as the rest
        return error_response(error.status_code, str(error.detail), getattr(error, "headers", None))

    if settings.cors:
        app.add_middleware(JSONErrorCORS, allow_origins=["*"], allow_methods=["GET", "POST"], allow_headers=["*"])
    app.add_middleware(BodyLimit, limit=settings.body_limit)
    app.add_middleware(AccessLog, metrics=metrics)
    return app


__all__ = ["ROUTES", "Translator", "create_app", "frontend_settings", "translate_texts", "translate_through"]
