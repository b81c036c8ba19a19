"""What a client may send: API keys (`--api-keys FILE`), requests per minute (`--req-limit`), body size.

`read_api_keys` reads a file of keys, one a line (blank lines and lines starting with # skipped). `RateLimiter`
counts each client's requests over the last 60 seconds. `BodyLimit` is an ASGI middleware that answers 413 to a
body over its limit, from the Content-Length header or while the body streams in, before the app reads it whole.
"""

import hmac
import json
import math
import os
import time
from collections import deque

WINDOW_S = 60.0


def read_api_keys(path: str | os.PathLike) -> frozenset[str]:
    """The keys in the file at `path`; a ValueError when it holds none or cannot be read."""
    try:
        with open(path, encoding="utf-8") as file:
            keys = frozenset(line.strip() for line in file if line.strip() and not line.lstrip().startswith("#"))
    except (OSError, UnicodeDecodeError) as error:
        raise ValueError(f"--api-keys file {path} cannot be read ({' '.join(str(error).split())})") from None
    if not keys:
        raise ValueError(f"--api-keys file {path} holds no key (one key a line; lines starting with # are skipped)")
    return keys


def key_is_valid(key: str, keys: frozenset[str]) -> bool:
    """Whether `key` is one of `keys`, compared in constant time (no timing tells how much of a key was right)."""
    found = False
    for known in keys:
        found |= hmac.compare_digest(key.encode(), known.encode())
    return found


class RateLimiter:
    """At most `per_minute` requests per client in any 60 seconds. Used from the event loop only."""

    def __init__(self, per_minute: int, clock=time.monotonic):
        if per_minute < 1:
            raise ValueError(f"the request limit must be at least 1 per minute, got {per_minute}")
        self.per_minute, self.clock = per_minute, clock
        self._seen: dict[str, deque] = {}
        self._next_sweep = clock() + WINDOW_S

    def retry_after(self, client: str) -> int:
        """0 when `client` may make a request now (and counts it), else the seconds until it may."""
        now = self.clock()
        if now >= self._next_sweep:  # forget clients quiet for a minute: memory stays bounded
            self._seen = {name: times for name, times in self._seen.items() if times and times[-1] > now - WINDOW_S}
            self._next_sweep = now + WINDOW_S
        times = self._seen.setdefault(client, deque())
        while times and times[0] <= now - WINDOW_S:
            times.popleft()
        if len(times) >= self.per_minute:
            return max(1, math.ceil(times[0] + WINDOW_S - now))
        times.append(now)
        return 0


class BodyLimit:
    """ASGI middleware: a request body over `limit` bytes is answered 413 with {"error": ...}."""

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        declared = dict(scope["headers"]).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.limit:
            return await self._refuse(send)
        received = 0

        async def counted_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:
                    raise BodyTooLarge
            return message

        try:
            await self.app(scope, counted_receive, send)
        except BodyTooLarge:
            await self._refuse(send)

    async def _refuse(self, send):
        body = json.dumps({"error": f"the request body is over this server's limit of {self.limit} bytes"}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})


class BodyTooLarge(Exception):
    """Raised by `BodyLimit`'s receive when a body streams in over the limit; `BodyLimit` answers it (413)."""


__all__ = ["BodyLimit", "BodyTooLarge", "RateLimiter", "key_is_valid", "read_api_keys"]
