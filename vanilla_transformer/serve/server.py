"""Run the app with uvicorn on one address, stop cleanly on SIGTERM or Ctrl-C.

On SIGTERM (or SIGINT) uvicorn stops accepting connections, lets the requests in flight finish (up to
`graceful_s`), shuts the app down, and then raises the signal again so that the default handler ends the process
with it. `serve` installs its own handler for both signals first, which uvicorn puts back after its shutdown: the
raised signal then only records that it came, and `serve` returns, so the command exits 0.
"""

import logging
import signal
import socket

logger = logging.getLogger("vanilla_transformer.serve")
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


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
          log_level: str = "info") -> list[int]:
    """Serve `app` until SIGTERM or SIGINT; returns the signals that stopped it (after the in-flight requests were
    answered). Prints "Serving at http://HOST:PORT" once listening (the port is the one bound, for port 0)."""
    import uvicorn

    sock = listening_socket(host, port)
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level=log_level, access_log=False, timeout_graceful_shutdown=graceful_s,
                            lifespan="on", log_config=None)
    server = uvicorn.Server(config)
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


__all__ = ["listening_socket", "serve"]
