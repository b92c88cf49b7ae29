"""The two halves of a prefill/decode disaggregated request, exported as
SGLang does ("prefill Req ..." / "decode Req ..." sharing bootstrap_room) to
the worker's OTLP topic, become ONE generation: in either order, in one
message or two, across a worker kill between the halves, stored once when a
half is delivered twice; a half that never gets its other is reported
(abandoned row, orphan_phase dead letter). Real Kafka broker, real worker,
real chDB."""

from __future__ import annotations

import json
import signal
import time
import uuid

import clickhouse_connect
from kafka import KafkaProducer
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conftest import wait_for
from phasemeter.integrations.otlp_receiver import Receiver
from phasemeter.producers import Meter

MODEL = "qwen3-32b"


def half(role: str, room: int, start: float, ttft: float, e2e: float, out: int) -> dict:
    attrs = {"rid": f"r{room}", "bootstrap_room": room, "gen_ai.response.model": MODEL,
             "gen_ai.usage.prompt_tokens": 2000, "gen_ai.usage.completion_tokens": out,
             "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.e2e": e2e,
             "gen_ai.response.finish_reasons": '["stop"]'}
    value = (lambda v: {"intValue": str(v)} if isinstance(v, int) else
             {"doubleValue": v} if isinstance(v, float) else {"stringValue": v})
    return {"traceId": uuid.uuid4().hex, "spanId": uuid.uuid4().hex[:16], "name": f"{role} Req r{room}",
            "kind": 1, "startTimeUnixNano": str(int(start * 1e9)), "endTimeUnixNano": str(int((start + e2e) * 1e9)),
            "attributes": [{"key": k, "value": value(v)} for k, v in attrs.items()]}


def pair(room: int, t0: float) -> tuple[dict, dict]:
    return (half("prefill", room, t0, 0.2, 0.21, 1),
            half("decode", room, t0 + 0.01, 0.4, 2.41, 120))  # first token at t0 + 0.41, end at t0 + 2.42


def send(bootstrap: str, topic: str, *spans: dict) -> None:
    producer = KafkaProducer(bootstrap_servers=bootstrap)
    producer.send(topic, json.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "host.name", "value": {"stringValue": "prefill-0"}}]},
        "scopeSpans": [{"spans": list(spans)}]}]}).encode())
    producer.flush()
    producer.close()


def test_pd_halves_join_into_one_generation(worker, pm_env):
    otlp = f"otlp-{uuid.uuid4().hex[:8]}"
    worker.env.update(PHASEMETER_OTLP_TOPIC=otlp, PHASEMETER_ABANDON_AFTER_S="40", PHASEMETER_ORPHAN_GRACE_S="3",
                      PHASEMETER_EXPIRY_TICK_S="0.5")
    bootstrap = pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    now = time.time()
    a, b, d, e = (pair(room, now - 1) for room in (1, 2, 4, 5))
    c = pair(3, now - 38)  # abandoned in ~2 s; the others have 39 s, enough for e's restart
    worker.start()
    send(bootstrap, otlp, a[1])              # a: decode first, alone
    send(bootstrap, otlp, a[0], a[1])        # then its prefill, with the decode delivered again
    send(bootstrap, otlp, b[0], b[1])        # b: both halves in one message
    send(bootstrap, otlp, c[0])              # c: a prefill whose decode never comes
    send(bootstrap, otlp, d[1])              # d: a decode whose prefill never comes
    send(bootstrap, otlp, e[0])              # e: prefill, then the worker is killed
    def counts(accepted: int, rejected: int):
        h = worker.health() or {}
        return h.get("accepted", 0) >= accepted and h.get("rejected", 0) >= rejected and h
    h = wait_for(lambda: counts(3, 1), 60, "a and b joined, c abandoned, d orphaned", worker.diagnose)
    assert (h["accepted"], h["rejected"]) == (3, 1), h
    worker.proc.send_signal(signal.SIGKILL)  # e's prefill is in the join's table, not stored
    worker.proc.wait(30)
    worker.start()
    send(bootstrap, otlp, e[1])              # e's decode reaches the restarted worker
    wait_for(lambda: counts(1, 0), 60, "e joined after the restart", worker.diagnose)
    worker.stop()

    got = {r[0]: r for r in rows(pm_env)}
    assert sorted(got) == [f"bootstrap_room-{n}" for n in (1, 2, 3, 5)]
    for n in (1, 2, 5):
        rid, status, ttft, e2e, n_in, n_out, replica = got[f"bootstrap_room-{n}"]
        assert (status, n_in, n_out, replica) == ("ok", 2000, 120, "prefill-0")
        assert abs(ttft - 0.41) < 0.002 and abs(e2e - 2.42) < 0.002   # the decode's first token and end
    assert got["bootstrap_room-3"][1] == "abandoned"
    assert [r for r, in dead(pm_env)] == ["orphan_phase"]


