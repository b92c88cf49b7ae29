"""Hostile inputs against the real OTLP/gRPC receiver and a real Kafka
broker: a request over the span limit, one the queue cannot take whole,
concurrent calls over the bound, undecodable bodies. Each is refused with
the code the OTLP spec gives it (retryable or not), nothing of it is
half-sent, and a later good request flows."""

from __future__ import annotations

import threading
import time
import uuid

import pytest

import grpc  # noqa: E402  (the otlp-grpc extra, installed with the test extras)

from google.rpc import status_pb2  # noqa: E402  (grpcio-status's googleapis-common-protos)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from opentelemetry.trace import SpanKind  # noqa: E402
from test_otlp_grpc import call, events  # noqa: E402
from test_otlp_receiver import VLLM, sdk_spans  # noqa: E402

from phasemeter.integrations.otlp_grpc import DETAILS_KEY, GrpcReceiver  # noqa: E402
from phasemeter.integrations.otlp_receiver import Receiver  # noqa: E402
from ports import free_port  # noqa: E402
from phasemeter.producers import Meter  # noqa: E402

pytestmark = pytest.mark.integration


def body(rids: list[str]) -> bytes:
    t0 = time.time_ns() - 60 * 10**9
    return encode_spans(sdk_spans([("llm_request", SpanKind.SERVER, {**VLLM, "gen_ai.request.id": r}, t0,
                                    t0 + 10**9, False) for r in rids], {})).SerializeToString()


@pytest.fixture
def grx(kafka_bootstrap):
    topic = f"otlp-grpc-h-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=1000, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=1000, max_spans=50, log=lambda line: None).start()
    g = GrpcReceiver(rx, port=0, max_workers=2, max_concurrent_rpcs=2).start()
    g.topic, g.bootstrap = topic, kafka_bootstrap
    yield g
    if not rx.closing:
        rx.stop()


def test_over_the_span_limit_is_resource_exhausted_without_retry_info_and_nothing_is_sent(grx):
    code, details, trailers = call(grx, body([f"big-{i}" for i in range(51)]))
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and "50" in details
    assert DETAILS_KEY not in trailers and "google.rpc.retryinfo-bin" not in trailers  # not retryable
    assert call(grx, body(["after-big"]))[0] == grpc.StatusCode.OK
    assert [e["request_id"] for e in events(grx)] == ["after-big"]


def test_a_request_the_queue_cannot_take_whole_is_unavailable_with_retry_info_in_the_status():
    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=10, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=10, max_spans=10, log=lambda line: None).start()
    g = GrpcReceiver(rx, port=0).start()
    try:
        assert call(g, body([f"a-{i}" for i in range(6)]))[0] == grpc.StatusCode.OK
        code, _, trailers = call(g, body([f"b-{i}" for i in range(5)]))
        assert code == grpc.StatusCode.UNAVAILABLE
        status = status_pb2.Status.FromString(trailers[DETAILS_KEY])
        assert status.code == grpc.StatusCode.UNAVAILABLE.value[0]
        assert [d.type_url for d in status.details] == ["type.googleapis.com/google.rpc.RetryInfo"]
        s = meter.stats()
        assert (s.enqueued, s.dropped) == (6, 0)  # none of the 5 was queued, none dropped
    finally:
        rx.stop(flush_timeout_s=0.2)


