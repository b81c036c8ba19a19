"""The server's settings: limits, batching and logging, one dataclass the command fills from its options."""

from dataclasses import dataclass


@dataclass(frozen=True)
class ServeSettings:
    """What the server allows and how it batches.

    char_limit: most characters of `q` in one request (all its texts together; LibreTranslate's `--char-limit`).
    batch_limit: most texts in one request's `q` list (LibreTranslate's `--batch-limit`).
    body_limit: most bytes of one request body, checked before it is read whole.
    timeout: seconds a request may wait for its translation before it is answered 503.
    req_limit: most /translate requests per minute per client address (None: no limit).
    api_keys: the keys /translate accepts in `api_key` (None: no key needed).
    max_batch_tokens: most source tokens in one engine call; batch_wait_ms: how long the batcher waits for more
    sentences after the first one of a batch. batching=False translates one sentence per engine call.
    cors: answer browsers of any origin (CORS headers). log_texts: log the texts of each request, not only sizes.
    alternatives_limit: most `alternatives` a /translate request may ask for (LibreTranslate's
    `--alternatives-limit`). frontend_timeout_ms: how long LibreTranslate's web page waits after a keystroke before
    it translates (`frontendTimeout` of /frontend/settings). files_folder: where translated files are kept for
    download (None: a folder of the server's own; the worker processes of `--workers` share one).
    read_timeout: seconds a client may take to send one request, headers and body (then 408);
    connections_per_client: most connections one client address may hold open at once (then 429; None: no limit).
    Both are the server's (`connections.guarded_protocol`), not the app's.
    """

    char_limit: int = 5000
    batch_limit: int = 100
    body_limit: int = 1_000_000
    timeout: float = 60.0
    req_limit: int | None = None
    api_keys: frozenset[str] | None = None
    max_batch_tokens: int = 4096
    batch_wait_ms: float = 5.0
    batching: bool = True
    cors: bool = True
    log_texts: bool = False
    alternatives_limit: int = 3
    frontend_timeout_ms: int = 500
    files_folder: str | None = None
    read_timeout: float = 30.0
    connections_per_client: int | None = 256
