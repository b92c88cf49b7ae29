"""OTLP/HTTP trace receiver: POST /v1/traces -> otlp_map -> Meter -> Kafka.

Speaks the OTLP/HTTP protocol as exporters expect it: protobuf or JSON
bodies, gzip/deflate Content-Encoding, the response in the request's
encoding, `partial_success` counting the spans it could not map (never a 500
for bad spans), 400/413/415 for bodies it cannot take, and 503 with
Retry-After when the emitter's queue cannot take the whole request, so
exporters retry instead of losing the batch. A request is queued whole or
not at all (Meter.put_all): nothing of a refused request is half-sent. The
server and its limits (a fixed pool of workers, read timeouts, the Host
check) are otlp_http's. Standard library only, besides the OTLP protobuf
classes.

The Receiver also keeps the counts and the Meter for the OTLP/gRPC server
(otlp_grpc), which it stops with itself, so one counts line covers both.
"""

from __future__ import annotations

import collections
import json
import threading

from phasemeter.callers import allowed_names
from phasemeter.stream_jobs import reasons as R

from .bounded_http import PoolServer
from .otlp_http import PATH, Handler
from .otlp_map import DEFAULT_MAX_BODY, DEFAULT_MAX_SPANS, JSON, Mapped, map_request
from .otlp_wire import inflate

DEFAULT_WORKERS = 16
DEFAULT_READ_TIMEOUT_S = 10.0
# Requests decoded at once, both transports together. Decoding holds the GIL,
# so more at once would not finish sooner, only hold more memory: up to about
# 30 x the body each (bench/bench_otlp_limits.py), however many workers wait.
DECODERS = 2


class Busy(Exception):
    """No decoder came free within the read timeout (HTTP 503, gRPC UNAVAILABLE: retried)."""


class Receiver:
    Busy = Busy  # for the transports, which do not import this module (it imports theirs)
    """One HTTP server of `workers` threads in front of one Meter.
    `queue_size` is the bound the Meter was built with: a request whose
    events do not all fit is answered 503 (retry later). `max_spans` (at most
    `queue_size`, so a request that passes it can fit) bounds one request;
    over it, 413. `allowed_hosts`: the Host names served (default: those of
    `host`, callers.allowed_names)."""

    def __init__(self, meter, *, host: str = "127.0.0.1", port: int = 4318, queue_size: int = 10_000,
                 max_body_bytes: int = DEFAULT_MAX_BODY, max_spans: int | None = None,
                 default_model: str | None = None, report_every: int = 100, workers: int = DEFAULT_WORKERS,
                 read_timeout_s: float = DEFAULT_READ_TIMEOUT_S, allowed_hosts: frozenset[str] | None = None,
                 log=print) -> None:
        max_spans = min(DEFAULT_MAX_SPANS, queue_size) if max_spans is None else max_spans
        if max_body_bytes < 1 or report_every < 1 or workers < 1 or not read_timeout_s > 0:
            raise ValueError("max_body_bytes, report_every, workers and read_timeout_s must be positive")
        if not 1 <= max_spans <= queue_size:
            raise ValueError(f"max_spans must be in 1..queue_size ({queue_size}): a larger request could never "
                             f"be queued, got {max_spans}")
        self.meter, self.queue_size, self.max_body_bytes = meter, queue_size, max_body_bytes
        self.max_spans, self.read_timeout_s = max_spans, float(read_timeout_s)
        self.allowed_hosts = allowed_names(host, "") if allowed_hosts is None else allowed_hosts
        self.default_model, self.report_every, self.log = default_model, report_every, log
        self.lock = threading.Condition()
        self.requests = self.refused = self.mapped = self.ignored = self.in_flight = 0
        self.closing = False
        self.decoding = threading.BoundedSemaphore(DECODERS)
        self.rejected: collections.Counter = collections.Counter()
        self.labels_dropped: collections.Counter = collections.Counter()
        self._stoppers: list = []  # other servers in front of this Meter (otlp_grpc), stopped with it
        self.server = PoolServer((host, port), Handler, workers, self.read_timeout_s, name="phasemeter-otlp-http")
        self.server.receiver = self
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}{PATH}"

    @property
    def busy_refusals(self) -> int:
        """Connections answered 503 at once because every worker was taken."""
        return self.server.busy

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
        self.server.close_connections(1.0)  # kept-alive ones: their exporters reconnect (and get refused)
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

    def decode(self, body: bytes, ctype: str, encoding: str = "identity") -> Mapped:
        """Inflate and map one request body, DECODERS at a time. Busy when no
        decoder comes free within the read timeout; BadRequest (and its
        kinds) and TooLarge as inflate and map_request raise them."""
        if not self.decoding.acquire(timeout=self.read_timeout_s):
            raise Busy
        try:
            if encoding != "identity":
                body = inflate(body, encoding, self.max_body_bytes)
            return map_request(body, ctype, default_model=self.default_model, max_spans=self.max_spans)
        finally:
            self.decoding.release()

    def handle(self, mapped: Mapped) -> tuple[list[tuple[str, str, str]], collections.Counter] | None:
        """Queue the events, all or none: the rejected spans and the labels
        dropped, or None when the queue cannot take them all (nothing queued)."""
        rejected = list(mapped.rejected)
        batch = self.meter.batch()
        for e in mapped.events:
            try:
                if e["kind"] != "generation":  # one half of a P/D request (otlp_pd): its phase
                    _send_phase(batch, e)
                    continue
                batch.record(model=e["model"], input_tokens=e["input_tokens"],
                             output_tokens=e["output_tokens"], t0=e["t0"], ttft_s=e["ttft_s"],
                             e2e_s=e["e2e_s"], queue_s=e["queue_s"],
                             cached_input_tokens=e["cached_input_tokens"], status=e["status"],
                             finish_reason=e["finish_reason"], request_id=e["request_id"],
                             replica=e["replica"], kv_transfer_s=e.get("kv_transfer_s"),
                             streamed=e.get("streamed"))
            except ValueError as exc:  # the mapping should let none through; refused with the emitter's reason
                rejected.append((e["request_id"], getattr(exc, "reason", R.INTERNAL), str(exc)[:200]))
        if not self.meter.put_all(batch):
            return None
        with self.lock:
            self.requests += 1
            self.mapped += len(mapped.events) - (len(rejected) - len(mapped.rejected))
            self.ignored += mapped.ignored
            self.rejected.update(reason for _, reason, _ in rejected)
            self.labels_dropped.update(mapped.labels_dropped)
            report = self.requests % self.report_every == 0
        if report:
            self.log(self.summary())
        return rejected, mapped.labels_dropped

    def response(self, ctype: str, answer) -> bytes:
        """The ExportTraceServiceResponse of a handled request, in `ctype`."""
        rejected, dropped = answer
        if ctype != JSON:
            return export_response(rejected, dropped)
        message = partial_success_message(rejected, dropped)
        if not message:
            return b"{}"
        partial = {"errorMessage": message}
        if rejected:  # proto3 JSON: int64 as a string, and a zero left out
            partial["rejectedSpans"] = str(len(rejected))
        return json.dumps({"partialSuccess": partial}).encode()

    def count_refused(self) -> None:
        with self.lock:
            self.refused += 1

    def summary(self) -> str:
        s = self.meter.stats()
        with self.lock:
            reasons = ", ".join(f"{k}={v}" for k, v in sorted(self.rejected.items()))
            dropped = ", ".join(f"{k}={v}" for k, v in sorted(self.labels_dropped.items()))
            return (f"otlp: {self.requests} requests ({self.refused} refused); spans: {self.mapped} mapped, "
                    f"{sum(self.rejected.values())} rejected{f' ({reasons})' if reasons else ''}, "
                    f"{self.ignored} ignored; emitter: {s.sent} sent, {s.dropped} dropped, {s.failed} failed, "
                    f"{s.queued} queued; labels left out: {sum(self.labels_dropped.values())}"
                    f"{f' ({dropped})' if dropped else ''}; connections refused busy: {self.busy_refusals}")


