"""Property-based fuzzing of the OTLP decoders (otlp_decode, through
otlp_map.map_request) and of the body inflation (otlp_wire.inflate).

The invariant, for any input: the request is refused whole with a reason
(BadRequest, TooManySpans) or every span in it is mapped, rejected with a
reason code, or ignored; never another exception. A mapped event passes the
worker's validation and holds only text UTF-8 can encode."""

from __future__ import annotations

import gzip
import json
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans
from opentelemetry.proto.trace.v1.trace_pb2 import Span as PbSpan

from phasemeter.integrations.otlp_wire import count_proto_spans
from phasemeter.integrations.otlp_wire import TooLarge, inflate
from phasemeter.integrations.otlp_map import JSON, PROTOBUF, BadRequest, TooManySpans, map_request
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import MAX_EPOCH_S, Rejection
from phasemeter.stream_jobs.derive import validate

NOW = MAX_EPOCH_S
T0_NS = 1_700_000_000_123_456_789
KEYS = ["gen_ai.request.id", "gen_ai.response.id", "gen_ai.request.model", "gen_ai.response.model",
        "gen_ai.usage.prompt_tokens", "gen_ai.usage.completion_tokens", "gen_ai.usage.input_tokens",
        "gen_ai.usage.output_tokens", "gen_ai.usage.cached_tokens", "gen_ai.latency.e2e",
        "gen_ai.latency.time_to_first_token", "gen_ai.latency.time_in_queue", "gen_ai.response.finish_reasons",
        "gen_ai.operation.name", "service.instance.id", "host.name", "x"]
BASE = {"gen_ai.response.model": "m", "gen_ai.usage.prompt_tokens": "10", "gen_ai.usage.completion_tokens": "5",
        "gen_ai.latency.time_to_first_token": 0.1, "gen_ai.latency.e2e": 1.0}

# Hostile leaves: lone surrogates, huge and negative integers, digit strings
# past Python's int limit, non-finite spellings, deep and odd containers.
HOSTILE_TEXT = st.one_of(st.text(max_size=12), st.sampled_from(["\ud800", "a\udfff", "[\"stop\ud800\"]", "[", "",
                                                                "9" * 4400, "-1", "NaN", "Infinity", "1e400"]))
NUMBERS = st.one_of(st.integers(), st.integers(min_value=2**63, max_value=10**500), st.floats(),
                    st.sampled_from([10**400, -(10**400), 2**64, 2**64 - 1]))
LEAF = st.one_of(HOSTILE_TEXT, NUMBERS, st.booleans(), st.none())
ANY = st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                  st.dictionaries(st.sampled_from(
                                                      ["stringValue", "intValue", "doubleValue", "boolValue",
                                                       "arrayValue", "values", "kvlistValue", "x"]), inner,
                                                      max_size=3)), max_leaves=8)


def attrs(d: dict) -> list:
    return [{"key": k, "value": v if isinstance(v, dict) else
             {"doubleValue": v} if isinstance(v, float) else {"stringValue": v} if isinstance(v, str) else
             {"intValue": str(v)}} for k, v in d.items()]


def check(m, n_spans: int) -> None:
    assert len(m.events) + len(m.rejected) + m.ignored == n_spans
    assert all(reason in R.ALL for _, reason, _ in m.rejected)
    for e in m.events:
        assert not isinstance(validate(e, now=NOW), Rejection), e
        for label in ("model", "request_id", "finish_reason", "replica"):
            if e[label] is not None:
                e[label].encode("utf-8")  # never a lone surrogate


@settings(max_examples=300)
@given(st.lists(st.tuples(st.dictionaries(st.sampled_from(KEYS), ANY, max_size=5),
                          st.one_of(st.just(str(T0_NS)), LEAF),
                          st.dictionaries(st.sampled_from(["service.instance.id", "host.name"]), ANY, max_size=2)),
                min_size=1, max_size=5))
