"""The worker reads an OTLP topic as an OpenTelemetry Collector's kafka
exporter writes it (one ExportTraceServiceRequest per message, otlp_proto or
otlp_json), beside the raw topic: LLM spans become rows equal to the span's
values, non-LLM spans are counted and ignored, a span with contradictory
timing and an undecodable message are dead-lettered with a reason code, and
the partition keeps flowing. Messages are built with the real
opentelemetry-proto package. The same test sends one span through
`phasemeter otlp`'s receiver with the real SDK exporter: both ways in end
as rows in the store."""

from __future__ import annotations

import json
import time
import uuid

import clickhouse_connect
import pytest
from kafka import KafkaProducer
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource as SdkResource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from phasemeter.integrations.otlp_receiver import Receiver
from phasemeter.producers import Meter

pytestmark = pytest.mark.integration

T0 = time.time() - 600


def kv(key, value) -> KeyValue:
    if isinstance(value, str):
        return KeyValue(key=key, value=AnyValue(string_value=value))
    if isinstance(value, int):
        return KeyValue(key=key, value=AnyValue(int_value=value))
    return KeyValue(key=key, value=AnyValue(double_value=value))


def vllm_span(i: int) -> dict:
    """What vLLM's llm_request span carries (attribute names as vLLM sets them)."""
    return {"name": "llm_request", "start": T0 + i, "end": T0 + i + 2.5, "attrs": {
        "gen_ai.request.id": f"vllm-{i}", "gen_ai.response.model": "meta-llama/Llama-3.1-8B-Instruct",
        "gen_ai.usage.prompt_tokens": 1000 + 700 * i, "gen_ai.usage.completion_tokens": 101 + i,
        "gen_ai.latency.time_in_queue": 0.01 * (i + 1), "gen_ai.latency.time_to_first_token": 0.2 + 0.1 * i,
        "gen_ai.latency.e2e": 2.2 + 0.1 * i, "gen_ai.latency.time_in_model_prefill": 0.15,
        "gen_ai.latency.time_in_model_decode": 1.9}}


def proto_message(spans: list[dict]) -> bytes:
    out = []
    for j, s in enumerate(spans):
        out.append(Span(trace_id=bytes([j + 1]) * 16, span_id=bytes([j + 1]) * 8, name=s["name"],
                        kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=int(s["start"] * 1e9),
                        end_time_unix_nano=int(s["end"] * 1e9),
                        attributes=[kv(k, v) for k, v in s["attrs"].items()]))
    req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(
        resource=Resource(attributes=[kv("service.name", "vllm")]), scope_spans=[ScopeSpans(spans=out)])])
    return req.SerializeToString()


def json_message(spans: list[dict]) -> bytes:
    """OTLP/JSON as the Collector writes it: camelCase, hex ids, int64 as strings."""
    def value(v):
        return ({"stringValue": v} if isinstance(v, str) else {"intValue": str(v)} if isinstance(v, int)
                else {"doubleValue": v})
    return json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "gateway"}}]}, "scopeSpans": [{"spans": [
            {"traceId": f"{j + 10:032x}", "spanId": f"{j + 10:016x}", "name": s["name"], "kind": 3,
             "startTimeUnixNano": str(int(s["start"] * 1e9)), "endTimeUnixNano": str(int(s["end"] * 1e9)),
             "attributes": [{"key": k, "value": value(v)} for k, v in s["attrs"].items()]}
            for j, s in enumerate(spans)]}]}]}).encode()


def semconv_span(rid: str, ttft: float, start: float, end: float) -> dict:
    return {"name": "chat qwen3-32b", "start": start, "end": end, "attrs": {
        "gen_ai.operation.name": "chat", "gen_ai.request.model": "qwen3-32b", "gen_ai.response.id": rid,
        "gen_ai.usage.input_tokens": 3000, "gen_ai.usage.output_tokens": 41,
        "gen_ai.usage.cache_read.input_tokens": 1024, "gen_ai.response.time_to_first_chunk": ttft}}


