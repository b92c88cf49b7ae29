"""OTLP trace data -> phasemeter generation events (schema v1). Pure.

The mapping rules; the attribute names they read, in precedence order, are
otlp_names' (docs/ingest/otlp.md's table is generated from them), each
field's value from a span otlp_fields', the two halves of a P/D request
otlp_pd's; decoding either encoding into `Span` is otlp_decode's.

One span per LLM request becomes one event. Engines' request spans (vLLM's
`llm_request`, SGLang's `"{role} Req {rid[:8]}"`) carry no
gen_ai.operation.name; GenAI-convention spans do. What engines send besides
a finished request, and how it is read (docs/ingest/otlp.md):
  * no first token: vLLM sets time_to_first_token = 0.0, SGLang a finish
    reason "abort"; stored `cancelled` with a null ttft_s, never a TTFT of 0;
  * embeddings: an engine span with no completion_tokens (SGLang) or with
    none and a first token (vLLM pooling) is ignored, counted as `embedding`;
  * vLLM n > 1: every child span carries the parent's request id, so each
    gets `-<span id>` appended (stable across re-exports: a re-sent span is
    still a duplicate).
Every event returned passes the worker's validation
(stream_jobs.derive.validate); anything the worker would dead-letter is
rejected here instead, with the same reason codes.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from dataclasses import dataclass, field

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import LABEL_FIELDS, Rejection, check_count

# Decoding is otlp_decode's job; its names are re-exported here, where the
# receiver, the worker's OTLP topic and the tests import them from.
from .otlp_decode import (DEFAULT_MAX_SPANS, BadRequest, Span, TooManySpans, UnsupportedMediaType, json_spans,
                          proto_spans)
from .otlp_fields import finish_reason, kv_transfer, label_error, pick, replica, request_id, timing
from .otlp_limits import DEFAULT_MAX_BODY
from .otlp_names import CACHED, E2E, ERROR_TYPE, FINISH, INPUT, MODEL, OPERATION, OUTPUT, REPLICA, STREAM, TTFT
from .otlp_pd import phases, role_of

__all__ = ["Mapped", "Span", "BadRequest", "UnsupportedMediaType", "TooManySpans", "map_request", "map_export",
           "map_span", "PROTOBUF", "JSON", "LLM_OPERATIONS", "NOT_LLM", "EMBEDDING", "DEFAULT_MAX_SPANS",
           "DEFAULT_MAX_BODY"]

PROTOBUF = "application/x-protobuf"
JSON = "application/json"

# gen_ai.operation.name values that are one generation. embeddings,
# execute_tool, invoke_agent, ... are other work: ignored, not rejected.
LLM_OPERATIONS = frozenset({"chat", "text_completion", "generate_content", "completion"})
EMBEDDING_OPERATIONS = frozenset({"embeddings", "embedding"})
# Why a span was ignored (Mapped.ignored_by).
NOT_LLM, EMBEDDING = "not_llm", "embedding"
VLLM_SPAN_NAME = "llm_request"
# SGLang's request root span: "{role} Req {rid[:8]}", the role `prefill` or
# `decode` in P/D serving and empty otherwise (hence a leading space).
SGLANG_SPAN_NAME = re.compile(r"(?:prefill|decode)? Req \S+")
ABORT = "abort"


@dataclass
class Mapped:
    events: list[dict] = field(default_factory=list)   # generation (v1; v2 with a KV transfer) and phase events
    rejected: list[tuple[str, str, str]] = field(default_factory=list)  # (span_id hex, reason, detail)
    ignored: int = 0                                    # spans that are not LLM requests
    ignored_by: Counter = field(default_factory=Counter)  # why: NOT_LLM, EMBEDDING
    replicas_dropped: int = 0                           # UUID-shaped replica values left out
    # optional labels left out of a mapped event because they do not fit (event field -> count)
    labels_dropped: Counter = field(default_factory=Counter)


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
        result = map_span(span, default_model, now, out)
        role = role_of(span) if type(result) is dict else None
        if role is not None:  # one half of a P/D request: a phase event of its generation
            result = phases(span, role, result)
        if type(result) is str:
            out.ignored += 1
            out.ignored_by[result] += 1
        elif isinstance(result, Rejection):
            out.rejected.append((span.span_id, result.reason, result.detail))
        else:
            out.events.append(result)
            if result.get("kind") == "generation":
                if result["replica"] is None and pick(span.resource, REPLICA)[1] is not None:
                    out.labels_dropped["replica"] += 1
                if result["finish_reason"] is None and pick(span.attrs, FINISH)[1] not in (None, [], "[]"):
                    out.labels_dropped["finish_reason"] += 1
    return out


def kind_of(span: Span) -> str | None:
    """"engine" (vLLM/SGLang request span), "genai" (a GenAI-convention LLM
    call), or why the span is ignored (NOT_LLM, EMBEDDING)."""
    op = pick(span.attrs, OPERATION)[1]
    if op is not None:
        if type(op) is str and op in LLM_OPERATIONS:
            return "genai"
        return EMBEDDING if type(op) is str and op in EMBEDDING_OPERATIONS else NOT_LLM
    if (span.name == VLLM_SPAN_NAME or SGLANG_SPAN_NAME.fullmatch(span.name) or E2E[0] in span.attrs
            or TTFT[0] in span.attrs):
        return "engine"
    return NOT_LLM


def map_span(span: Span, default_model: str | None = None, now: float | None = None,
             out: Mapped | None = None) -> dict | Rejection | str:
    """The event of one span, a Rejection, or why it is ignored (a str).
    `out`, when given, counts the replica values left out."""
    kind = kind_of(span)
    if kind not in ("engine", "genai"):
        return kind
    a = span.attrs
    engine = kind == "engine" and role_of(span) is None  # a P/D half is no embedding
    if engine and pick(a, OUTPUT)[1] is None and pick(a, INPUT)[1] is not None:
        return EMBEDDING  # SGLang's embedding requests carry no completion_tokens
    counts = {}
    for field_name, names in (("input_tokens", INPUT), ("output_tokens", OUTPUT), ("cached_input_tokens", CACHED)):
        name, value = pick(a, names)
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
    ttft_name, ttft = pick(a, TTFT)
    if engine and counts["output_tokens"] == 0 and type(ttft) in (int, float) and ttft > 0:
        return EMBEDDING  # vLLM pooling: a first "token" and no completion tokens
    if counts["cached_input_tokens"] is not None and counts["cached_input_tokens"] > counts["input_tokens"]:
        return Rejection(R.INCONSISTENT, f"cached input tokens {counts['cached_input_tokens']} > "
                                         f"input tokens {counts['input_tokens']}")
    name, model = pick(a, MODEL)
    if model is None:
        if default_model is None:
            return Rejection(R.MISSING_FIELD, "model: the span has no gen_ai.request.model or "
                                              "gen_ai.response.model and no default model is set")
        name, model = "the default model", default_model
    bad = label_error(name, model, LABEL_FIELDS["model"])
    if bad is not None:
        return bad
    rid = request_id(span)
    if isinstance(rid, Rejection):
        return rid
    times = timing(span, counts["output_tokens"], time.time() if now is None else now)
    if isinstance(times, Rejection):
        return times
    finish = finish_reason(a.get(FINISH[0]))
    error = a.get(ERROR_TYPE)
    status = ("error" if span.error or (type(error) is str and error) else
              "cancelled" if finish == ABORT or (ttft is not None and times["ttft_s"] is None) else "ok")
    label, dropped = replica(span.resource)
    if dropped and out is not None:
        out.replicas_dropped += 1
    event = {"schema_version": 1, "kind": "generation", "request_id": rid, "model": model, **times, **counts,
             "status": status, "finish_reason": finish, "gateway": None, "replica": label}
    kv = kv_transfer(span, times, role_of(span) is not None)
    if isinstance(kv, Rejection):
        return kv
    if kv is not None:  # a v2 field: the event is v2 only when it carries one
        event.update(schema_version=2, kv_transfer_s=kv)
    if a.get(STREAM) is False:  # a call not streamed (contract.STREAMED): no first token to time
        event.update(schema_version=2, streamed=False)
    return event
