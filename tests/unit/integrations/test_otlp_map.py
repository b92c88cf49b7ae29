"""OTLP spans -> generation events (phasemeter.integrations.otlp_map).

Spans are written as OTLP-JSON dicts by the helpers below and, for the
encoding tests, built with the real opentelemetry.proto classes; the
expected values are the ones set on the spans, not recomputed.
"""

from __future__ import annotations

import base64
import json
import math

import pytest
from google.protobuf.json_format import MessageToDict
from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue
from opentelemetry.proto.resource.v1.resource_pb2 import Resource
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from phasemeter.integrations.otlp_map import (BadRequest, Mapped, UnsupportedMediaType, map_export,
                                              map_request)
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import MAX_EPOCH_S, Rejection
from phasemeter.stream_jobs.derive import validate

T0_NS = 1_700_000_000_123_456_789
TRACE, SPAN = "0af7651916cd43dd8448eb211c80319c", "b7ad6b7169203331"
# vLLM's llm_request span, attribute names as in vllm/tracing SpanAttributes.
VLLM = {"gen_ai.request.id": "cmpl-42", "gen_ai.response.model": "llama-3.1-8b",
        "gen_ai.usage.prompt_tokens": 1200, "gen_ai.usage.completion_tokens": 57,
        "gen_ai.latency.time_in_queue": 0.004, "gen_ai.latency.time_to_first_token": 0.182,
        "gen_ai.latency.e2e": 1.734, "gen_ai.latency.time_in_model_prefill": 0.17,
        "gen_ai.latency.time_in_model_decode": 1.55, "gen_ai.latency.time_in_scheduler": 0.01}
# A gen_ai.client.inference span (semantic-conventions-genai v0.1.0).
GENAI = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai", "gen_ai.request.model": "gpt-x",
         "gen_ai.response.model": "gpt-x-2025", "gen_ai.response.id": "chatcmpl-7",
         "gen_ai.usage.input_tokens": 900, "gen_ai.usage.output_tokens": 33,
         "gen_ai.usage.cache_read.input_tokens": 512, "gen_ai.response.time_to_first_chunk": 0.25,
         "gen_ai.response.finish_reasons": ["stop", "length"]}
# SGLang's request root span: vLLM's names plus cached_tokens, finish reasons JSON-encoded.
SGLANG = {"rid": "9f1c", "gen_ai.request.id": "9f1c", "gen_ai.response.model": "qwen",
          "gen_ai.usage.prompt_tokens": 64, "gen_ai.usage.completion_tokens": 8, "gen_ai.usage.cached_tokens": 32,
          "gen_ai.latency.time_to_first_token": 0.05, "gen_ai.latency.e2e": 0.4,
          "gen_ai.latency.time_in_model_prefill": 0.04, "gen_ai.response.finish_reasons": '["stop"]'}


def any_value(v) -> dict:
    if isinstance(v, bool):
        return {"boolValue": v}
    if isinstance(v, int):
        return {"intValue": str(v)}
    if isinstance(v, float):
        return {"doubleValue": v}
    if isinstance(v, list):
        return {"arrayValue": {"values": [any_value(x) for x in v]}}
    return {"stringValue": v}


def span(name="llm_request", attrs=None, start=T0_NS, end=T0_NS + 2_000_000_000, error=False,
         trace_id=TRACE, span_id=SPAN) -> dict:
    return {"traceId": trace_id, "spanId": span_id, "name": name, "kind": 2,
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(end),
            "attributes": [{"key": k, "value": any_value(v)} for k, v in (attrs or {}).items()],
            "status": {"code": 2} if error else {}}


def export(*spans, resource=None) -> dict:
    res = {"attributes": [{"key": k, "value": any_value(v)} for k, v in (resource or {}).items()]}
    return {"resourceSpans": [{"resource": res, "scopeSpans": [{"scope": {"name": "t"}, "spans": list(spans)}]}]}


def one(attrs, **kw) -> dict | tuple:
    """The event of one span, or its (reason, detail)."""
    m = map_export(export(span(attrs=attrs, **{k: v for k, v in kw.items() if k != "resource"}),
                          resource=kw.get("resource")))
    assert len(m.events) + len(m.rejected) + m.ignored == 1
    return m.events[0] if m.events else m.rejected[0][1:] if m.rejected else None


def test_vllm_span():
    e = one(VLLM, resource={"service.instance.id": "vllm-0", "host.name": "gpu-7"})
    assert e == {"schema_version": 1, "kind": "generation", "request_id": "cmpl-42", "model": "llama-3.1-8b",
                 "t0": T0_NS / 1e9, "ttft_s": 0.182, "e2e_s": 1.734, "queue_s": 0.004, "input_tokens": 1200,
                 "output_tokens": 57, "cached_input_tokens": None, "status": "ok", "finish_reason": None,
                 "gateway": None, "replica": "gpu-7"}
    assert not isinstance(validate(e), Rejection)  # and the worker accepts it