def test_otlp_json_with_hostile_values_maps_rejects_ignores_or_is_a_bad_request(cases):
    spans, resources = [], []
    for extra, start, resource in cases:
        spans.append({"spanId": "b7ad6b7169203331", "name": "llm_request", "startTimeUnixNano": start,
                      "attributes": attrs({**BASE}) + attrs(extra)})
        resources.append(attrs(resource))
    req = {"resourceSpans": [{"resource": {"attributes": r}, "scopeSpans": [{"spans": [s]}]}
                             for s, r in zip(spans, resources, strict=True)]}
    try:
        body = json.dumps(req).encode()
    except ValueError:  # an int json itself cannot write (over 4,300 digits)
        return
    try:
        m = map_request(body, JSON, now=NOW, max_spans=100)
    except BadRequest as exc:
        assert str(exc)
        return
    check(m, len(spans))


@settings(max_examples=300)
@given(st.recursive(LEAF, lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(
    st.sampled_from(["resourceSpans", "scopeSpans", "spans", "attributes", "resource", "key", "value",
                     "startTimeUnixNano", "status", "code", "name", "spanId"]), inner, max_size=4)), max_leaves=20))
def test_any_json_document_is_a_bad_request_or_mapped(doc):
    try:
        body = json.dumps(doc).encode()
    except ValueError:
        return
    try:
        m = map_request(body, JSON, now=NOW, max_spans=50)
    except BadRequest:
        return
    for e in m.events:
        assert not isinstance(validate(e, now=NOW), Rejection), e


def pb_body(n_spans: list[int], attrs_per_span: int = 1) -> bytes:
    req = ExportTraceServiceRequest()
    for n in n_spans:
        rs = ResourceSpans()
        ss = ScopeSpans()
        for i in range(n):
            ss.spans.append(PbSpan(name="llm_request", start_time_unix_nano=T0_NS, span_id=bytes([i % 256]) * 8,
                                   attributes=[KeyValue(key="gen_ai.latency.e2e", value=AnyValue(double_value=1.0))]
                                   * attrs_per_span))
        rs.scope_spans.append(ss)
        rs.scope_spans.append(ScopeSpans())
        req.resource_spans.append(rs)
    return req.SerializeToString()


@settings(max_examples=100)
@given(st.lists(st.integers(min_value=0, max_value=20), max_size=4), st.integers(min_value=0, max_value=60))
def test_the_wire_count_of_spans_is_the_parsed_count_and_the_limit_holds(n_spans, limit):
    body = pb_body(n_spans)
    total = sum(n_spans)
    assert count_proto_spans(body, 10**6) == total
    try:
        m = map_request(body, PROTOBUF, now=NOW, max_spans=limit)
    except TooManySpans:
        assert total > limit
        return
    assert total <= limit
    check(m, total)


@settings(max_examples=300)
@given(st.data())
def test_mutated_protobuf_is_a_bad_request_or_mapped(data):
    body = bytearray(pb_body(data.draw(st.lists(st.integers(min_value=0, max_value=5), min_size=1, max_size=3))))
    for _ in range(data.draw(st.integers(min_value=1, max_value=4))):
        op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        at = data.draw(st.integers(min_value=0, max_value=max(0, len(body) - 1)))
        if op == "flip" and body:
            body[at] ^= 1 << data.draw(st.integers(min_value=0, max_value=7))
        elif op == "cut":
            del body[at:]
        else:
            body[at:at] = data.draw(st.binary(min_size=1, max_size=8))
    try:
        m = map_request(bytes(body), PROTOBUF, now=NOW, max_spans=30)
    except BadRequest:
        return
    for e in m.events:
        assert not isinstance(validate(e, now=NOW), Rejection), e


@settings(max_examples=200)
@given(st.lists(st.binary(max_size=300), min_size=1, max_size=4), st.integers(min_value=1, max_value=1000))
def test_every_gzip_member_is_inflated_and_their_total_is_bounded(parts, limit):
    body = b"".join(gzip.compress(p) for p in parts)
    whole = b"".join(parts)
    try:
        out = inflate(body, "gzip", limit)
    except TooLarge:
        assert len(whole) > limit
        return
    assert out == whole and len(out) <= limit


@settings(max_examples=300)
@given(st.binary(max_size=400), st.sampled_from(["gzip", "deflate"]))
def test_any_bytes_inflate_or_are_refused(raw, encoding):
    candidates = [raw, gzip.compress(raw)[: len(raw) % 40 + 10] + raw, zlib.compress(raw) + raw[:3]]
    for body in candidates:
        try:
            out = inflate(body, encoding, 500)
        except (BadRequest, TooLarge):
            continue
        assert len(out) <= 500
