"""Each engine's spans, made by the real OpenTelemetry SDK and encoded by its
OTLP exporter's encoder, become what docs/ingest/otlp.md's case table says:
the table is read from the doc, and every row has a case here (and back)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from phasemeter.integrations.otlp_map import PROTOBUF, map_request
from phasemeter.stream_jobs.contract import Rejection
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import process_event, validate
from phasemeter.stream_jobs.join import is_complete, joined_event

DOC = Path(__file__).resolve().parents[3] / "docs" / "ingest" / "otlp.md"
T0 = 1_760_000_000.0
MODEL = "served-model"
BUCKET = Bucketer(parse_edges("default"))


def export(spans, resource=None) -> bytes:
    """[(name, kind, attrs, duration_s, error[, resource])] through the SDK -> OTLP
    protobuf bytes; a span's own resource (a P/D instance's) wins over `resource`.
    Span i starts at T0 + i/10 s."""
    finished = []
    for i, (name, kind, attrs, duration, error, *own) in enumerate(spans):
        res = own[0] if own else resource if resource is not None else {"host.name": "gpu-1"}
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create(res))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        start = int((T0 + i / 10) * 1e9)
        s = provider.get_tracer("case").start_span(name, kind=kind, attributes=attrs, start_time=start)
        if error:
            s.set_status(Status(StatusCode.ERROR))
        s.end(end_time=start + int(duration * 1e9))
        finished += memory.get_finished_spans()
        provider.shutdown()
    return encode_spans(finished).SerializeToString()


def vllm(**change) -> dict:
    """vLLM's llm_request span as do_tracing sets it (no model, no finish reason)."""
    attrs = {"gen_ai.request.id": "chatcmpl-abc", "gen_ai.usage.prompt_tokens": 812,
             "gen_ai.usage.completion_tokens": 64, "gen_ai.request.max_tokens": 256,
             "gen_ai.request.temperature": 0.7, "gen_ai.request.top_p": 0.95, "gen_ai.request.n": 1,
             "gen_ai.latency.time_in_queue": 0.012, "gen_ai.latency.time_to_first_token": 0.21,
             "gen_ai.latency.e2e": 1.9, "gen_ai.latency.time_in_model_prefill": 0.18,
             "gen_ai.latency.time_in_model_decode": 1.66, "gen_ai.latency.time_in_model_inference": 1.84}
    attrs.update(change)
    return {k: v for k, v in attrs.items() if v is not None}


def sglang(**change) -> dict:
    attrs = {"rid": "9f1c0a2b77e4", "gen_ai.usage.prompt_tokens": 640, "gen_ai.usage.completion_tokens": 80,
             "gen_ai.usage.cached_tokens": 512, "gen_ai.response.model": "qwen3-32b",
             "gen_ai.response.finish_reasons": '["stop"]', "gen_ai.latency.time_to_first_token": 0.09,
             "gen_ai.latency.e2e": 1.2, "gen_ai.latency.time_in_model_prefill": 0.08,
             "gen_ai.latency.time_in_model_decode": 1.1, "gen_ai.latency.time_in_model_inference": 1.18}
    attrs.update(change)
    return {k: v for k, v in attrs.items() if v is not None}


def genai(**change) -> dict:
    attrs = {"gen_ai.operation.name": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
             "gen_ai.response.id": "chatcmpl-xyz", "gen_ai.usage.input_tokens": 300,
             "gen_ai.usage.output_tokens": 40}
    attrs.update(change)
    return {k: v for k, v in attrs.items() if v is not None}


S, I, C = SpanKind.SERVER, SpanKind.INTERNAL, SpanKind.CLIENT
NO_E2E = {"gen_ai.latency.e2e": None, "gen_ai.latency.time_in_model_decode": None,
          "gen_ai.latency.time_in_model_inference": None}
