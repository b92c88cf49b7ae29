"""http.server, bounded whatever the callers do. Standard library only.

  * `PoolServer`: a fixed pool of `workers` threads instead of one thread
    per connection (ThreadingHTTPServer); one more connection is answered
    503 with Retry-After at once and closed, never given a thread;
  * `BoundedHandler`: a deadline of `timeout` seconds for a kept-alive
    connection's next request line, then for its headers (a timeout per
    read alone lets a client that sends a byte at a time hold a worker
    forever), and its own bounds on the head: MAX_HEAD_BYTES and
    MAX_HEADERS, whatever http.client's process-wide limits were set to.
    A subclass sets `deadline` again for the body, once it knows its size.
"""

from __future__ import annotations

import http.server
import io
import json
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

_BUSY_BODY = json.dumps({"code": 14, "message": "every worker is busy; retry later"}).encode()
_BUSY = (b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Type: application/json\r\n"
         b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(_BUSY_BODY), _BUSY_BODY))


class PoolServer(http.server.HTTPServer):
    """http.server with a fixed pool of `workers` threads instead of one
    thread per connection (ThreadingHTTPServer)."""

    def __init__(self, address, handler, workers: int, read_timeout_s: float,
                 name: str = "phasemeter-http") -> None:
        super().__init__(address, handler)
        self.read_timeout_s = read_timeout_s
        self.workers = workers
        self._pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
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
        pass  # a reset connection is the client's business; the handler counts what it answers

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False)  # kept-alive connections: close_connections(), or their read timeout


# The server's own bounds on a request's head. http.server reads headers
# with http.client, whose count limit is a process-wide global that other
# libraries raise (clickhouse_connect sets it to 10,000 on import).
MAX_HEAD_BYTES = 128 * 1024  # the request line (http.server: 64 KiB) and the headers
MAX_HEADERS = 100


class HeadTooLarge(Exception):
    pass


class DeadlineReader(io.RawIOBase):
    """A connection's reads, each given only the time left until the
    handler's `deadline` (a timeout per read alone lets a client that sends
    a byte at a time hold a worker forever) and, while the head is read, no
    more than what is left of the handler's `head_budget` bytes."""

    def __init__(self, sock, handler) -> None:
        self._sock, self._handler = sock, handler

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        h = self._handler
        left = h.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request did not arrive in time")
        size = len(buf)
        if h.head_budget is not None:
            if h.head_budget <= 0:
                raise HeadTooLarge
            size = min(size, h.head_budget)
        self._sock.settimeout(left)
        n = self._sock.recv_into(buf, size)
        if h.head_budget is not None:
            h.head_budget -= n
        return n


class BoundedHandler(http.server.BaseHTTPRequestHandler):
    """Deadlines, each `timeout` long (`timeout` is the server's `read_timeout_s`)."""

    def setup(self) -> None:
        self.timeout = self.server.read_timeout_s
        super().setup()
        self.rfile = io.BufferedReader(DeadlineReader(self.connection, self))

    def handle_one_request(self) -> None:
        self.deadline = time.monotonic() + self.timeout  # for the request line
        self.head_budget = MAX_HEAD_BYTES
        try:
            super().handle_one_request()
        except HeadTooLarge:
            self.close_connection = True
            self.connection.settimeout(self.timeout)  # the answer gets the whole timeout
            try:
                self.send_error(431, f"request line and headers over {MAX_HEAD_BYTES} bytes")
            except OSError:
                pass

    def parse_request(self) -> bool:
        self.deadline = time.monotonic() + self.timeout  # for the headers
        if not super().parse_request():
            return False
        self.head_budget = None  # the body is bounded by its Content-Length
        if len(self.headers) > MAX_HEADERS:
            self.send_error(431, f"over {MAX_HEADERS} headers")
            return False
        return True
