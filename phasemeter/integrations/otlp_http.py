"""The HTTP side of the OTLP/HTTP receiver (otlp_receiver): a server of a
fixed pool of threads, and the handler of POST /v1/traces.

Bounded, whatever the callers do:
  * at most `workers` connections are served at once, each by a thread of a
    fixed pool; one more is answered 503 with Retry-After at once (OTLP/HTTP
    exporters retry 503) and closed, never given a thread of its own;
  * a request's line, then its headers, then its body must each arrive
    within `read_timeout_s` (deadlines, not timeouts per read): an idle
    keep-alive connection, or a request sent in part, or a byte at a time,
    frees its thread after that time;
  * `Host` must name this listener (phasemeter/callers.py), or 403: a web page
    re-pointed at 127.0.0.1 by DNS rebinding cannot post to it.
Standard library only.
"""

from __future__ import annotations

import http.server
import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

from phasemeter.callers import host_allowed

from .otlp_map import JSON, PROTOBUF, BadRequest, TooManySpans
from .otlp_wire import TooLarge, status_protobuf

PATH = "/v1/traces"
# google.rpc.Code of each refusal, for the Status body OTLP asks for.
_GRPC_CODE = {400: 3, 403: 7, 404: 5, 405: 12, 408: 4, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}
_BUSY_BODY = json.dumps({"code": 14, "message": "every worker of the receiver is busy; retry later"}).encode()
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class PoolServer(http.server.HTTPServer):
    """http.server with a fixed pool of `workers` threads instead of one
    thread per connection (ThreadingHTTPServer)."""

    def __init__(self, address, handler, workers: int) -> None:
        super().__init__(address, handler)
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix="phasemeter-otlp-http")
        self._slots = threading.BoundedSemaphore(workers)
        self._open: set = set()  # connections being served, for close_connections()
        self._open_lock = threading.Lock()
        self.busy = 0  # connections answered 503 because every worker was taken

    def process_request(self, request, client_address) -> None:
        if not self._slots.acquire(blocking=False):
            self.busy += 1
            try:
                request.settimeout(1.0)
                request.sendall(_BUSY)
                request.shutdown(socket.SHUT_WR)
            except OSError:
                pass
            self.shutdown_request(request)
            return
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request, client_address) -> None:
        with self._open_lock:
            self._open.add(request)
        try:
            self.finish_request(request, client_address)
        except Exception:  # noqa: BLE001 (socketserver's own rule: a connection's error ends that connection)
            self.handle_error(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)
            self.shutdown_request(request)
            self._slots.release()

    def close_connections(self, timeout_s: float) -> None:
        """End every connection still open (kept alive, waiting for a next
        request), then wait up to `timeout_s` for the workers: called once no
        request is in hand, so stopping never waits out a read timeout."""
        with self._open_lock:
            conns = list(self._open)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        deadline = time.monotonic() + timeout_s
        for _ in range(self.workers):
            if not self._slots.acquire(timeout=max(0.0, deadline - time.monotonic())):
                break

    def handle_error(self, request, client_address) -> None:
        pass  # a reset connection is the client's business; the receiver counts what it answers

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False)  # kept-alive connections: close_connections(), or their read timeout


class TimedOut(Exception):
    pass


class DeadlineReader(io.RawIOBase):
    """A connection's reads, each given only the time left until the
    handler's `deadline`: a timeout per read alone lets a client that sends
    a byte at a time hold a worker forever."""

    def __init__(self, sock, handler) -> None:
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        left = self._handler.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        self._sock.settimeout(left)
        return self._sock.recv_into(buf)


class Handler(http.server.BaseHTTPRequestHandler):
    """Deadlines, each `read_timeout_s` long: for a kept-alive connection's
    next request line; from it, for the headers; from them, for the body."""

    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse their connection
    server_version = "phasemeter-otlp"

    def setup(self) -> None:
        self.timeout = self.server.receiver.read_timeout_s
        super().setup()
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.timeout  # for the request line
        super().handle_one_request()

    def parse_request(self) -> bool:
        self.deadline = time.monotonic() + self.timeout  # for the headers
        return super().parse_request()

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
