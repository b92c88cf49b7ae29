"""Messages of the OTLP topic -> the same results as the raw topic's.

A site that already runs an OpenTelemetry Collector adds its `kafka`
exporter (one ExportTraceServiceRequest per message, `otlp_proto` or
`otlp_json`) and the worker reads that topic beside the raw one
(PHASEMETER_OTLP_TOPIC). Each LLM span is mapped onto a generation event by
the same mapping the `phasemeter otlp` receiver uses, then validated and
derived like any other event, so the exactly-once rules (per offset and
request_id), the dead-letter topic and the rollup are the same. Spans that
are not LLM requests are counted, not dead-lettered.

The two encodings are told apart by the first byte: a JSON object starts
with `{` (after whitespace); an ExportTraceServiceRequest's first field
(resource_spans, tag 1, length-delimited) starts with 0x0A.
"""

from __future__ import annotations

from collections import Counter

from phasemeter.integrations.otlp_map import JSON, PROTOBUF, BadRequest, map_request

from . import reasons as R
from .buckets import Bucketer
from .contract import MIN_T0
from .derive import Phase, Rejection, process_event


def process_otlp(raw: bytes | None, bucket: Bucketer, max_bytes: int, now: float,
                 default_model: str | None = None,
                 oldest: float = MIN_T0) -> tuple[list[dict | Phase | Rejection], int, Counter]:
    """One OTLP topic message -> (results, spans ignored as not LLM requests,
    counts for /health: otlp_spans_ignored_<reason>, otlp_replicas_dropped).
    `default_model` names the model of spans that carry none; `oldest` is
    the earliest t0 the store keeps (contract.oldest_kept)."""
    if raw is None or not raw:
        return [Rejection(R.MALFORMED_OTLP, "empty message")], 0, Counter()
    if len(raw) > max_bytes:
        return [Rejection(R.OVERSIZE, f"{len(raw)} bytes > {max_bytes}")], 0, Counter()
    encoding = JSON if raw.lstrip()[:1] == b"{" else PROTOBUF
    try:
        mapped = map_request(raw, encoding, default_model=default_model or None, now=now)
    except (BadRequest, RecursionError, ValueError) as exc:  # too deep, or a value the mapper cannot read
        return [Rejection(R.MALFORMED_OTLP, f"{encoding}: {str(exc)[:300]}")], 0, Counter()
    out: list[dict | Phase | Rejection] = [
        Rejection(reason, f"span {span_id}: {detail}"[:400]) for span_id, reason, detail in mapped.rejected]
    out += [process_event(event, bucket, now, oldest=oldest) for event in mapped.events]
    counts = Counter({f"otlp_spans_ignored_{k}": v for k, v in mapped.ignored_by.items()})
    if mapped.replicas_dropped:
        counts["otlp_replicas_dropped"] = mapped.replicas_dropped
    return out, mapped.ignored, counts
