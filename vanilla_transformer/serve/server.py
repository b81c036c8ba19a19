"""Run the app with uvicorn on one address, stop cleanly on SIGTERM or Ctrl-C.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, lets the requests in flight finish (up to
`graceful_s`), shuts the app down, and then raises the signal again so that the default handler ends the process
with it. `serve` installs its own handler for both signals first, which uvicorn puts back after its shutdown: the
raised signal then only records that it came, and `serve` returns, so the command exits 0.

`DrainingServer` answers every request that reached the server before the signal: uvicorn alone closes the
listening socket at once (the connections the kernel has accepted for it but the event loop has not taken yet are
reset) and closes each connection whose request it has not read yet, which a busy event loop (the engine holding
the interpreter's lock) leaves many of. It first goes on accepting for `ACCEPT_GRACE_S` and until the kernel's
queue of connections is empty (Linux tells its length), then stops accepting and waits until every connection
has sent its first request (up to `READ_GRACE_S`); only then does uvicorn's shutdown begin. Each wait ends after
`DRAIN_LIMIT_S` whatever the load.

Proxy headers (X-Forwarded-For, X-Forwarded-Proto) are trusted from the addresses `forwarded_allow_ips` names
only (`--forwarded-allow-ips`); by default from none, so a client cannot choose the address that --req-limit
counts and the log shows (uvicorn alone trusts them from 127.0.0.1, or from $FORWARDED_ALLOW_IPS).
"""

import asyncio
import logging
import signal
import socket
import struct

logger = logging.getLogger("vanilla_transformer.serve")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)
# seconds to go on accepting after a stop signal; most seconds to wait for the accept queue to empty, and for
# connections accepted without a request yet to send it
ACCEPT_GRACE_S = 0.1
DRAIN_LIMIT_S = 5.0
READ_GRACE_S = 2.0
# Linux's struct tcp_info: for a listening socket, tcpi_unacked (at this offset) is the length of its accept queue
_TCP_INFO_QUEUE = 24


def accept_queue_length(sock) -> int:
    """Connections the kernel has accepted on listening socket `sock` that the server has not taken yet (0 where
    the system does not say)."""
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
    except (AttributeError, OSError):  # not Linux, or not a TCP socket
        return 0
    return struct.unpack_from("I", info, _TCP_INFO_QUEUE)[0] if len(info) >= _TCP_INFO_QUEUE + 4 else 0


async def _wait_until(condition, seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + seconds
    while not condition() and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)


def _draining_server_class():
    import uvicorn

    class DrainingServer(uvicorn.Server):
        """uvicorn's server, answering the requests that reached it before a stop signal (the module's docstring)."""

        async def shutdown(self, sockets=None):
            await asyncio.sleep(ACCEPT_GRACE_S)
            listening = [sock for server in self.servers for sock in server.sockets]
            await _wait_until(lambda: not any(accept_queue_length(sock) for sock in listening), DRAIN_LIMIT_S)
            for server in self.servers:
                server.close()
            # a connection whose first request the event loop has not read yet has no request cycle
            await _wait_until(lambda: all(getattr(connection, "cycle", True) is not None
                                          for connection in self.server_state.connections), READ_GRACE_S)
            await super().shutdown(sockets=sockets)

    return DrainingServer


def uvicorn_options(forwarded_allow_ips: str | None = None, graceful_s: float = 60.0,
                    log_level: str = "info") -> dict:
    """uvicorn.Config's options for this server: no access log of uvicorn's (the app logs each request), proxy
    headers from `forwarded_allow_ips` only (None: from nobody)."""
    return dict(log_level=log_level, access_log=False, timeout_graceful_shutdown=graceful_s, lifespan="on",
                log_config=None, proxy_headers=forwarded_allow_ips is not None,
                forwarded_allow_ips=forwarded_allow_ips or "")


def connection_limits(settings, forwarded_allow_ips: str | None = None) -> dict:
    """`connections.guarded_protocol`'s arguments for `settings` (a `ServeSettings`): no limit of connections per
    client behind a trusted proxy, whose address every connection would have."""
    per_client = settings.connections_per_client if forwarded_allow_ips is None else None
    return dict(read_timeout=settings.read_timeout, per_client=per_client)


def make_server(app, limits: dict | None = None, **options):
    """A `DrainingServer` for `app` with `uvicorn_options(**options)`, its connections under
    `connections.guarded_protocol(**limits)` (None: the module's defaults)."""
    import uvicorn

    from vanilla_transformer.serve.connections import guarded_protocol

    config = uvicorn.Config(app, http=guarded_protocol(**(limits or {})), **uvicorn_options(**options))
    return _draining_server_class()(config)


def listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to (host, port), listening; an OSError naming the address when it cannot be had."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as error:
        sock.close()
        raise OSError(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(app, host: str = "127.0.0.1", port: int = 5000, *, graceful_s: float = 60.0,
          log_level: str = "info", forwarded_allow_ips: str | None = None, limits: dict | None = None) -> list[int]:
    """Serve `app` until SIGTERM or SIGINT; returns the signals that stopped it (after the in-flight requests were
    answered). Prints "Serving at http://HOST:PORT" once listening (the port is the one bound, for port 0).
    `forwarded_allow_ips`: the proxies whose X-Forwarded-For is trusted (comma-separated addresses or networks,
    "*" for all; None: none); `limits`: of the connections, as for `make_server`."""
    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    server = make_server(app, limits, forwarded_allow_ips=forwarded_allow_ips, graceful_s=graceful_s,
                         log_level=log_level)
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda sig, frame: received.append(sig)) for sig in STOP_SIGNALS}
    shown = f"[{host}]" if ":" in host else host
    logger.info("Serving at http://%s:%d (OpenAPI docs at /docs); SIGTERM or Ctrl-C stops", shown, bound_port)
    try:
        server.run(sockets=[sock])
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        sock.close()
    if not server.started:
        raise RuntimeError("the server did not start (see the log above)")
    logger.info("Stopped%s", f" on {signal.Signals(received[-1]).name}" if received else "")
    return received


__all__ = ["accept_queue_length", "connection_limits", "listening_socket", "make_server", "serve", "uvicorn_options"]
