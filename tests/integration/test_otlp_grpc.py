"""`phasemeter otlp`'s gRPC server on real services: spans made by the real
OpenTelemetry SDK, sent by its OTLP/gRPC exporter (the one vLLM uses by
default), become events on a real Kafka topic, read back with kafka-python.
Refusals are checked with a plain grpc channel, which shows the status code
the exporter would see without its retries. Expected values are the ones set
on the spans.
"""

from __future__ import annotations

import gzip
import os
import signal
import sys
import time
import uuid

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.trace.export import SpanExportResult
from opentelemetry.trace import SpanKind
from test_otlp_receiver import GENAI, VLLM, otlp_command, sdk_spans, topic_messages

from phasemeter.cli.main import main
from phasemeter.integrations.otlp_grpc import RETRY_INFO_1S, RETRY_INFO_KEY, GrpcReceiver
from phasemeter.integrations.otlp_receiver import Receiver
from ports import free_port
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration

EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"
MAX_BODY = 64 * 1024


@pytest.fixture
def grx(kafka_bootstrap):
    """A Receiver on an ephemeral HTTP port and its gRPC server on another."""
    topic, lines = f"otlp-grpc-{uuid.uuid4().hex[:10]}", []
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=1000, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=1000, max_body_bytes=MAX_BODY, log=lines.append).start()
    g = GrpcReceiver(rx, port=0).start()
    g.topic, g.bootstrap, g.lines = topic, kafka_bootstrap, lines
    yield g
    if not rx.closing:
        rx.stop()


def exporter(g: GrpcReceiver, **kw) -> OTLPSpanExporter:
    return OTLPSpanExporter(endpoint=f"127.0.0.1:{g.port}", insecure=True, timeout=10, **kw)


def call(g: GrpcReceiver, body: bytes, **kw) -> tuple[grpc.StatusCode, bytes | str, dict]:
    """One raw Export call: (code, response bytes or error details, trailing metadata)."""
    with grpc.insecure_channel(f"127.0.0.1:{g.port}") as channel:
        export = channel.unary_unary(EXPORT)
        try:
            resp, c = export.with_call(body, timeout=10, **kw)
            return c.code(), resp, dict(c.trailing_metadata() or ())
        except grpc.RpcError as exc:
            return exc.code(), exc.details(), dict(exc.trailing_metadata() or ())


def events(g: GrpcReceiver) -> list[dict]:
    assert g.rx.meter.flush(15)
    return topic_messages(g.bootstrap, g.topic)


def test_grpc_exporter_spans_become_events(grx):
    t0 = time.time_ns() - 60 * 10**9
    spans = sdk_spans([("llm_request", SpanKind.SERVER, VLLM, t0, t0 + 2_400_000_000, False),
                       ("chat gpt-x", SpanKind.CLIENT, GENAI, t0 + 10**9, t0 + 3 * 10**9, True),
                       ("GET /health", SpanKind.SERVER, {"http.route": "/health"}, t0, t0 + 10**6, False)],
                      {"service.instance.id": "vllm-0"})
    exp = exporter(grx, compression=grpc.Compression.Gzip)
    assert exp.export(spans) == SpanExportResult.SUCCESS
    exp.shutdown()

    got = {e["request_id"]: e for e in events(grx)}
    assert set(got) == {"cmpl-vllm-1", "chatcmpl-genai-1"}  # the health check span is ignored
    v, g = got["cmpl-vllm-1"], got["chatcmpl-genai-1"]
    assert (v["model"], v["input_tokens"], v["output_tokens"], v["ttft_s"], v["e2e_s"], v["queue_s"], v["t0"],
            v["status"], v["replica"]) == ("llama-3.1-8b", 1500, 120, 0.21, 2.4, 0.012, t0 / 1e9, "ok", "vllm-0")
    assert (g["model"], g["cached_input_tokens"], g["e2e_s"], g["finish_reason"], g["status"]) == \
        ("gpt-x", 256, 2.0, "length", "error")
    rx = grx.rx
    assert (rx.requests, rx.refused, rx.mapped, rx.ignored, sum(rx.rejected.values())) == (1, 0, 2, 1, 0)


def test_negative_duration_is_a_partial_success_and_not_published(grx):
    t0 = time.time_ns() - 60 * 10**9
    bad = {**VLLM, "gen_ai.request.id": "cmpl-bad", "gen_ai.latency.e2e": -0.5}
    spans = sdk_spans([("llm_request", SpanKind.SERVER, bad, t0, t0 + 10**9, False),
                       ("llm_request", SpanKind.SERVER, VLLM, t0, t0 + 10**9, False)], {})
    exp = exporter(grx)  # the exporter takes a partial success as a success: nothing to retry
    assert exp.export(spans) == SpanExportResult.SUCCESS
    exp.shutdown()
    assert grx.rx.rejected == {"impossible_order": 1} and grx.rx.mapped == 1
    code, body, _ = call(grx, encode_spans(spans[:1]).SerializeToString())  # what it answered
    assert code == grpc.StatusCode.OK
    partial = ExportTraceServiceResponse.FromString(body).partial_success
    assert partial.rejected_spans == 1
    assert partial.error_message.startswith("1 spans rejected: impossible_order=1; e.g. span ")
    assert [e["request_id"] for e in events(grx)] == ["cmpl-vllm-1"]