def via_receiver(bootstrap: str, topic: str, attrs: dict, start: float, end: float) -> None:
    """One span made by the real SDK, sent by its OTLP/HTTP exporter to
    `phasemeter otlp`'s receiver, which publishes to the worker's raw topic."""
    meter = Meter(bootstrap, topic=topic, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=100, max_body_bytes=1 << 20, log=lambda line: None).start()
    try:
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=SdkResource.create({"service.instance.id": "vllm-7"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        span = provider.get_tracer("vllm").start_span("llm_request", kind=SpanKind.SERVER, attributes=attrs,
                                                       start_time=int(start * 1e9))
        span.end(end_time=int(end * 1e9))
        provider.shutdown()
        exporter = OTLPSpanExporter(endpoint=rx.url, timeout=10)
        assert exporter.export(memory.get_finished_spans()) == SpanExportResult.SUCCESS
        exporter.shutdown()
        assert meter.flush(15)
    finally:
        rx.stop()
        meter.close()


def test_collector_kafka_exporter_messages_become_rows_and_dead_letters(worker, pm_env):
    otlp_topic = f"otlp-{uuid.uuid4().hex[:8]}"
    worker.env["PHASEMETER_OTLP_TOPIC"] = otlp_topic
    worker.env["PHASEMETER_OTLP_MODEL"] = "llama-served"  # for spans naming no model (vLLM V1)
    worker.start()
    vllm = [vllm_span(i) for i in range(4)]
    del vllm[3]["attrs"]["gen_ai.response.model"]
    http = {"name": "GET /healthz", "start": T0, "end": T0 + 0.01, "attrs": {"http.route": "/healthz"}}
    good = semconv_span("chatcmpl-1", 0.35, T0 + 10, T0 + 12.0)
    late = semconv_span("chatcmpl-2", 5.0, T0 + 20, T0 + 21.0)  # first chunk after the span ended
    producer = KafkaProducer(bootstrap_servers=pm_env["KAFKA_BOOTSTRAP_SERVERS"])
    for value in (proto_message(vllm + [http]), json_message([good, late]), b"\x0a\xff\xff\xff"):
        producer.send(otlp_topic, value)
    producer.flush()
    producer.close()
    # The other way in: the receiver, on the same worker's raw topic.
    rx_span = {**vllm_span(9)["attrs"], "gen_ai.request.id": "via-receiver"}
    via_receiver(pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"], rx_span, T0 + 30, T0 + 33)
    health = worker.wait_processed(8, timeout_s=90)
    assert (health["accepted"], health["rejected"], health["otlp_spans_ignored"]) == (6, 2, 1), worker.diagnose()
    worker.stop()

    client = clickhouse_connect.get_client(dsn=f"chdb://{pm_env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = pm_env["PHASEMETER_DATABASE"]
        rows = {r[0]: r for r in client.query(
            "SELECT request_id, model, toUnixTimestamp64Milli(ts), input_tokens, output_tokens, "
            "cached_input_tokens, ttft_s, e2e_s, queue_s, status, src_topic FROM generations").result_rows}
        dead = sorted(r[0] for r in client.query("SELECT reason FROM dead_letters").result_rows)
    finally:
        client.close()
    assert set(rows) == {"vllm-0", "vllm-1", "vllm-2", "vllm-3", "chatcmpl-1", "via-receiver"}
    r = rows.pop("via-receiver")
    assert (r[1], r[2], r[3], r[4], r[10]) == (rx_span["gen_ai.response.model"], round((T0 + 30) * 1000),
                                               rx_span["gen_ai.usage.prompt_tokens"],
                                               rx_span["gen_ai.usage.completion_tokens"], pm_env["PHASEMETER_TOPIC"])
    assert (r[6], r[7], r[8]) == pytest.approx((rx_span["gen_ai.latency.time_to_first_token"],
                                                rx_span["gen_ai.latency.e2e"], rx_span["gen_ai.latency.time_in_queue"]))
    assert len(vllm) == 4  # vllm-0 .. vllm-3 above
    for i, s in enumerate(vllm):
        a = s["attrs"]
        r = rows[f"vllm-{i}"]
        assert r[1] == a.get("gen_ai.response.model", "llama-served")
        assert r[2] == round(s["start"] * 1000) and r[10] == otlp_topic
        assert (r[3], r[4], r[9]) == (a["gen_ai.usage.prompt_tokens"], a["gen_ai.usage.completion_tokens"], "ok")
        assert r[6] == pytest.approx(a["gen_ai.latency.time_to_first_token"])
        assert r[7] == pytest.approx(a["gen_ai.latency.e2e"])
        assert r[8] == pytest.approx(a["gen_ai.latency.time_in_queue"])
    r = rows["chatcmpl-1"]
    assert (r[1], r[3], r[4], r[5]) == ("qwen3-32b", 3000, 41, 1024)
    assert r[6] == pytest.approx(0.35) and r[7] == pytest.approx(2.0, abs=1e-6)
    assert "malformed_otlp" in dead and len(dead) == 2, dead