def test_calls_over_the_concurrency_bound_are_refused_and_later_ones_flow(grx):
    results, start = [], threading.Barrier(12)

    def one(i):
        start.wait()
        results.append(call(grx, body([f"c-{i}-{j}" for j in range(40)]))[0])

    threads = [threading.Thread(target=one, args=(i,)) for i in range(12)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert len(results) == 12
    assert set(results) <= {grpc.StatusCode.OK, grpc.StatusCode.RESOURCE_EXHAUSTED, grpc.StatusCode.UNAVAILABLE}
    ok = results.count(grpc.StatusCode.OK)
    assert call(grx, body(["after-burst"]))[0] == grpc.StatusCode.OK
    stored = [e["request_id"] for e in events(grx)]
    assert len(stored) == 40 * ok + 1 and "after-burst" in stored  # each call stored whole or not at all


@pytest.mark.parametrize("raw", [b"\x0a\xff\xff\xff\xff\x0f", b"\x0b\x0c", b"\x0a\x02\x12\x05\x12"])
def test_undecodable_bodies_are_invalid_argument_and_the_server_keeps_serving(grx, raw):
    code, _, _ = call(grx, raw)
    assert code == grpc.StatusCode.INVALID_ARGUMENT
    assert call(grx, body(["after-junk"]))[0] == grpc.StatusCode.OK
    assert [e["request_id"] for e in events(grx)] == ["after-junk"]


def test_a_multi_member_gzip_message_is_refused_whole_never_half_read(grx):
    """gRPC undoes the compression itself; a message of two gzip members (no
    gRPC exporter sends one, but a hand-made client may) is refused by it,
    and neither member's spans is queued."""
    import gzip
    import struct

    import httpx  # with h2, pinned in constraints.txt (httpx's http2 extra)
    payload = gzip.compress(body(["mm-1"])) + gzip.compress(body(["mm-2"]))
    frame = b"\x01" + struct.pack(">I", len(payload)) + payload  # compressed flag, length, message
    with httpx.Client(http1=False, http2=True) as client:  # HTTP/2 with prior knowledge, as gRPC speaks it
        resp = client.post(f"http://127.0.0.1:{grx.port}/opentelemetry.proto.collector.trace.v1.TraceService/Export",
                           content=frame, headers={"content-type": "application/grpc", "te": "trailers",
                                                   "grpc-encoding": "gzip"})
    assert resp.headers.get("grpc-status") not in (None, "0"), resp.headers
    assert grx.rx.meter.stats().enqueued == 0
    assert call(grx, body(["after-mm"]))[0] == grpc.StatusCode.OK
    assert [e["request_id"] for e in events(grx)] == ["after-mm"]


def test_a_connection_that_never_speaks_http2_is_closed_after_the_read_timeout():
    import socket

    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=10, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=10, read_timeout_s=1.0, log=lambda line: None).start()
    g = GrpcReceiver(rx, port=0).start()
    try:
        with socket.create_connection(("127.0.0.1", g.port), timeout=30) as idle:
            t = time.monotonic()
            while idle.recv(4096):  # the server's SETTINGS, then nothing until it closes
                pass
            assert time.monotonic() - t < 10 * rx.read_timeout_s
        assert call(g, body([]))[0] == grpc.StatusCode.OK  # and it still serves
    finally:
        rx.stop(flush_timeout_s=0.2)


def test_calls_whose_message_never_arrives_whole_free_their_threads():
    """Two calls send part of a message and hold: with at most two calls
    taken, gRPC refuses every other (RESOURCE_EXHAUSTED) until their
    connections reach their maximum age and its grace; then calls flow."""
    import struct
    import threading

    import httpx  # with h2, pinned in constraints.txt (httpx's http2 extra)
    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=10, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=10, read_timeout_s=1.0, log=lambda line: None).start()
    g = GrpcReceiver(rx, port=0, max_workers=2, max_concurrent_rpcs=2, max_age_s=2.0).start()
    release, answers = threading.Event(), []

    def half_sent() -> None:
        def content():
            yield b"\x00" + struct.pack(">I", 1000) + b"\x0a" * 10  # 10 bytes of a 1000-byte message
            release.wait(120)
        try:
            with httpx.Client(http1=False, http2=True, timeout=120) as client:
                resp = client.post(f"http://127.0.0.1:{g.port}/opentelemetry.proto.collector.trace.v1."
                                   "TraceService/Export", content=content(),
                                   headers={"content-type": "application/grpc", "te": "trailers"})
                answers.append(resp.headers.get("grpc-status"))
        except httpx.HTTPError as exc:
            answers.append(type(exc).__name__)

    holders = [threading.Thread(target=half_sent) for _ in range(2)]
    try:
        for t in holders:
            t.start()
        deadline = time.monotonic() + 60
        while call(g, body([]))[0] != grpc.StatusCode.OK:
            assert time.monotonic() < deadline, "the half-sent calls still hold the server"
            time.sleep(0.2)
    finally:
        release.set()
        for t in holders:
            t.join(30)
        rx.stop(flush_timeout_s=0.2)
    assert len(answers) == 2 and "0" not in answers  # neither half-sent call was taken as a request