def test_requests_it_cannot_take(grx):
    code, details, _ = call(grx, b"\xff\xff\xff\xff")
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "protobuf" in details
    code, details, _ = call(grx, b"x" * (MAX_BODY + 1))  # over --max-body-bytes
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED and str(MAX_BODY) in details
    bomb = b"\x00" * (1024 * 1024)  # gzipped it is 1 KiB; it inflates to 1 MiB
    assert len(gzip.compress(bomb)) < MAX_BODY
    code, _, _ = call(grx, bomb, compression=grpc.Compression.Gzip)
    assert code == grpc.StatusCode.RESOURCE_EXHAUSTED
    code, body, _ = call(grx, b"", compression=grpc.Compression.Deflate)  # an empty request is fine, deflated too
    assert (code, body) == (grpc.StatusCode.OK, b"")
    # RESOURCE_EXHAUSTED is gRPC's own answer, before ours: only the INVALID_ARGUMENT is counted
    assert (grx.rx.refused, grx.rx.requests) == (1, 1) and events(grx) == []


def test_a_full_emitter_queue_answers_unavailable_with_retry_info():
    """Kafka unreachable: the queue fills; the next request is UNAVAILABLE
    with a 1 s RetryInfo (the exporter retries), none is dropped."""
    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=2, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=2, log=lambda line: None).start()
    g = GrpcReceiver(rx, port=0).start()
    try:
        t0 = time.time_ns() - 60 * 10**9
        spans = sdk_spans([("llm_request", SpanKind.SERVER, {**VLLM, "gen_ai.request.id": f"q-{i}"}, t0,
                            t0 + 10**9, False) for i in range(2)], {})
        body = encode_spans(spans).SerializeToString()
        assert call(g, body)[0] == grpc.StatusCode.OK
        code, details, trailers = call(g, body)
        assert code == grpc.StatusCode.UNAVAILABLE and "queue full" in details
        assert trailers[RETRY_INFO_KEY] == RETRY_INFO_1S
        assert meter.stats().dropped == 0 and rx.mapped == 2 and rx.refused == 1
    finally:
        rx.stop(flush_timeout_s=0.2)


def test_stop_flushes_what_was_taken_then_refuses(grx):
    t0 = time.time_ns() - 60 * 10**9
    spans = sdk_spans([("llm_request", SpanKind.SERVER, {**VLLM, "gen_ai.request.id": f"s-{i}"}, t0, t0 + 10**9,
                        False) for i in range(50)], {})
    exp = exporter(grx)
    assert exp.export(spans) == SpanExportResult.SUCCESS
    exp.shutdown()
    grx.rx.stop()  # no flush before: stop() does it
    got = topic_messages(grx.bootstrap, grx.topic)
    assert sorted(e["request_id"] for e in got) == sorted(f"s-{i}" for i in range(50))
    assert grx.lines[-1].startswith("otlp: 1 requests (0 refused); spans: 50 mapped, 0 rejected, 0 ignored; "
                                    "emitter: 50 sent, 0 dropped")
    assert call(grx, b"")[0] == grpc.StatusCode.UNAVAILABLE  # no longer listening


def test_grpc_port_without_grpcio_exits_2_naming_the_flag_and_extra(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "grpc", None)  # as if grpcio were not installed
    assert main(["otlp", "--grpc-port", "4317"]) == 2
    err = capsys.readouterr().err
    assert "--grpc-port 4317 needs grpcio" in err and "phasemeter[otlp-grpc]" in err


def test_the_command_serves_both_ports_until_sigterm(kafka_bootstrap, tmp_path):
    topic, port, grpc_port = f"otlp-cli-{uuid.uuid4().hex[:10]}", free_port(), free_port()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PHASEMETER_TOPIC": topic,
           "PHASEMETER_DATA_DIR": str(tmp_path)}
    with otlp_command(["--port", str(port), "--grpc-port", str(grpc_port), "--model", "llama-v1"],
                      env, grpc_port) as proc:
        t0 = time.time_ns() - 60 * 10**9
        attrs = {k: v for k, v in VLLM.items() if k != "gen_ai.response.model"}  # vLLM V1: no model
        exp = OTLPSpanExporter(endpoint=f"127.0.0.1:{grpc_port}", insecure=True, timeout=10)
        assert exp.export(sdk_spans([("llm_request", SpanKind.SERVER, attrs, t0, t0 + 10**9, False)], {})) \
            == SpanExportResult.SUCCESS
        exp.shutdown()
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert (f"listening for OTLP/HTTP on http://127.0.0.1:{port}/v1/traces, OTLP/gRPC on 127.0.0.1:{grpc_port}"
            in out), out
    assert "1 requests (0 refused); spans: 1 mapped, 0 rejected, 0 ignored; emitter: 1 sent" in out, out
    events = topic_messages(kafka_bootstrap, topic)  # envelopes unwrapped
    assert [(e["request_id"], e["model"]) for e in events] == [("cmpl-vllm-1", "llama-v1")]