CASES = {
    "vLLM, a finished request": [("llm_request", S, vllm(), 1.9, False)],
    "vLLM, aborted after scheduling, before its first token": [("llm_request", S, vllm(
        **{"gen_ai.latency.time_to_first_token": 0.0, "gen_ai.usage.completion_tokens": 0,
           "gen_ai.latency.time_in_queue": 0.35, "gen_ai.latency.e2e": 0.4}), 0.4, False)],
    "vLLM, aborted before scheduling": [("llm_request", S, vllm(
        **{"gen_ai.latency.time_to_first_token": 0.0, "gen_ai.usage.completion_tokens": 0,
           "gen_ai.latency.time_in_queue": 0.0, "gen_ai.latency.e2e": 0.05}), 0.05, False)],
    "vLLM, a pooling (embedding) request": [("llm_request", S, vllm(
        **{"gen_ai.usage.completion_tokens": 0, "gen_ai.latency.time_to_first_token": 0.03,
           "gen_ai.latency.e2e": 0.03}), 0.03, False)],
    "vLLM, n = 3": [("llm_request", S, vllm(**{"gen_ai.request.n": 3, "gen_ai.usage.completion_tokens": n}), 1.9,
                     False) for n in (60, 64, 12)],
    "vLLM, a prefill/decode pair (one `llm_request` per instance)": [
        ("llm_request", S, vllm(**{"gen_ai.usage.completion_tokens": 1, "gen_ai.latency.e2e": 0.21}), 0.21, False),
        ("llm_request", S, vllm(**{"gen_ai.latency.time_to_first_token": 0.02}), 1.9, False)],
    "vLLM, a prefill/decode pair, each instance with `phasemeter.role`": [
        ("llm_request", S, vllm(**{"gen_ai.usage.completion_tokens": 1, "gen_ai.latency.time_to_first_token": 0.08,
                                   "gen_ai.latency.e2e": 0.09}), 0.09, False,
         {"phasemeter.role": "prefill", "host.name": "prefill-0"}),
        ("llm_request", S, vllm(**{"gen_ai.latency.time_to_first_token": 0.02}), 1.9, False,
         {"phasemeter.role": "decode", "host.name": "decode-0"})],
    "vLLM, the SDK's random `service.instance.id` only": [("llm_request", S, vllm(), 1.9, False)],
    "SGLang, unified (` Req ...`)": [(" Req 9f1c0a2b", I, sglang(), 1.2, False)],
    "SGLang, a prefill/decode pair (`prefill Req ...`, `decode Req ...`)": [
        ("decode Req 9f1c0a2b", I, sglang(**{"bootstrap_room": 77, "gen_ai.latency.time_to_first_token": 0.3}), 1.2,
         False),  # exported first: either order
        ("prefill Req 9f1c0a2b", I, sglang(**{"bootstrap_room": 77, "gen_ai.usage.completion_tokens": 1,
                                              "gen_ai.latency.e2e": 0.09}), 0.09, False)],
    "SGLang, abort": [(" Req 9f1c0a2b", I, sglang(**{"gen_ai.response.finish_reasons": '["abort"]'}), 1.2, False)],
    "SGLang, embedding": [(" Req 9f1c0a2b", I, sglang(**{"gen_ai.usage.completion_tokens": None}), 0.05, False)],
    "SGLang before PR #37789, abort before the first token": [(" Req 9f1c0a2b", I, sglang(
        **NO_E2E, **{"gen_ai.latency.time_to_first_token": None, "gen_ai.usage.completion_tokens": 0,
                     "gen_ai.response.finish_reasons": '["abort"]'}), 0.3, False)],
    "SGLang before PR #37789, a finished request": [(" Req 9f1c0a2b", I, sglang(**NO_E2E), 1.25, False)],
    "SGLang after PR #37789, abort before the first token": [(" Req 9f1c0a2b", I, sglang(
        **{"gen_ai.latency.time_to_first_token": None, "gen_ai.usage.completion_tokens": 0,
           "gen_ai.latency.e2e": 0.3, "gen_ai.response.finish_reasons": '["abort"]'}), 0.3, False)],
    "TensorRT-LLM, with the KV transfer time": [("llm_request", S, vllm(
        **{"gen_ai.latency.kv_cache_transfer_time": 0.034, "gen_ai.response.finish_reasons": ("stop",)}), 1.9,
        False)],
    "OpenLIT (`gen_ai.server.ttft`)": [("chat gpt-4o", C, genai(**{"gen_ai.server.ttft": 0.4,
                                                                   "gen_ai.request.is_stream": True}), 2.0, False)],
    "OpenLIT, newer (`gen_ai.server.time_to_first_token`)": [
        ("chat gpt-4o", C, genai(**{"gen_ai.server.time_to_first_token": 0.4}), 2.0, False)],
    "OpenLLMetry (`llm.request.type`, `gen_ai.server.time_to_first_token`)": [("openai.chat", C, {
        "llm.request.type": "chat", "gen_ai.system": "openai", "gen_ai.request.model": "gpt-4o",
        "gen_ai.usage.prompt_tokens": 300, "gen_ai.usage.completion_tokens": 40,
        "gen_ai.usage.cache_read_input_tokens": 128, "gen_ai.server.time_to_first_token": 0.4}, 2.0, False)],
    "pydantic-ai (`gen_ai.client.operation.time_to_first_chunk`)": [
        ("chat gpt-4o", C, genai(**{"gen_ai.client.operation.time_to_first_chunk": 0.4}), 2.0, False)],
    "a GenAI call with `error.type`": [("chat gpt-4o", C, genai(**{
        "error.type": "RateLimitError", "gen_ai.usage.output_tokens": 0}), 0.2, True)],
    "a non-streaming GenAI call (`gen_ai.request.stream = false`)": [
        ("chat gpt-4o", C, genai(**{"gen_ai.request.stream": False}), 2.0, False)],
}
SDK_RESOURCE_ONLY = "vLLM, the SDK's random `service.instance.id` only"


def doc_cases() -> dict[str, str]:
    text = DOC.read_text()
    start = text.index("| case | becomes | note |")
    rows = {}
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1]
    return rows


