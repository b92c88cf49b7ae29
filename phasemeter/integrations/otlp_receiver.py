"""OTLP/HTTP trace receiver: POST /v1/traces -> otlp_map -> Meter.record -> Kafka.

Speaks the OTLP/HTTP protocol as exporters expect it: protobuf or JSON
bodies, gzip/deflate Content-Encoding, the response in the request's
encoding, `partial_success` naming the spans it could not map (never a 500
for bad spans), 400/413/415 for bodies it cannot take, and 503 with
Retry-After when the emitter's queue is full, so exporters retry instead of
losing the batch. Standard library only, besides the OTLP protobuf classes.

The Receiver also keeps the counts and the Meter for the OTLP/gRPC server
(otlp_grpc), which it stops with itself, so one counts line covers both.
"""

from __future__ import annotations

import collections
import http.server
import json
import threading
import zlib

from phasemeter.stream_jobs import reasons as R

from .otlp_map import DEFAULT_MAX_BODY, JSON, PROTOBUF, BadRequest, Mapped, map_request

PATH = "/v1/traces"
# google.rpc.Code of each refusal, for the Status body OTLP asks for.
_GRPC_CODE = {400: 3, 404: 5, 405: 12, 411: 3, 413: 8, 415: 3, 500: 13, 503: 14}


class Receiver:
    """One HTTP server thread pool in front of one Meter. `queue_size` is the
    bound the Meter was built with: a request whose events would not fit is
    answered 503 (retry later) rather than enqueued and dropped."""

    def __init__(self, meter, *, host: str = "127.0.0.1", port: int = 4318, queue_size: int = 10_000,
                 max_body_bytes: int = DEFAULT_MAX_BODY, default_model: str | None = None,
                 report_every: int = 100, log=print) -> None:
        if max_body_bytes < 1 or report_every < 1:
            raise ValueError("max_body_bytes and report_every must be positive")
        self.meter, self.queue_size, self.max_body_bytes = meter, queue_size, max_body_bytes
        self.default_model, self.report_every, self.log = default_model, report_every, log
        self.lock = threading.Condition()
        self.requests = self.refused = self.mapped = self.ignored = self.in_flight = 0
        self.closing = False
        self.rejected: collections.Counter = collections.Counter()
        self._stoppers: list = []  # other servers in front of this Meter (otlp_grpc), stopped with it
        self.server = http.server.ThreadingHTTPServer((host, port), _Handler)
        self.server.daemon_threads = True
        self.server.receiver = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{PATH}"

    def start(self) -> Receiver:
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.1},
                                        name="phasemeter-otlp", daemon=True)
        self._thread.start()
        return self

    def on_stop(self, stop) -> None:
        """`stop(grace_s)` is called by stop(), after no new request is taken
        and before the Meter is flushed: the gRPC server's."""
        self._stoppers.append(stop)

    def stop(self, flush_timeout_s: float = 10.0) -> None:
        """Stop taking requests, let those in hand finish, then flush and
        close the Meter. A request arriving meanwhile on a kept-alive
        connection gets 503 (gRPC: UNAVAILABLE), so its exporter retries
        rather than losing it."""
        with self.lock:
            self.closing = True
        if self._thread is not None:
            self.server.shutdown()
            self._thread.join()
        self.server.server_close()
        for stop in self._stoppers:
            stop(flush_timeout_s)
        with self.lock:
            self.lock.wait_for(lambda: not self.in_flight, timeout=flush_timeout_s)
        self.meter.close(flush_timeout_s)
        self.log(self.summary())

    def enter(self) -> bool:
        """A request starts; False once the receiver is stopping."""
        with self.lock:
            if self.closing:
                return False
            self.in_flight += 1
            return True

    def leave(self) -> None:
        with self.lock:
            self.in_flight -= 1
            self.lock.notify_all()

    def handle(self, mapped: Mapped) -> list[tuple[str, str, str]] | None:
        """Publish the events; the rejected spans, or None when the queue is full."""
        rejected = list(mapped.rejected)
        n = len(mapped.events)
        # A batch larger than the whole queue could never fit: it goes in, and what overflows is counted as dropped.
        if 0 < n <= self.queue_size and self.meter.stats().queued + n > self.queue_size:
            return None
        for e in mapped.events:
            try:
                if e["kind"] != "generation":  # one half of a P/D request (otlp_pd): its phase
                    _send_phase(self.meter, e)
                    continue
                self.meter.record(model=e["model"], input_tokens=e["input_tokens"],
                                  output_tokens=e["output_tokens"], t0=e["t0"], ttft_s=e["ttft_s"],
                                  e2e_s=e["e2e_s"], queue_s=e["queue_s"],
                                  cached_input_tokens=e["cached_input_tokens"], status=e["status"],
                                  finish_reason=e["finish_reason"], request_id=e["request_id"],
                                  replica=e["replica"])
            except ValueError as exc:  # the mapping should never let this through: a bug, kept visible
                rejected.append((e["request_id"], R.INTERNAL, str(exc)[:200]))
        with self.lock:
            self.requests += 1
            self.mapped += len(mapped.events) - (len(rejected) - len(mapped.rejected))
            self.ignored += mapped.ignored
            self.rejected.update(reason for _, reason, _ in rejected)
            report = self.requests % self.report_every == 0
        if report:
            self.log(self.summary())
        return rejected

    def count_refused(self) -> None:
        with self.lock:
            self.refused += 1

    def summary(self) -> str:
        s = self.meter.stats()
        with self.lock:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items()))
            return (f"otlp: {self.requests} requests ({self.refused} refused); spans: {self.mapped} mapped, "
                    f"{sum(self.rejected.values())} rejected{f' ({reasons})' if reasons else ''}, "
                    f"{self.ignored} ignored; emitter: {s.sent} sent, {s.dropped} dropped, "
                    f"{s.failed} failed, {s.queued} queued")


