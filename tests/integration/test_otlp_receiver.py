"""`phasemeter otlp`'s receiver on real services: spans made by the real
OpenTelemetry SDK and sent by its OTLP/HTTP exporter (protobuf, gzip), and
OTLP-JSON bodies, become events on a real Kafka topic, read back with
kafka-python. Expected values are the ones set on the spans.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

import pytest
from kafka import KafkaConsumer, TopicPartition
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from kafka_events import unwrap
from phasemeter.integrations.otlp_receiver import Receiver
from ports import free_port
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration

# Exactly vLLM's attribute names (vllm/tracing SpanAttributes) on its llm_request span.
VLLM = {"gen_ai.request.id": "cmpl-vllm-1", "gen_ai.response.model": "llama-3.1-8b",
        "gen_ai.usage.prompt_tokens": 1500, "gen_ai.usage.completion_tokens": 120,
        "gen_ai.latency.time_in_queue": 0.012, "gen_ai.latency.time_to_first_token": 0.21,
        "gen_ai.latency.e2e": 2.4, "gen_ai.latency.time_in_model_prefill": 0.19,
        "gen_ai.latency.time_in_model_decode": 2.1, "gen_ai.latency.time_in_scheduler": 0.02}
# GenAI semantic conventions (semantic-conventions-genai v0.1.0) on a client inference span.
GENAI = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-x",
         "gen_ai.response.id": "chatcmpl-genai-1", "gen_ai.usage.input_tokens": 800,
         "gen_ai.usage.output_tokens": 40, "gen_ai.usage.cache_read.input_tokens": 256,
         "gen_ai.response.time_to_first_chunk": 0.33, "gen_ai.response.finish_reasons": ("length",)}


@pytest.fixture
def rx(kafka_bootstrap):
    topic = f"otlp-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=1000, flush_timeout_s=10)
    receiver = Receiver(meter, port=0, queue_size=1000, max_body_bytes=64 * 1024, log=lambda line: None).start()
    receiver.topic, receiver.bootstrap = topic, kafka_bootstrap
    yield receiver
    receiver.stop()


def topic_events(rx) -> list[dict]:
    assert rx.meter.flush(15)
    return topic_messages(rx.bootstrap, rx.topic)


def topic_messages(bootstrap: str, topic: str) -> list[dict]:
    """Every message on the topic, read up to its end offsets (so an absent
    event is known absent, without waiting for a timeout)."""
    consumer = KafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
    try:
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic) or ()]
        if not parts:  # nothing was ever sent to it
            return []
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        out, deadline = [], time.monotonic() + 15
        while any(consumer.position(tp) < end[tp] for tp in parts) and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=500).values():
                out += [e for r in records for e in unwrap(r.value)]
        return out
    finally:
        consumer.close()


def sdk_spans(specs, resource: dict) -> list:
    """Finished spans made by the real SDK: (name, kind, attributes, start_ns, end_ns, error)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create(resource))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("test")
    for name, kind, attrs, start, end, error in specs:
        span = tracer.start_span(name, kind=kind, attributes=attrs, start_time=start)
        if error:
            span.set_status(Status(StatusCode.ERROR, "upstream 500"))
        span.end(end_time=end)
    provider.shutdown()
    return memory.get_finished_spans()


def post(url: str, body: bytes, content_type: str, **headers) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def test_sdk_exporter_spans_become_events(rx):
    t0 = time.time_ns() - 60 * 10**9
    spans = sdk_spans([("llm_request", SpanKind.SERVER, VLLM, t0, t0 + 2_400_000_000, False),
                       ("chat gpt-x", SpanKind.CLIENT, GENAI, t0 + 10**9, t0 + 3 * 10**9, True),
                       ("GET /health", SpanKind.SERVER, {"http.route": "/health"}, t0, t0 + 10**6, False)],
                      {"service.instance.id": "vllm-0"})
    exporter = OTLPSpanExporter(endpoint=rx.url, compression=Compression.Gzip, timeout=10)
    assert exporter.export(spans) == SpanExportResult.SUCCESS
    exporter.shutdown()

    got = {e["request_id"]: e for e in topic_events(rx)}
    assert set(got) == {"cmpl-vllm-1", "chatcmpl-genai-1"}  # the health check span is ignored
    v, g = got["cmpl-vllm-1"], got["chatcmpl-genai-1"]
    assert (v["model"], v["input_tokens"], v["output_tokens"], v["cached_input_tokens"]) == ("llama-3.1-8b", 1500, 120, None)
    assert (v["ttft_s"], v["e2e_s"], v["queue_s"], v["t0"], v["status"]) == (0.21, 2.4, 0.012, t0 / 1e9, "ok")
    assert (g["model"], g["input_tokens"], g["output_tokens"], g["cached_input_tokens"]) == ("gpt-x", 800, 40, 256)
    assert (g["ttft_s"], g["e2e_s"], g["queue_s"], g["finish_reason"], g["status"]) == (0.33, 2.0, None, "length", "error")
    assert g["t0"] == (t0 + 10**9) / 1e9 and v["replica"] == g["replica"] == "vllm-0"
    assert (rx.mapped, rx.ignored, sum(rx.rejected.values())) == (2, 1, 0)