def test_vllm_v1_sends_no_model_name_so_the_default_fills_it():
    attrs = {k: v for k, v in VLLM.items() if k != "gen_ai.response.model"}
    assert one(attrs)[0] == R.MISSING_FIELD
    m = map_export(export(span(attrs=attrs)), default_model="served-name")
    assert m.events[0]["model"] == "served-name"
    # a model on the span wins over the default
    assert map_export(export(span(attrs=VLLM)), default_model="x").events[0]["model"] == "llama-3.1-8b"


def test_genai_semconv_span():
    e = one(GENAI, name="chat gpt-x", resource={"host.name": "gw-1"})
    assert (e["model"], e["request_id"], e["input_tokens"], e["output_tokens"], e["cached_input_tokens"]) == \
        ("gpt-x", "chatcmpl-7", 900, 33, 512)
    assert (e["ttft_s"], e["e2e_s"], e["queue_s"], e["finish_reason"], e["replica"]) == (0.25, 2.0, None, "stop", "gw-1")
    assert not isinstance(validate(e), Rejection)


def test_sglang_span():
    e = one(SGLANG, name=" Req 9f1c")
    assert (e["request_id"], e["model"], e["input_tokens"], e["output_tokens"], e["cached_input_tokens"],
            e["ttft_s"], e["e2e_s"], e["finish_reason"]) == ("9f1c", "qwen", 64, 8, 32, 0.05, 0.4, "stop")


def test_fallbacks_ids_duration_status():
    attrs = {k: v for k, v in VLLM.items() if k not in ("gen_ai.request.id", "gen_ai.latency.e2e")}
    e = one(attrs, end=T0_NS + 3_500_000_000, error=True)
    assert e["request_id"] == TRACE + SPAN          # no id attribute: trace id + span id
    assert e["e2e_s"] == pytest.approx(3.5)         # no e2e attribute: span end - start
    assert e["status"] == "error"


def test_integral_doubles_count_as_token_counts():
    e = one({**GENAI, "gen_ai.usage.input_tokens": 900.0})
    assert e["input_tokens"] == 900 and type(e["input_tokens"]) is int


@pytest.mark.parametrize("change, reason", [
    ({"gen_ai.latency.e2e": -1.0}, R.IMPOSSIBLE_ORDER),                  # negative duration
    ({"gen_ai.latency.time_in_queue": -0.1}, R.IMPOSSIBLE_ORDER),
    ({"gen_ai.latency.time_to_first_token": 2.0}, R.IMPOSSIBLE_ORDER),   # ttft > e2e
    ({"gen_ai.latency.time_in_queue": 0.5}, R.IMPOSSIBLE_ORDER),         # scheduled after the first token
    ({"gen_ai.latency.e2e": 90_000.0}, R.ABSURD),                        # over a day
    ({"gen_ai.latency.e2e": math.nan}, R.NOT_FINITE),
    ({"gen_ai.latency.e2e": "1.7"}, R.WRONG_TYPE),
    ({"gen_ai.usage.prompt_tokens": None}, R.MISSING_FIELD),
    ({"gen_ai.usage.prompt_tokens": "1200"}, R.WRONG_TYPE),
    ({"gen_ai.usage.prompt_tokens": 12.5}, R.WRONG_TYPE),
    ({"gen_ai.usage.prompt_tokens": -3}, R.NEGATIVE),
    ({"gen_ai.usage.completion_tokens": True}, R.WRONG_TYPE),
    ({"gen_ai.usage.prompt_tokens": 20_000_000}, R.ABSURD),
    ({"gen_ai.usage.cached_tokens": 1201}, R.INCONSISTENT),               # cached > input
    ({"gen_ai.latency.time_to_first_token": None}, R.MISSING_FIELD),     # output but no first token
    ({"gen_ai.response.model": "m" * 201}, R.BAD_VALUE),                 # contract label limits
    ({"gen_ai.response.model": ""}, R.BAD_VALUE),
    ({"gen_ai.response.model": 7}, R.WRONG_TYPE),
    ({"gen_ai.request.id": "r" * 129}, R.BAD_VALUE),
])
def test_rejected(change, reason):
    attrs = {k: v for k, v in {**VLLM, **change}.items() if v is not None}
    got = one(attrs)
    assert isinstance(got, tuple) and got[0] == reason, got