def export_response(rejected: list[tuple[str, str, str]], dropped: collections.Counter | None = None) -> bytes:
    """The protobuf ExportTraceServiceResponse: empty, or a partial success
    (rejected_spans 0 with a message: a warning, as OTLP allows, for labels
    dropped from spans that were taken)."""
    message = partial_success_message(rejected, dropped)
    if not message:
        return b""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (ExportTracePartialSuccess,
                                                                          ExportTraceServiceResponse)
    return ExportTraceServiceResponse(partial_success=ExportTracePartialSuccess(
        rejected_spans=len(rejected), error_message=message)).SerializeToString()


def partial_success_message(rejected: list[tuple[str, str, str]], dropped: collections.Counter | None = None) -> str:
    """The count per reason and one example; then the optional labels left
    out, per field. "" when there is nothing to say."""
    parts = []
    if rejected:
        by_reason = collections.Counter(reason for _, reason, _ in rejected)
        span_id, reason, detail = rejected[0]
        parts.append(f"{len(rejected)} spans rejected: " + ", ".join(f"{k}={v}" for k, v in sorted(by_reason.items()))
                     + f"; e.g. span {span_id}: {reason}: {detail}")
    if dropped:
        parts.append(f"{sum(dropped.values())} optional labels left out (not 1..limit characters of UTF-8 text): "
                     + ", ".join(f"{k}={v}" for k, v in sorted(dropped.items())))
    return "; ".join(parts)[:1000]


def _send_phase(batch, e: dict) -> None:
    """A phase event of otlp_pd through the emitter's phase calls (into the
    request's all-or-none batch)."""
    if e["kind"] == "start":
        batch.start(model=e["model"], input_tokens=e["input_tokens"], t0=e["t0"], request_id=e["request_id"],
                    cached_input_tokens=e.get("cached_input_tokens"), queue_s=e.get("queue_s"),
                    replica=e.get("replica"), prefill_replica=e.get("prefill_replica"),
                    kv_transfer_s=e.get("kv_transfer_s"))
        return
    if "t_first" in e:
        batch.first_token(e["request_id"], t_first=e["t_first"])
    batch.end(e["request_id"], output_tokens=e["output_tokens"], t_end=e["t_end"], status=e["status"],
              finish_reason=e.get("finish_reason"), decode_replica=e.get("decode_replica"),
              kv_transfer_s=e.get("kv_transfer_s"))