def export_response(rejected: list[tuple[str, str, str]]) -> bytes:
    """The protobuf ExportTraceServiceResponse: empty, or a partial success."""
    if not rejected:
        return b""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTracePartialSuccess,
                                                                          ExportTraceServiceResponse)
    return ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
        rejected_spans=len(rejected), error_message=partial_success_message(rejected))).SerializeToString()


def partial_success_message(rejected: list[tuple[str, str, str]]) -> str:
    by_reason = collections.Counter(reason for _, reason, _ in rejected)
    span_id, reason, detail = rejected[0]
    return (f"{len(rejected)} spans rejected: " + ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items()))
            + f"; e.g. span {span_id}: {reason}: {detail}")[:1000]


class _TooLarge(Exception):
    pass


def inflate(body: bytes, encoding: str, limit: int) -> bytes:
    """gzip or deflate (zlib-wrapped or raw) body, never more than `limit` bytes out."""
    wbits = 31 if encoding == "gzip" else (15 if body[:1] == b"\x78" else -15)
    d = zlib.decompressobj(wbits=wbits)
    try:
        out = d.decompress(body, limit + 1)
    except zlib.error as exc:
        raise BadRequest(f"body is not valid {encoding}: {exc}") from None
    if len(out) > limit:
        raise _TooLarge
    if not d.eof:
        raise BadRequest(f"{encoding} body is truncated")
    return out