@pytest.mark.parametrize("kw, reason", [
    ({"end": T0_NS - 1_000_000_000}, R.IMPOSSIBLE_ORDER),     # ends before it starts
    ({"start": 0}, R.MISSING_FIELD),
    ({"start": T0_NS // 1_000_000}, R.ABSURD),                # milliseconds, not nanoseconds
    ({"start": T0_NS + 10**18}, R.ABSURD),                    # 30 years ahead: after now + 1 day
])
def test_rejected_span_times(kw, reason):
    assert one(VLLM, **kw)[0] == reason


def test_no_output_needs_no_first_token():
    attrs = {**{k: v for k, v in GENAI.items() if k != "gen_ai.response.time_to_first_chunk"},
             "gen_ai.usage.output_tokens": 0}
    e = one(attrs, error=True)
    assert e["ttft_s"] is None and e["status"] == "error"


def test_optional_labels_that_do_not_fit_are_left_out():
    e = one({**GENAI, "gen_ai.response.finish_reasons": ["x" * 65]}, resource={"service.instance.id": "r" * 201})
    assert e["finish_reason"] is None and e["replica"] is None


@pytest.mark.parametrize("name, attrs", [
    ("GET /health", {}),
    ("GET /health", {"http.route": "/health"}),
    ("embeddings m", {"gen_ai.operation.name": "embeddings", "gen_ai.usage.input_tokens": 5}),
    ("execute_tool x", {"gen_ai.operation.name": "execute_tool"}),
    ("llm_core", {"gen_ai.request.id": "x"}),  # vLLM's engine-side child span: no latency attributes
])
def test_ignored(name, attrs):
    m = map_export(export(span(name=name, attrs=attrs)))
    assert (m.events, m.rejected, m.ignored) == ([], [], 1)


def test_mixed_request():
    spans = [span(attrs=VLLM, span_id="01" * 8), span("GET /", span_id="02" * 8),
             span(attrs={**VLLM, "gen_ai.latency.e2e": -1.0}, span_id="03" * 8),
             span("chat gpt-x", attrs=GENAI, span_id="04" * 8), span("db", span_id="05" * 8)]
    m = map_export(export(*spans))
    assert [e["request_id"] for e in m.events] == ["cmpl-42", "chatcmpl-7"]
    assert [(sid, reason) for sid, reason, _ in m.rejected] == [("03" * 8, R.IMPOSSIBLE_ORDER)]
    assert "gen_ai.latency.e2e" in m.rejected[0][2] and m.ignored == 2


# -- both encodings --------------------------------------------------------------
def pb_value(v) -> AnyValue:
    if isinstance(v, bool):
        return AnyValue(bool_value=v)
    if isinstance(v, int):
        return AnyValue(int_value=v)
    if isinstance(v, float):
        return AnyValue(double_value=v)
    if isinstance(v, list):
        return AnyValue(array_value=ArrayValue(values=[pb_value(x) for x in v]))
    return AnyValue(string_value=v)


def pb_request(specs, resource) -> ExportTraceServiceRequest:
    spans = [PbSpan(trace_id=bytes.fromhex(TRACE), span_id=bytes.fromhex(sid), name=name, kind=PbSpan.SPAN_KIND_SERVER,
                    start_time_unix_nano=T0_NS, end_time_unix_nano=T0_NS + 2_000_000_000,
                    attributes=[KeyValue(key=k, value=pb_value(v)) for k, v in attrs.items()],
                    status=Status(code=Status.STATUS_CODE_ERROR if err else Status.STATUS_CODE_UNSET))
             for sid, name, attrs, err in specs]
    res = Resource(attributes=[KeyValue(key=k, value=pb_value(v)) for k, v in resource.items()])
    return ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=res, scope_spans=[ScopeSpans(spans=spans)])])


SPECS = [("01" * 8, "llm_request", VLLM, False), ("02" * 8, "chat gpt-x", GENAI, True),
         ("03" * 8, " Req 9f1c", SGLANG, False), ("04" * 8, "GET /", {"http.method": "GET"}, False),
         ("05" * 8, "llm_request", {**VLLM, "gen_ai.latency.time_to_first_token": 9.0}, False)]


def test_protobuf_and_json_give_the_same_events():
    req = pb_request(SPECS, {"service.instance.id": "vllm-0"})
    from_pb = map_request(req.SerializeToString(), "application/x-protobuf")
    # OTLP-JSON is proto3 JSON (as the protobuf library prints it) except for hex ids.
    as_json = MessageToDict(req)
    for rs in as_json["resourceSpans"]:
        for s in rs["scopeSpans"][0]["spans"]:
            s["traceId"], s["spanId"] = (base64.b64decode(s[k]).hex() for k in ("traceId", "spanId"))
    from_json = map_request(json.dumps(as_json).encode(), "application/json; charset=utf-8")
    assert from_pb == from_json
    assert len(from_pb.events) == 3 and from_pb.ignored == 1 and len(from_pb.rejected) == 1
    assert {e["replica"] for e in from_pb.events} == {"vllm-0"} and from_pb.events[1]["status"] == "error"