def test_negative_durations_are_a_partial_success_and_not_published(rx):
    t0 = time.time_ns() - 60 * 10**9
    bad = {**VLLM, "gen_ai.request.id": "cmpl-bad", "gen_ai.latency.e2e": -0.5}
    spans = sdk_spans([("llm_request", SpanKind.SERVER, bad, t0, t0 + 10**9, False),
                       ("llm_request", SpanKind.SERVER, VLLM, t0, t0 + 10**9, False)], {})
    status, headers, body = post(rx.url, encode_spans(spans).SerializeToString(), "application/x-protobuf")
    assert status == 200 and headers["Content-Type"] == "application/x-protobuf"
    resp = ExportTraceServiceResponse.FromString(body)
    assert resp.partial_success.rejected_spans == 1
    assert "1 spans rejected: impossible_order=1" in resp.partial_success.error_message
    assert [e["request_id"] for e in topic_events(rx)] == ["cmpl-vllm-1"]


def test_otlp_json_body(rx):
    t0 = time.time_ns() - 60 * 10**9

    def kv(key, value):
        kind = {int: "intValue", float: "doubleValue", str: "stringValue"}[type(value)]
        return {"key": key, "value": {kind: str(value) if kind == "intValue" else value}}

    def span(span_id, attrs, start, end):
        return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": span_id, "name": "llm_request",
                "kind": 2, "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
                "attributes": [kv(k, v) for k, v in attrs.items()], "status": {}}

    good = {**VLLM, "gen_ai.request.id": "cmpl-json-1"}
    early_end = {**VLLM, "gen_ai.request.id": "cmpl-json-2"}
    req = {"resourceSpans": [{"resource": {"attributes": [kv("host.name", "gpu-3")]}, "scopeSpans": [{"spans": [
        span("eee19b7ec3c1b174", good, t0, t0 + 2_400_000_000),
        span("eee19b7ec3c1b175", early_end, t0, t0 - 10**9),          # ends before it starts
        {"spanId": "eee19b7ec3c1b176", "name": "SELECT", "startTimeUnixNano": str(t0)}]}]}]}
    status, headers, body = post(rx.url, json.dumps(req).encode(), "application/json")
    assert status == 200 and headers["Content-Type"] == "application/json"
    partial = json.loads(body)["partialSuccess"]
    assert partial["rejectedSpans"] == "1" and "eee19b7ec3c1b175: impossible_order" in partial["errorMessage"]
    [e] = topic_events(rx)
    assert (e["request_id"], e["model"], e["input_tokens"], e["output_tokens"], e["ttft_s"], e["e2e_s"],
            e["queue_s"], e["t0"], e["replica"]) == ("cmpl-json-1", "llama-3.1-8b", 1500, 120, 0.21, 2.4, 0.012,
                                                      t0 / 1e9, "gpu-3")
    assert rx.ignored == 1