def test_every_documented_case_has_a_test_and_back():
    assert len(doc_cases()) == len(CASES) == 22
    assert set(doc_cases()) == set(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
def test_case_becomes_what_the_doc_says(case):
    want = doc_cases()[case]
    m = re.fullmatch(r"(?:(\d+) )?(event|events|joined|ignored|refused) `(\w+)`", want)
    assert m is not None, want
    count, verb, code = int(m.group(1) or 1), m.group(2), m.group(3)
    resource = {"service.name": "vllm"} if case == SDK_RESOURCE_ONLY else None
    body = export(CASES[case], resource)
    got = map_request(body, PROTOBUF, default_model=MODEL, now=T0 + 60)
    if verb == "joined":  # the halves' phase events, completed by the worker's join
        assert (sorted(e["kind"] for e in got.events), got.rejected, got.ignored) == (["end", "start"], [], 0)
        entry = {e["kind"]: process_event(e, BUCKET, T0 + 60).fields for e in got.events}
        assert is_complete(entry)
        row = process_event(joined_event(got.events[0]["request_id"], entry), BUCKET, T0 + 60, internal=True)
        assert not isinstance(row, Rejection) and row["status"] == code, row
    elif verb.startswith("event"):
        assert (len(got.events), got.rejected, got.ignored) == (count, [], 0)
        assert len(got.events) == count
        for e in got.events:
            assert e["status"] == code
            assert not isinstance(validate(e, now=T0 + 60), Rejection), e
            assert e["ttft_s"] is None or e["ttft_s"] > 0    # never a TTFT of 0
    elif verb == "ignored":
        assert (got.events, got.rejected, dict(got.ignored_by)) == ([], [], {code: count})
    else:
        assert got.events == [] and got.ignored == 0
        assert [r[1] for r in got.rejected] == [code] * count


def test_case_details():
    """The values behind the notes of the doc's table."""
    def events(case):
        resource = {"service.name": "vllm"} if case == SDK_RESOURCE_ONLY else None
        return map_request(export(CASES[case], resource), PROTOBUF, default_model=MODEL, now=T0 + 60)

    e = events("vLLM, a finished request").events[0]
    assert (e["model"], e["ttft_s"], e["e2e_s"], e["queue_s"], e["replica"]) == (MODEL, 0.21, 1.9, 0.012, "gpu-1")
    e = events("vLLM, aborted after scheduling, before its first token").events[0]
    assert (e["ttft_s"], e["queue_s"], e["output_tokens"]) == (None, 0.35, 0)
    ids = [e["request_id"] for e in events("vLLM, n = 3").events]
    assert len(set(ids)) == 3 and all(re.fullmatch(r"chatcmpl-abc-[0-9a-f]{16}", i) for i in ids)
    pair = events("vLLM, a prefill/decode pair (one `llm_request` per instance)").events
    assert len(pair) == 2 and {e["request_id"] for e in pair} == {"chatcmpl-abc"}
    m = events(SDK_RESOURCE_ONLY)
    assert m.events[0]["replica"] is None and m.replicas_dropped == 1
    e = events("SGLang, unified (` Req ...`)").events[0]
    assert (e["request_id"], e["model"], e["cached_input_tokens"], e["finish_reason"]) == \
        ("9f1c0a2b77e4", "qwen3-32b", 512, "stop")
    e = events("SGLang before PR #37789, abort before the first token").events[0]
    assert (e["e2e_s"], e["finish_reason"]) == (pytest.approx(0.3), "abort")
    e = events("SGLang before PR #37789, a finished request").events[0]
    assert (e["e2e_s"], e["ttft_s"]) == (pytest.approx(1.25), 0.09)
    e = events("OpenLLMetry (`llm.request.type`, `gen_ai.server.time_to_first_token`)").events[0]
    assert (e["input_tokens"], e["output_tokens"], e["cached_input_tokens"], e["ttft_s"]) == (300, 40, 128, 0.4)
    e = events("a non-streaming GenAI call (`gen_ai.request.stream = false`)").events[0]
    assert (e["schema_version"], e["streamed"], e["ttft_s"], e["e2e_s"]) == (2, False, None, pytest.approx(2.0))
    row = process_event(e, BUCKET, T0 + 60)
    assert (row["streamed"], row["prefill_tps"], row["decode_tps"], row["output_tokens"]) == (0, None, None, 40)
    e = events("TensorRT-LLM, with the KV transfer time").events[0]
    assert (e["schema_version"], e["kv_transfer_s"]) == (2, 0.034)
    assert "kv_transfer_s" not in events("vLLM, a finished request").events[0]  # v1, as before
    halves = {e["kind"]: e for e in events("vLLM, a prefill/decode pair, each instance with `phasemeter.role`").events}
    assert (halves["start"]["prefill_replica"], halves["end"]["decode_replica"]) == ("prefill-0", "decode-0")
