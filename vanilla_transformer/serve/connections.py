"""uvicorn's HTTP protocol with the limits a public server needs on its connections, every refusal a JSON error.

uvicorn reads a request for as long as its client takes: a client that sends half its headers, or its headers and
part of the body, holds the connection (and a file descriptor) for ever, and enough of them leave the server no
descriptor to accept anyone else with. `guarded_protocol` answers such a request 408 once `read_timeout` seconds
have passed since it could begin (the connection opened, or the previous response was sent), and refuses a
client's connection past `per_client` open ones at once (429), so that one address cannot take every descriptor.
What uvicorn's own parser refuses (a broken request line, header or Content-Length) is answered 400 with
`{"error": ...}`, as every other error of the server, not with uvicorn's plain text. The time a request's
translation takes is not reading: once a request has been read whole, no limit of this module applies to it.

The protocol is uvicorn's own choice (httptools where installed, else h11), subclassed: both keep the request being
read in `cycle` (None before the first request's headers are read) with `more_body` True until its body is read.
"""

import json
import logging

from uvicorn.protocols.http.auto import AutoHTTPProtocol

logger = logging.getLogger("vanilla_transformer.serve")
# seconds a client may take to send one request, headers and body; connections one client address may hold open
READ_TIMEOUT_S = 30.0
CONNECTIONS_PER_CLIENT = 256
# seconds a refused connection stays half-open, its input discarded, so that the refusal reaches the client (closed
# with the client's request unread, the system would reset the connection, and the client might never see it)
LINGER_S = 2.0


def error_bytes(status: int, reason: str, message: str) -> bytes:
    """A whole HTTP/1.1 response with `{"error": message}`, after which the server closes the connection."""
    body = json.dumps({"error": message}).encode()
    return (f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n"
            "connection: close\r\n\r\n").encode("ascii") + body


def guarded_protocol(read_timeout: float = READ_TIMEOUT_S, per_client: int | None = CONNECTIONS_PER_CLIENT):
    """uvicorn's HTTP protocol class with the module's limits: a request not read whole within `read_timeout`
    seconds is answered 408 and its connection closed; a client address with `per_client` connections open gets
    429 on another (None: no limit, as behind a proxy, where every connection comes from the proxy's address)."""
    open_connections: dict[str, int] = {}  # client address -> connections open, for this server

    class GuardedHTTPProtocol(AutoHTTPProtocol):
        def connection_made(self, transport):
            super().connection_made(transport)
            self.refused = False
            self.counted = None
            self.read_deadline = None
            address = self.client[0] if self.client else None
            if per_client is not None and address is not None:
                if open_connections.get(address, 0) >= per_client:
                    self.refuse(429, "Too Many Requests",
                                f"Too many connections from one client (at most {per_client} at once)")
                    return
                open_connections[address] = open_connections.get(address, 0) + 1
                self.counted = address
            self.arm_read_deadline()

        def connection_lost(self, exc):
            if self.counted is not None:
                left = open_connections[self.counted] - 1
                if left:
                    open_connections[self.counted] = left
                else:
                    del open_connections[self.counted]
                self.counted = None
            if self.read_deadline is not None:
                self.read_deadline.cancel()
                self.read_deadline = None
            super().connection_lost(exc)

        def data_received(self, data):
            if not self.refused:  # what comes after a refusal is not read
                super().data_received(data)

        def on_response_complete(self):
            super().on_response_complete()
            if not self.transport.is_closing():
                self.arm_read_deadline()  # for the next request on this connection

        def arm_read_deadline(self):
            if self.read_deadline is not None:
                self.read_deadline.cancel()
            self.read_deadline = self.loop.call_later(read_timeout, self.read_timed_out)

        def request_being_read(self) -> bool:
            """Whether the connection waits for (the rest of) a request: none begun, or one whose body is not all
            here. A request read whole and being answered is not waited for."""
            cycle = self.cycle
            return cycle is None or cycle.response_complete or cycle.more_body

        def read_timed_out(self):
            self.read_deadline = None
            if self.transport.is_closing() or not self.request_being_read():
                return
            cycle = self.cycle
            if cycle is not None and not cycle.response_complete and cycle.response_started:
                self.transport.close()  # the app has begun its answer: there is no other to send
                return
            if cycle is not None and not cycle.response_complete:
                cycle.keep_alive = False
            logger.info("%s: no whole request in %g s, answered 408",
                             self.client[0] if self.client else "a client", read_timeout)
            self.refuse(408, "Request Timeout", f"The request was not sent within {read_timeout:g} seconds")

        def send_400_response(self, msg: str):
            self.refuse(400, "Bad Request", msg.rstrip("."))

        def refuse(self, status: int, reason: str, message: str):
            """Answer `status` with `{"error": message}`, then close: at once where the transport cannot close
            only its sending side, else when the client closes its side or after `LINGER_S`."""
            self.refused = True
            self.transport.write(error_bytes(status, reason, message))
            if not self.transport.can_write_eof():
                self.transport.close()
                return
            self.transport.write_eof()
            self.loop.call_later(LINGER_S, self.transport.close)

    return GuardedHTTPProtocol


__all__ = ["CONNECTIONS_PER_CLIENT", "READ_TIMEOUT_S", "error_bytes", "guarded_protocol"]
