"""OTLP trace data -> phasemeter generation events (schema v1). Pure.

The mapping rules; decoding either encoding into `Span` is otlp_decode's.

One span per LLM request becomes one event. Two attribute families are read;
where both name a field, the first name present in the tuples below wins,
so a span carrying both gives one answer:
  * vLLM's `llm_request` span (vllm/tracing SpanAttributes), whose names SGLang
    also puts on its request root span: gen_ai.usage.prompt_tokens,
    gen_ai.latency.time_to_first_token, gen_ai.latency.e2e, ...;
  * GenAI semantic conventions (semantic-conventions-genai v0.1.0), the
    `gen_ai.client.inference` span: gen_ai.operation.name, gen_ai.usage.input_tokens,
    gen_ai.response.time_to_first_chunk, ...
docs/ingest/otlp.md has the table. Every event returned passes the worker's
validation (stream_jobs.derive.validate); anything the worker would
dead-letter is rejected here instead, with the same reason codes.
"""

from __future__ import annotations

import collections
import json
import time
from dataclasses import dataclass, field

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import control_character, has_control
from phasemeter.stream_jobs.contract import (LABEL_FIELDS, MAX_DURATION_S, MIN_T0, Rejection, check_count,
                                             check_duration, lone_surrogate)

# Decoding is otlp_decode's job; its names are re-exported here, where the
# receiver, the worker's OTLP topic and the tests import them from.
from .otlp_decode import (DEFAULT_MAX_SPANS, REPLICA, BadRequest, Span, TooManySpans, UnsupportedMediaType,
                          json_spans, proto_spans)

__all__ = ["Mapped", "Span", "BadRequest", "UnsupportedMediaType", "TooManySpans", "map_request", "map_export",
           "map_span", "PROTOBUF", "JSON", "LLM_OPERATIONS", "DEFAULT_MAX_SPANS"]

# The largest OTLP request body taken (the receiver's --max-body-bytes default);
# here, not in the receiver, so `phasemeter --help` can show it without
# loading http.server.
DEFAULT_MAX_BODY = 4 * 1024 * 1024
PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# gen_ai.operation.name values that are one generation. embeddings,
# execute_tool, invoke_agent, ... are other work: ignored, not rejected.
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
# A span without gen_ai.operation.name is a vLLM-family request when it has
# this name or a latency attribute (SGLang names its span "Req <rid>").
VLLM_SPAN_NAME = "llm_request"
INPUT = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHED = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cached_tokens")
MODEL = ("gen_ai.request.model", "gen_ai.response.model")
REQUEST_ID = ("gen_ai.request.id", "gen_ai.response.id")
TTFT = ("gen_ai.latency.time_to_first_token", "gen_ai.response.time_to_first_chunk")
E2E = "gen_ai.latency.e2e"
QUEUE = "gen_ai.latency.time_in_queue"
FINISH = "gen_ai.response.finish_reasons"


@dataclass
class Mapped:
    events: list[dict] = field(default_factory=list)   # v1 generation events
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # (span_id hex, reason, detail)
    ignored: int = 0                                    # spans that are not LLM requests
    # optional labels left out of a mapped event because they do not fit (event field -> count)
    labels_dropped: collections.Counter = field(default_factory=collections.Counter)


def map_request(body: bytes, content_type: str, *, default_model: str | None = None,
                now: float | None = None, max_spans: int | None = None) -> Mapped:
    """One OTLP/HTTP request body. `content_type` may carry parameters
    (`application/json; charset=utf-8`). BadRequest if it cannot be decoded,
    UnsupportedMediaType (a BadRequest) for another content type.
    `default_model` labels spans that carry no model name; `now` (default:
    the clock) bounds span start times as the worker does, at now + 1 day.
    TooManySpans (a BadRequest) when it holds more than `max_spans`."""
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind == PROTOBUF:
        return _map(proto_spans(body, max_spans), default_model, now)
    if kind == JSON:
        try:
            req = json.loads(body)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise BadRequest(f"body is not JSON: {str(exc)[:200]}") from None
        return _map(json_spans(req, max_spans), default_model, now)
    raise UnsupportedMediaType(f"content type {kind!r}; expected {PROTOBUF} or {JSON}")


def map_export(req: dict, *, default_model: str | None = None, now: float | None = None) -> Mapped:
    """An ExportTraceServiceRequest in its OTLP-JSON form (camelCase keys,
    64-bit integers as strings, trace and span ids in hex)."""
    return _map(json_spans(req), default_model, now)


def _map(spans, default_model: str | None, now: float | None) -> Mapped:
    out = Mapped()
    now = time.time() if now is None else now
    for span in spans:
        result = map_span(span, default_model, now)
        if result is None:
            out.ignored += 1
        elif isinstance(result, Rejection):
            out.rejected.append((span.span_id, result.reason, result.detail))
        else:
            out.events.append(result)
            if result["replica"] is None and _pick(span.resource, REPLICA)[1] is not None:
                out.labels_dropped["replica"] += 1
            if result["finish_reason"] is None and span.attrs.get(FINISH) not in (None, [], "[]"):
                out.labels_dropped["finish_reason"] += 1
    return out


def is_llm_request(span: Span) -> bool:
    op = span.attrs.get("gen_ai.operation.name")
    if op is not None:
        return type(op) is str and op in LLM_OPERATIONS
    return span.name == VLLM_SPAN_NAME or E2E in span.attrs or TTFT[0] in span.attrs