def rows(env) -> list[tuple]:
    client = clickhouse_connect.get_client(dsn=f"chdb://{env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = env["PHASEMETER_DATABASE"]
        return client.query("SELECT request_id, status, ttft_s, e2e_s, input_tokens, output_tokens, replica "
                            "FROM generations").result_rows
    finally:
        client.close()


def dead(env) -> list[tuple]:
    client = clickhouse_connect.get_client(dsn=f"chdb://{env['PHASEMETER_DATA_DIR']}/store")
    try:
        client.database = env["PHASEMETER_DATABASE"]
        return client.query("SELECT reason FROM dead_letters").result_rows
    finally:
        client.close()


def vllm_half(role: str, start: float, ttft: float, e2e: float, out: int):
    """One vLLM instance's llm_request span, made by the real SDK on a
    resource naming the instance's role."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"phasemeter.role": role, "host.name": f"{role}-0"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    attrs = {"gen_ai.request.id": "cmpl-pd-1", "gen_ai.usage.prompt_tokens": 3000,
             "gen_ai.usage.completion_tokens": out, "gen_ai.latency.time_to_first_token": ttft,
             "gen_ai.latency.e2e": e2e, "gen_ai.latency.time_in_queue": 0.01}
    span = provider.get_tracer("vllm").start_span("llm_request", kind=SpanKind.SERVER, attributes=attrs,
                                                   start_time=int(start * 1e9))
    span.end(end_time=int((start + e2e) * 1e9))
    provider.shutdown()
    return memory.get_finished_spans()


def test_vllm_pd_halves_through_the_receiver_become_one_generation(worker, pm_env):
    bootstrap = pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    worker.start()
    t0 = time.time() - 5
    meter = Meter(bootstrap, topic=pm_env["PHASEMETER_TOPIC"], flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=100, max_body_bytes=1 << 20, default_model="llama-pd",
                  log=lambda line: None).start()
    try:
        exporter = OTLPSpanExporter(endpoint=rx.url, timeout=10)
        # the decode instance's export first, then the prefill's
        assert exporter.export(vllm_half("decode", t0 + 0.3, 0.05, 2.0, 90)) == SpanExportResult.SUCCESS
        assert exporter.export(vllm_half("prefill", t0, 0.29, 0.3, 1)) == SpanExportResult.SUCCESS
        exporter.shutdown()
        assert meter.flush(15)
    finally:
        rx.stop()
        meter.close()
    h = wait_for(lambda: (worker.health() or {}).get("accepted", 0) >= 1 and worker.health(), 60,
                 "the joined generation", worker.diagnose)
    assert (h["accepted"], h["rejected"]) == (1, 0), h
    worker.stop()
    [(rid, status, ttft, e2e, n_in, n_out, replica)] = rows(pm_env)
    assert (rid, status, n_in, n_out, replica) == ("cmpl-pd-1", "ok", 3000, 90, "prefill-0")
    assert abs(ttft - 0.35) < 0.002 and abs(e2e - 2.3) < 0.002

