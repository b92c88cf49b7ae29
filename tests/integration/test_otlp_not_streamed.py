"""Non-streaming GenAI calls (gen_ai.request.stream = false), exported by the
real OpenTelemetry SDK through `phasemeter otlp`'s receiver, the real broker
and worker: stored with streamed = 0 and null phases beside streamed calls,
none dead-lettered. `phasemeter query bands` leaves them out of the phase
percentiles; `phasemeter latency` counts them and keeps their e2e."""

from __future__ import annotations

import json
import time

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from conftest import wait_for
from phasemeter.integrations.otlp_receiver import Receiver
from phasemeter.producers import Meter

MODEL = "gpt-nostream"
STREAMED, NOT_STREAMED = 6, 4


def chat_spans(t0: float) -> list:
    """GenAI client spans as an instrumented OpenAI client sets them: the
    streamed ones time their first chunk, the others say stream = false."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"host.name": "app-1"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    for i in range(STREAMED + NOT_STREAMED):
        streamed = i < STREAMED
        attrs = {"gen_ai.operation.name": "chat", "gen_ai.request.model": MODEL, "gen_ai.response.id": f"c-{i}",
                 "gen_ai.usage.input_tokens": 1000, "gen_ai.usage.output_tokens": 101,
                 "gen_ai.request.stream": streamed}
        if streamed:
            attrs["gen_ai.response.time_to_first_chunk"] = 0.5
        start = int((t0 + i) * 1e9)
        span = provider.get_tracer("app").start_span(f"chat {MODEL}", kind=SpanKind.CLIENT, attributes=attrs,
                                                     start_time=start)
        span.end(end_time=start + int(2.5e9 if streamed else 4e9))
    provider.shutdown()
    return memory.get_finished_spans()


def cli_json(worker, *args: str) -> dict:
    out = worker.run(*args, "--from", "-1h", "--step", "1h", "--model", MODEL, "--format", "json").stdout
    return json.loads(out)


def test_non_streaming_calls_are_stored_with_null_phases_and_counted_by_latency(worker, pm_env):
    worker.start()
    meter = Meter(pm_env["KAFKA_BOOTSTRAP_SERVERS"], topic=pm_env["PHASEMETER_TOPIC"], flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=100, max_body_bytes=1 << 20, default_model=None,
                  log=lambda line: None).start()
    try:
        exporter = OTLPSpanExporter(endpoint=rx.url, timeout=10)
        assert exporter.export(chat_spans(time.time() - 600)) == SpanExportResult.SUCCESS
        exporter.shutdown()
        assert meter.flush(15)
        assert (rx.mapped, sum(rx.rejected.values())) == (STREAMED + NOT_STREAMED, 0)
    finally:
        rx.stop()
        meter.close()
    want = STREAMED + NOT_STREAMED
    def settled():
        h = worker.health() or {}
        return h.get("accepted", 0) + h.get("rejected", 0) >= want and h
    h = wait_for(settled, 90, f"{want} generations stored or refused", worker.diagnose)
    assert (h["accepted"], h["rejected"]) == (want, 0), h
    worker.stop()

    bands = cli_json(worker, "query", "bands")
    assert len(bands["rows"]) == 1
    [b] = bands["rows"]
    # every call is a generation; the phases are the streamed calls' only
    assert (b["n"], b["prefill_n"], b["decode_n"]) == (want, STREAMED, STREAMED)
    assert (b["prefill_p50"], b["decode_p50"]) == (2000.0, 50.0)
    latency = cli_json(worker, "latency")
    assert len(latency["rows"]) == 1
    [lat] = latency["rows"]
    assert (lat["n"], lat["ttft_n"]) == (want, STREAMED), lat