def test_undecodable_bodies():
    with pytest.raises(BadRequest, match="protobuf"):
        map_request(b"\xff\xff\xff", "application/x-protobuf")
    for body in (b"{not json", b"\xff\xfe\x00", b"[1, 2]", b'{"resourceSpans": 5}',
                 b'{"resourceSpans": [{"scopeSpans": [{"spans": [3]}]}]}'):
        with pytest.raises(BadRequest):
            map_request(body, "application/json")
    with pytest.raises(UnsupportedMediaType):
        map_request(b"{}", "text/plain")
    assert map_request(b"", "application/x-protobuf") == Mapped() == map_request(b"{}", "application/json")


# -- properties ------------------------------------------------------------------
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3),
    max_leaves=8)
ANY_VALUES = JSON_VALUES | st.fixed_dictionaries(
    {}, optional={"stringValue": JSON_VALUES, "intValue": JSON_VALUES, "doubleValue": JSON_VALUES,
                  "boolValue": JSON_VALUES, "arrayValue": JSON_VALUES, "bytesValue": JSON_VALUES})
KEYS = st.sampled_from(sorted(set(VLLM) | set(GENAI) | set(SGLANG)) + ["gen_ai.operation.name", "x"])


@settings(max_examples=75)
@given(st.lists(st.tuples(st.sampled_from([VLLM, GENAI, SGLANG, {}]),
                          st.dictionaries(KEYS, ANY_VALUES, max_size=4),
                          st.one_of(st.just(str(T0_NS)), st.integers(), st.text(max_size=25), st.none())),
                min_size=1, max_size=4))
def test_any_attribute_values_map_reject_or_ignore(cases):
    """Whatever the attribute values, each span is mapped, rejected or
    ignored -- never an exception -- and every mapped event is one the
    worker accepts."""
    spans = []
    for base, noise, start in cases:
        s = span(attrs=base)
        s["attributes"] += [{"key": k, "value": v} for k, v in noise.items()]
        s["startTimeUnixNano"] = start
        spans.append(s)
    try:
        m = map_export(export(*spans), now=MAX_EPOCH_S)
    except BadRequest as exc:  # a start no uint64 holds: the request does not decode (400), naming the field
        assert any(int(start) >= 2**64 for _, _, start in cases
                   if type(start) is int or type(start) is str and start.isascii() and start.isdigit())
        assert "startTimeUnixNano" in str(exc)
        return
    assert len(m.events) + len(m.rejected) + m.ignored == len(spans)
    assert all(reason in R.ALL for _, reason, _ in m.rejected)
    for e in m.events:
        assert not isinstance(validate(e, now=MAX_EPOCH_S), Rejection), e


@settings(max_examples=100)
@given(st.binary(max_size=200))
def test_any_protobuf_bytes_decode_or_are_a_bad_request(body):
    try:
        m = map_request(body, "application/x-protobuf", now=MAX_EPOCH_S)
    except BadRequest:
        return
    assert all(not isinstance(validate(e, now=MAX_EPOCH_S), Rejection) for e in m.events)


seconds = st.floats(min_value=0.0, max_value=3000.0, allow_nan=False)


@settings(max_examples=100)
@given(ttft=st.floats(min_value=1e-6, max_value=3000.0), decode=seconds, n_in=st.integers(0, 10_000_000),
       n_out=st.integers(1, 10_000_000),  # 0.0 is "no first token", 0 output with a TTFT an embedding
       start=st.integers(946_684_800 * 10**9, 4_000_000_000 * 10**9))
def test_valid_vllm_spans_map_exactly(ttft, decode, n_in, n_out, start):
    attrs = {**VLLM, "gen_ai.latency.time_to_first_token": ttft, "gen_ai.latency.e2e": ttft + decode,
             "gen_ai.latency.time_in_queue": ttft / 2, "gen_ai.usage.prompt_tokens": n_in,
             "gen_ai.usage.completion_tokens": n_out}
    m = map_export(export(span(attrs=attrs, start=start, end=start)), now=MAX_EPOCH_S)
    [e] = m.events
    assert (e["ttft_s"], e["e2e_s"], e["queue_s"], e["input_tokens"], e["output_tokens"], e["t0"]) == \
        (ttft, ttft + decode, ttft / 2, n_in, n_out, start / 1e9)
    assert not isinstance(validate(e, now=MAX_EPOCH_S), Rejection)