def _status_protobuf(code: int, message: str) -> bytes:
    """google.rpc.Status{code=1, message=2}, encoded by hand: the OTLP package
    does not ship it, and it is two fields."""
    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            out.append((n & 0x7F) | (0x80 if n > 0x7F else 0))
            n >>= 7
            if not n:
                return bytes(out)
    text = message.encode("utf-8")
    return b"\x08" + varint(code) + b"\x12" + varint(len(text)) + text


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive: exporters reuse their connection
    server_version = "phasemeter-otlp"

    def log_message(self, fmt, *args) -> None:  # the receiver prints counts instead
        pass

    def do_POST(self) -> None:  # noqa: N802 (http.server's naming)
        rx: Receiver = self.server.receiver
        if not rx.enter():
            return self._refuse(503, "shutting down; retry later", retry_after=1)
        try:
            self._post(rx)
        except OSError:  # the client went away mid-answer
            self.close_connection = True
        except Exception as exc:  # a bug of ours: say so (500 is not retried), never reset the connection
            rx.log(f"otlp: internal error on a request: {exc!r}")
            self._refuse(500, f"internal error: {exc!r}"[:300])
        finally:
            rx.leave()

    def _post(self, rx: Receiver) -> None:
        if self.path.split("?", 1)[0] != PATH:
            return self._refuse(404, f"no such path; OTLP traces go to {PATH}")
        ctype = self._content_type()
        if ctype not in (PROTOBUF, JSON):
            return self._refuse(415, f"Content-Type {ctype or '(none)'!r}; send {PROTOBUF} or {JSON}")
        encoding = (self.headers.get("Content-Encoding") or "identity").strip().lower()
        if encoding not in ("identity", "gzip", "deflate"):
            return self._refuse(415, f"Content-Encoding {encoding!r}; send gzip, deflate or none")
        length = (self.headers.get("Content-Length") or "").strip()
        if not (length.isascii() and length.isdigit()):
            return self._refuse(411, "a valid Content-Length header is required")
        if int(length) > rx.max_body_bytes:  # refused before reading it
            return self._refuse(413, f"body of {int(length)} bytes is over the limit of {rx.max_body_bytes}")
        body = self.rfile.read(int(length))
        try:
            if len(body) < int(length):
                raise BadRequest(f"body ended after {len(body)} of {int(length)} bytes")
            if encoding != "identity":
                body = inflate(body, encoding, rx.max_body_bytes)
            mapped = map_request(body, ctype, default_model=rx.default_model)
        except _TooLarge:
            return self._refuse(413, f"decompressed body is over the limit of {rx.max_body_bytes} bytes", read=True)
        except BadRequest as exc:
            return self._refuse(400, str(exc), read=True)
        rejected = rx.handle(mapped)
        if rejected is None:
            return self._refuse(503, "emitter queue full; retry later", read=True, retry_after=1)
        self._send(200, ctype, self._response(ctype, rejected), close=False)

    def do_GET(self) -> None:  # noqa: N802
        self._refuse(405, f"only POST {PATH}")

    do_PUT = do_DELETE = do_PATCH = do_GET

    @staticmethod
    def _response(ctype: str, rejected: list) -> bytes:
        if ctype != JSON:
            return export_response(rejected)
        if not rejected:
            return b"{}"
        return json.dumps({"partialSuccess": {"rejectedSpans": str(len(rejected)),  # proto3 JSON: int64 as a string
                                              "errorMessage": partial_success_message(rejected)}}).encode()

    def _content_type(self) -> str:
        return (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()

    def _refuse(self, status: int, message: str, read: bool = False, retry_after: int | None = None) -> None:
        """A google.rpc.Status in the request's encoding (JSON when it has none we speak)."""
        self.server.receiver.count_refused()
        ctype = PROTOBUF if self._content_type() == PROTOBUF else JSON
        code = _GRPC_CODE[status]
        body = (_status_protobuf(code, message) if ctype == PROTOBUF
                else json.dumps({"code": code, "message": message}).encode())
        # An unread body would be parsed as the next request: close instead.
        self._send(status, ctype, body, close=not read, retry_after=retry_after)

    def _send(self, status: int, ctype: str, body: bytes, close: bool, retry_after: int | None = None) -> None:
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


def _send_phase(meter, e: dict) -> None:
    """A phase event of otlp_pd through the emitter's phase calls."""
    if e["kind"] == "start":
        meter.start(model=e["model"], input_tokens=e["input_tokens"], t0=e["t0"], request_id=e["request_id"],
                    cached_input_tokens=e.get("cached_input_tokens"), queue_s=e.get("queue_s"),
                    replica=e.get("replica"))
        return
    if "t_first" in e:
        meter.first_token(e["request_id"], t_first=e["t_first"])
    meter.end(e["request_id"], output_tokens=e["output_tokens"], t_end=e["t_end"], status=e["status"],
              finish_reason=e.get("finish_reason"))
