"""OTLP trace data -> `Span`, the same from either encoding. Pure.

Decodes an ExportTraceServiceRequest, protobuf or OTLP-JSON, into the few
fields the mapping (otlp_map) reads of each span, so the mapping rules are
written once, not per encoding. Only gen_ai.* span attributes (and the few
others otlp_names lists) and the replica labels of the resource are kept: the rest is never read, and skipping it is
most of the speed (bench/bench_otlp.py). A body that is not a request raises
BadRequest; an odd attribute value is kept as it is, for the mapping to
reject with the worker's reason codes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from .otlp_limits import DEFAULT_MAX_SPANS  # re-exported: spans one request may carry
from .otlp_names import OTHER_SPAN_KEYS, REPLICA, ROLE
from .otlp_wire import BadRequest, count_proto_spans

__all__ = ["Span", "BadRequest", "UnsupportedMediaType", "TooManySpans", "proto_spans", "json_spans", "REPLICA",
           "DEFAULT_MAX_SPANS"]

_RESOURCE_KEYS = frozenset(REPLICA + (ROLE,))


class UnsupportedMediaType(BadRequest):
    """Neither OTLP encoding (HTTP 415)."""


class TooManySpans(BadRequest):
    """More spans than one request may carry (HTTP 413, gRPC RESOURCE_EXHAUSTED
    without RetryInfo): sending it again cannot help, a smaller batch can."""


# The largest value of a protobuf uint64 (startTimeUnixNano, endTimeUnixNano).
_UINT64_MAX = (1 << 64) - 1
_INT64_MIN = -(1 << 63)


@dataclass(frozen=True, slots=True)
class Span:
    """What the mapping reads of one span, the same from either encoding.
    attrs holds only the span attributes read, resource only the replica labels."""
    trace_id: str     # hex, "" when absent
    span_id: str
    name: str
    start_ns: int     # 0 when absent or not an integer
    end_ns: int
    error: bool       # status code ERROR
    attrs: dict
    resource: dict


_STATUS_ERROR = 2  # opentelemetry.proto.trace.v1.Status.STATUS_CODE_ERROR


def proto_spans(body: bytes, max_spans: int | None = None):
    """Spans of a protobuf ExportTraceServiceRequest. The protobuf runtime is
    imported here, so the JSON path and the gateway install never need it.
    TooManySpans when it holds more than `max_spans`, found by a scan of the
    wire format that stops there: the message is parsed only if it fits."""
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    if max_spans is not None:
        n = count_proto_spans(body, max_spans)
        if n > max_spans:
            raise TooManySpans(f"the request holds over {max_spans} spans, the limit of one request; "
                               "send smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)")
    req = ExportTraceServiceRequest()
    try:
        req.ParseFromString(body)
    except DecodeError as exc:
        raise BadRequest(f"body is not a protobuf ExportTraceServiceRequest: {exc}") from None
    spans = []
    for rs in req.resource_spans:
        resource = _proto_attrs(rs.resource.attributes, _RESOURCE_KEYS.__contains__)
        for ss in rs.scope_spans:
            for s in ss.spans:
                spans.append(Span(s.trace_id.hex(), s.span_id.hex(), s.name, s.start_time_unix_nano,
                                  s.end_time_unix_nano, s.status.code == _STATUS_ERROR,
                                  _proto_attrs(s.attributes, _is_gen_ai), resource))
    return spans


def _is_gen_ai(key: str) -> bool:
    return key.startswith("gen_ai.") or key in OTHER_SPAN_KEYS


_PROTO_SCALARS = frozenset({"string_value", "int_value", "double_value", "bool_value", "bytes_value"})


def _proto_attrs(attributes, wanted) -> dict:
    # The hot loop of the receiver: each field read of a upb message builds a
    # Python object, so each is read once (bench/bench_otlp.py).
    out = {}
    for kv in attributes:
        key = kv.key
        if wanted(key):
            v = kv.value
            which = v.WhichOneof("value")
            out[key] = getattr(v, which) if which in _PROTO_SCALARS else _proto_value(v)
    return out


def _proto_value(v):
    which = v.WhichOneof("value")
    if which == "array_value":
        return [_proto_value(x) for x in v.array_value.values]
    if which is None or which == "kvlist_value":  # no attribute read here is a map
        return None
    return getattr(v, which)


def json_spans(req, max_spans: int | None = None) -> list[Span]:
    """Spans of an OTLP-JSON request. Containers of the wrong shape make the
    request undecodable (BadRequest, naming where); odd attribute values are
    left for the mapping to reject. snake_case keys are accepted too, as a
    proto3 JSON parser does. TooManySpans over `max_spans`, counted before
    any span is read."""
    if max_spans is not None:
        n = sum(len(_items(ss, "spans", "spans", "scopeSpans")) for rs in _items(req, "resourceSpans",
                "resource_spans", "request") for ss in _items(rs, "scopeSpans", "scope_spans", "resourceSpans"))
        if n > max_spans:
            raise TooManySpans(f"the request holds {n} spans, over the limit of {max_spans} for one request; "
                               "send smaller batches (OTEL_BSP_MAX_EXPORT_BATCH_SIZE)")
    spans = []
    for i, rs in enumerate(_items(req, "resourceSpans", "resource_spans", "request")):
        where = f"resourceSpans[{i}]"
        res = rs.get("resource")
        resource = _json_attrs(res if type(res) is dict else {}, _RESOURCE_KEYS.__contains__, where + ".resource")
        for j, ss in enumerate(_items(rs, "scopeSpans", "scope_spans", where)):
            for k, s in enumerate(_items(ss, "spans", "spans", f"{where}.scopeSpans[{j}]")):
                here = f"{where}.scopeSpans[{j}].spans[{k}]"
                status = s.get("status")
                code = status.get("code") if type(status) is dict else None
                name = s.get("name")
                spans.append(Span(_hex(_get(s, "traceId", "trace_id")), _hex(_get(s, "spanId", "span_id")),
                                  name if type(name) is str else "",
                                  _nanos(_get(s, "startTimeUnixNano", "start_time_unix_nano"),
                                         here + ".startTimeUnixNano"),
                                  _nanos(_get(s, "endTimeUnixNano", "end_time_unix_nano"), here + ".endTimeUnixNano"),
                                  code in (_STATUS_ERROR, "STATUS_CODE_ERROR"),
                                  _json_attrs(s, _is_gen_ai, here), resource))
    return spans


def _get(obj: dict, camel: str, snake: str):
    value = obj.get(camel)
    return obj.get(snake) if value is None else value


def _items(obj, camel: str, snake: str, where: str) -> list[dict]:
    if type(obj) is not dict:
        raise BadRequest(f"{where} must be a JSON object")
    items = _get(obj, camel, snake)
    if items is None:
        return []
    if type(items) is not list or any(type(x) is not dict for x in items):
        raise BadRequest(f"{where}.{camel} must be a list of objects")
    return items


def _json_attrs(obj: dict, wanted, where: str) -> dict:
    out = {}
    for kv in _items(obj, "attributes", "attributes", where):
        key = kv.get("key")
        if type(key) is str and wanted(key):
            out[key] = _json_value(kv.get("value"))
    return out


_SCALARS = (("stringValue", "string_value"), ("boolValue", "bool_value"), ("bytesValue", "bytes_value"))


def _json_value(v, depth: int = 0):
    """An OTLP-JSON AnyValue. intValue is a string (int64) or a number;
    doubleValue a number or "NaN"/"Infinity"; anything else reads as absent."""
    if type(v) is not dict or depth > 8:
        return None
    raw = _get(v, "intValue", "int_value")
    if raw is not None:
        try:
            value = int(raw) if type(raw) in (int, str) else raw
        except ValueError:  # "12.5", "abc", over Python's 4,300 digits: the mapping rejects it as wrong_type
            return raw
        # Beyond int64 it is no intValue: kept as text, rejected as wrong_type, never a float overflow later
        return str(raw) if type(value) is int and not _INT64_MIN <= value <= _UINT64_MAX else value
    raw = _get(v, "doubleValue", "double_value")
    if raw is not None:
        try:
            return float(raw) if type(raw) in (int, float, str) else raw
        except ValueError:
            return raw
        except OverflowError:  # an integer past the double range is one, as JSON's 1e400: infinite
            return math.inf if raw > 0 else -math.inf
    arr = _get(v, "arrayValue", "array_value")
    if arr is not None:
        values = arr.get("values") if type(arr) is dict else None
        return [_json_value(x, depth + 1) for x in values] if type(values) is list else None
    for camel, snake in _SCALARS:
        raw = _get(v, camel, snake)
        if raw is not None:
            return raw
    return None


def _nanos(v, where: str) -> int:
    """A fixed64 of nanoseconds: 0 when absent or no integer (the mapping
    rejects that span); BadRequest when it is an integer no uint64 holds,
    which no proto3 JSON parser would decode (and which int() of a
    4,300-digit string would otherwise raise on)."""
    if type(v) is str and v.isascii() and v.isdigit():  # isdigit alone takes "¹"
        if len(v) > 20:  # more digits than 2**64 - 1 has
            raise BadRequest(f"{where} has {len(v)} digits: not a uint64")
        v = int(v)
    if type(v) is not int:
        return 0
    if v > _UINT64_MAX:  # a negative one is left for the mapping to reject, span by span
        raise BadRequest(f"{where} is an integer of {v.bit_length()} bits: not a uint64")
    return v


def _hex(v) -> str:
    return v.lower() if type(v) is str else ""
