"""The HTTP side of the OTLP/HTTP receiver (otlp_receiver): the handler of
POST /v1/traces, on bounded_http's server.

Bounded, whatever the callers do (bounded_http):
  * at most `workers` connections are served at once, each by a thread of a
    fixed pool; one more is answered 503 with Retry-After at once (OTLP/HTTP
    exporters retry 503) and closed, never given a thread of its own;
  * a request's line, then its headers, then its body must each arrive
    within `read_timeout_s` (deadlines, not timeouts per read): an idle
    keep-alive connection, or a request sent in part, or a byte at a time,
    frees its thread after that time; its head is bounded in bytes and
    headers, whatever http.client was told;
  * `Host` must name this listener (phasemeter/callers.py), or 403: a web page
    re-pointed at 127.0.0.1 by DNS rebinding cannot post to it.
Standard library only.
"""

from __future__ import annotations

import json
import time

from phasemeter.callers import host_allowed

from .bounded_http import BoundedHandler
from .otlp_map import JSON, PROTOBUF, BadRequest, TooManySpans
from .otlp_wire import TooLarge, status_protobuf

PATH = "/v1/traces"
# google.rpc.Code of each refusal, for the Status body OTLP asks for.
_GRPC_CODE = {400: 3, 403: 7, 404: 5, 405: 12, 408: 4, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}


class TimedOut(Exception):
    pass


class Handler(BoundedHandler):
    """POST /v1/traces. The body's deadline is set once its headers are in."""

    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse their connection
    server_version = "phasemeter-otlp"

    def log_message(self, fmt, *args) -> None:  # the receiver prints counts instead
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        rx = self.server.receiver
        if not host_allowed(self.headers.get("Host"), rx.allowed_hosts):
            return self._refuse(403, f"Host {self.headers.get('Host')!r} is not a name this receiver serves; "
                                     "add it to PHASEMETER_ALLOWED_HOSTS")
        if not rx.enter():
            return self._refuse(503, "shutting down; retry later", retry_after=1)
        try:
            self._post(rx)
        except TimedOut:
            self._refuse(408, f"the body did not arrive within {rx.read_timeout_s:g} s")
        except OSError:  # the client went away, or a read timed out
            self.close_connection = True
        except Exception as exc:  # a bug of ours: say so (500 is not retried), never reset the connection
            rx.log(f"otlp: internal error on a request: {exc!r}")
            self._refuse(500, f"internal error: {exc!r}"[:300])
        finally:
            rx.leave()

    def _post(self, rx) -> None:
        if self.path.split("?", 1)[0] != PATH:
            return self._refuse(404, f"no such path; OTLP traces go to {PATH}")
        ctype = self._content_type()
        if ctype not in (PROTOBUF, JSON):
            return self._refuse(415, f"Content-Type {ctype or '(none)'!r}; send {PROTOBUF} or {JSON}")
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate"):
            return self._refuse(415, f"Content-Encoding {encoding!r}; send gzip, deflate or none")
        length = (self.headers.get("Content-Length") or "").strip()
        if not (length.isascii() and length.isdigit() and len(length) < 19):
            return self._refuse(411, "a valid Content-Length header is required")
        if int(length) > rx.max_body_bytes:  # refused before reading it
            return self._refuse(413, f"body of {int(length)} bytes is over the limit of {rx.max_body_bytes}")
        self.deadline = time.monotonic() + rx.read_timeout_s  # for the body
        body = self._read(int(length))
        try:
            if len(body) < int(length):
                raise BadRequest(f"body ended after {len(body)} of {int(length)} bytes")
            mapped = rx.decode(body, ctype, encoding)
        except rx.Busy:
            return self._refuse(503, "every decoder is busy; retry later", read=True, retry_after=1)
        except TooLarge:
            return self._refuse(413, f"decompressed body is over the limit of {rx.max_body_bytes} bytes", read=True)
        except TooManySpans as exc:
            return self._refuse(413, str(exc), read=True)
        except BadRequest as exc:
            return self._refuse(400, str(exc), read=True)
        answer = rx.handle(mapped)
        if answer is None:
            return self._refuse(503, "emitter queue full; retry later", read=True, retry_after=1)
        self._send(200, ctype, rx.response(ctype, answer), close=False)

    def _read(self, n: int) -> bytes:
        """n bytes of body, or fewer if the client closed; TimedOut past the deadline."""
        buf, got = bytearray(n), 0
        view = memoryview(buf)
        try:
            while got < n:
                k = self.rfile.readinto1(view[got:])
                if not k:
                    break
                got += k
        except TimeoutError:
            raise TimedOut from None
        finally:
            view.release()
        return bytes(buf[:got]) if got < n else bytes(buf)

    def do_GET(self) -> None:  # noqa: N802
        self._refuse(405, f"only POST {PATH}")

    do_PUT = do_DELETE = do_PATCH = do_GET

    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def _refuse(self, status: int, message: str, read: bool = False, retry_after: int | None = None) -> None:
        """A google.rpc.Status in the request's encoding (JSON when it has none we speak)."""
        self.server.receiver.count_refused()
        ctype = PROTOBUF if self._content_type() == PROTOBUF else JSON
        code = _GRPC_CODE[status]
        body = (status_protobuf(code, message) if ctype == PROTOBUF
                else json.dumps({"code": code, "message": message}).encode())
        # An unread body would be parsed as the next request: close instead.
        self._send(status, ctype, body, close=not read, retry_after=retry_after)

    def _send(self, status: int, ctype: str, body: bytes, close: bool, retry_after: int | None = None) -> None:
        self.connection.settimeout(self.timeout)  # a write gets the whole timeout, not what a read left
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        if retry_after is not None:
            self.send_header("Retry-After", str(retry_after))
        if status == 405:
            self.send_header("Allow", "POST")
        if close:
            self.send_header("Connection", "close")
            self.close_connection = True
        self.end_headers()
        self.wfile.write(body)
