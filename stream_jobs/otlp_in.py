"""Messages of the OTLP topic -> the same results as the raw topic's (docs/ingest/otlp.md).

Each message is an ExportTraceServiceRequest from a Collector's `kafka` exporter. LLM spans are mapped as the
`phasemeter otlp` receiver maps them, then validated, derived and stored like any event; other spans are counted.
The first byte tells the encoding: `{` (after whitespace) for JSON, 0x0A (resource_spans, tag 1) for protobuf.
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
    """One OTLP topic message -> (results, spans ignored as not LLM requests, counts for /health:
    otlp_spans_ignored_<reason>, otlp_replicas_dropped). `default_model` names the model of spans without one;
    `oldest` is the earliest t0 the store keeps (contract.oldest_kept)."""
    if not raw:
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