def map_span(span: Span, default_model: str | None = None, now: float | None = None) -> dict | Rejection | None:
    """The event of one span, a Rejection, or None when it is no LLM request."""
    if not is_llm_request(span):
        return None
    a = span.attrs
    counts = {}
    for field_name, names in (("input_tokens", INPUT), ("output_tokens", OUTPUT), ("cached_input_tokens", CACHED)):
        name, value = _pick(a, names)
        if value is None:
            if field_name != "cached_input_tokens":
                return Rejection(R.MISSING_FIELD, f"{field_name}: the span has none of {', '.join(names)}")
            counts[field_name] = None
            continue
        if type(value) is float and value.is_integer():  # some SDKs send every number as a double
            value = int(value)
        bad = check_count(name, value)
        if bad is not None:
            return bad
        counts[field_name] = value
    if counts["cached_input_tokens"] is not None and counts["cached_input_tokens"] > counts["input_tokens"]:
        return Rejection(R.INCONSISTENT, f"cached input tokens {counts['cached_input_tokens']} > "
                                         f"input tokens {counts['input_tokens']}")
    name, model = _pick(a, MODEL)
    if model is None:
        if default_model is None:
            return Rejection(R.MISSING_FIELD, "model: the span has no gen_ai.request.model or "
                                              "gen_ai.response.model and no default model is set")
        name, model = "the default model", default_model
    bad = _label(name, model, LABEL_FIELDS["model"])
    if bad is not None:
        return bad
    name, rid = _pick(a, REQUEST_ID)
    if rid is None:  # no id of its own: the span's is unique too
        name, rid = "trace_id+span_id", span.trace_id + span.span_id
        if not rid:
            return Rejection(R.MISSING_FIELD, "request_id: no gen_ai.request.id / gen_ai.response.id "
                                              "and no trace or span id")
    bad = _label(name, rid, LABEL_FIELDS["request_id"])
    if bad is not None:
        return bad
    timing = _timing(span, counts["output_tokens"], time.time() if now is None else now)
    if isinstance(timing, Rejection):
        return timing
    return {"schema_version": 1, "kind": "generation", "request_id": rid, "model": model, **timing, **counts,
            "status": "error" if span.error else "ok", "finish_reason": _finish_reason(a.get(FINISH)),
            "gateway": None, "replica": _optional_label(span.resource, REPLICA, LABEL_FIELDS["replica"])}


def _timing(span: Span, output_tokens: int, now: float) -> dict | Rejection:
    start, end = span.start_ns, span.end_ns
    if start <= 0:
        return Rejection(R.MISSING_FIELD, "startTimeUnixNano is missing or not a positive integer")
    t0 = start / 1e9
    if not MIN_T0 <= t0 <= now + MAX_DURATION_S:
        return Rejection(R.ABSURD, f"span start {t0} is not epoch seconds between 2000 and now + 1 day")
    if end and end < start:
        return Rejection(R.IMPOSSIBLE_ORDER, f"span ends {(start - end) / 1e9:g} s before it starts")
    e2e = span.attrs.get(E2E)
    e2e_name = E2E
    if e2e is None:
        if end <= 0:
            return Rejection(R.MISSING_FIELD, f"e2e: no {E2E} and no endTimeUnixNano")
        e2e, e2e_name = (end - start) / 1e9, "span end - start"
    ttft_name, ttft = _pick(span.attrs, TTFT)
    queue = span.attrs.get(QUEUE)
    for name, value in ((e2e_name, e2e), (ttft_name, ttft), (QUEUE, queue)):
        bad = None if value is None else check_duration(name, value)
        if bad is not None:
            return bad
    if ttft is not None and ttft > e2e:
        return Rejection(R.IMPOSSIBLE_ORDER, f"{ttft_name}={ttft} > {e2e_name}={e2e}")
    if queue is not None and queue > (e2e if ttft is None else ttft):
        return Rejection(R.IMPOSSIBLE_ORDER, f"{QUEUE}={queue} is after the first token / the end")
    if ttft is None and output_tokens > 0:  # e.g. a non-streaming call: no prefill/decode split
        return Rejection(R.MISSING_FIELD, f"time to first token: {output_tokens} output tokens but none of "
                                          f"{', '.join(TTFT)}")
    return {"t0": t0, "ttft_s": None if ttft is None else float(ttft), "e2e_s": float(e2e),
            "queue_s": None if queue is None else float(queue)}


def _pick(attrs: dict, names: tuple[str, ...]):
    for name in names:
        value = attrs.get(name)
        if value is not None:
            return name, value
    return names[0], None


def _label(name: str, value, limit: int) -> Rejection | None:
    if type(value) is not str:
        return Rejection(R.WRONG_TYPE, f"{name} must be a string, got {type(value).__name__}")
    if not 0 < len(value) <= limit:
        return Rejection(R.BAD_VALUE, f"{name} must be 1..{limit} characters, got {len(value)}")
    # text the worker could not store (not_utf8), or would dead-letter (control_character)
    return lone_surrogate(value, name) or control_character(name, value)


def _optional_label(attrs: dict, names: tuple[str, ...], limit: int) -> str | None:
    """An optional label that does not fit the contract is left out, not fatal."""
    value = _pick(attrs, names)[1]
    return value if type(value) is str and 0 < len(value) <= limit and lone_surrogate(value) is None \
        and not has_control(value) else None


def _finish_reason(value) -> str | None:
    """The first of gen_ai.response.finish_reasons: a string array, or (SGLang)
    that array JSON-encoded in one string."""
    if type(value) is str and value.startswith("["):
        try:
            value = json.loads(value)
        except (ValueError, RecursionError):
            return None
    if type(value) is list:
        value = value[0] if value else None
    return value if type(value) is str and 0 < len(value) <= LABEL_FIELDS["finish_reason"] \
        and lone_surrogate(value) is None and not has_control(value) else None