def test_bodies_it_cannot_take(rx):
    pb, js = "application/x-protobuf", "application/json"
    status, headers, body = post(rx.url, b"\xff\xff\xff\xff", pb)
    assert status == 400 and headers["Content-Type"] == pb and b"protobuf" in body
    status, _, body = post(rx.url, b'{"resourceSpans": [', js)
    assert status == 400 and json.loads(body)["message"].startswith("body is not JSON")
    status, _, body = post(rx.url, b"{}", "text/plain")
    assert status == 415 and "text/plain" in json.loads(body)["message"]
    status, _, _ = post(rx.url, gzip.compress(b"{}"), js, **{"Content-Encoding": "br"})
    assert status == 415
    status, _, body = post(rx.url, b"x" * (64 * 1024 + 1), js)       # over --max-body-bytes, refused unread
    assert status == 413 and "over the limit" in json.loads(body)["message"]
    bomb = gzip.compress(b" " * (1024 * 1024))                         # small on the wire, 1 MiB inflated
    status, _, body = post(rx.url, bomb, js, **{"Content-Encoding": "gzip"})
    assert status == 413 and "decompressed" in json.loads(body)["message"]
    status, _, _ = post(rx.url, b"not gzip", js, **{"Content-Encoding": "gzip"})
    assert status == 400
    status, _, _ = post(rx.url.replace("/v1/traces", "/v1/metrics"), b"{}", js)
    assert status == 404
    status, _, _ = post(rx.url, gzip.compress(b"{}"), js, **{"Content-Encoding": "gzip"})
    assert status == 200                                              # and gzip that is fine is taken
    assert rx.refused == 8 and rx.requests == 1 and topic_events(rx) == []


@contextlib.contextmanager
def otlp_command(args: list[str], env: dict, port: int):
    """`phasemeter otlp ARGS` as users run it, yielded once `port` accepts
    connections; killed on the way out if the test did not stop it."""
    proc = subprocess.Popen([sys.executable, "-m", "phasemeter", "otlp", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 30
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, "receiver did not start"
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.1)
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_command_serves_until_sigterm_then_flushes(kafka_bootstrap, tmp_path):
    """`phasemeter otlp` as users run it: vLLM V1's span has no model, --model
    names it; SIGTERM stops it with exit 0 after the event is on the topic."""
    topic, port = f"otlp-cli-{uuid.uuid4().hex[:10]}", free_port()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PHASEMETER_TOPIC": topic,
           "PHASEMETER_DATA_DIR": str(tmp_path)}
    with otlp_command(["--port", str(port), "--grpc-port", "0", "--model", "llama-v1", "--report-every", "1"],
                      env, port) as proc:
        t0 = time.time_ns() - 60 * 10**9
        attrs = [{"key": k, "value": {"intValue": str(v)} if type(v) is int else {"doubleValue": v}
                  if type(v) is float else {"stringValue": v}}
                 for k, v in VLLM.items() if k != "gen_ai.response.model"]
        req = {"resourceSpans": [{"scopeSpans": [{"spans": [{
            "traceId": "5b8efff798038103d269b633813fc60c", "spanId": "eee19b7ec3c1b174", "name": "llm_request",
            "startTimeUnixNano": str(t0), "endTimeUnixNano": str(t0 + 2_400_000_000), "attributes": attrs}]}]}]}
        status, _, body = post(f"http://127.0.0.1:{port}/v1/traces", json.dumps(req).encode(), "application/json")
        assert (status, body) == (200, b"{}")
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    last = out.strip().splitlines()[-1]
    assert "1 requests (0 refused); spans: 1 mapped, 0 rejected, 0 ignored; emitter: 1 sent, 0 dropped" in last, out
    events = topic_messages(kafka_bootstrap, topic)
    assert len(events) == 1 and events[0]["model"] == "llama-v1"  # envelopes unwrapped
    assert events[0]["request_id"] == "cmpl-vllm-1"


def test_a_full_emitter_queue_answers_503_so_the_exporter_retries():
    """Kafka unreachable: the emitter's queue fills; the receiver then answers
    503 with Retry-After (retried by exporters) instead of dropping events."""
    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=3, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=3, log=lambda line: None).start()
    try:
        def body(n):
            return json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [
                {"spanId": f"{i:016x}", "name": "llm_request", "startTimeUnixNano": str(time.time_ns()),
                 "attributes": [{"key": k, "value": {"intValue": str(v)} if type(v) is int else
                                 {"doubleValue": v} if type(v) is float else {"stringValue": v}}
                                for k, v in {**VLLM, "gen_ai.request.id": f"q-{i}"}.items()]}
                for i in range(n)]}]}]}).encode()
        assert post(rx.url, body(3), "application/json")[0] == 200
        status, headers, msg = post(rx.url, body(1), "application/json")
        assert (status, headers["Retry-After"]) == (503, "1") and b"queue full" in msg
        assert meter.stats().dropped == 0 and rx.mapped == 3
    finally:
        rx.stop(flush_timeout_s=0.2)
