"""The OTLP receiver's default limits, in a module of their own: `phasemeter`'s
parser shows them in `otlp --help`, and every CLI command builds that parser,
so reading them must not load the span mapping (otlp_map and the stream
contract it imports: ~7-9 ms of every command's start, measured with
`python -c`, 20 alternated runs)."""

from __future__ import annotations

# Spans one request may carry. Counted before any Span is built (and, for
# protobuf, before the message is parsed), so a body of millions of empty
# spans costs a scan, not a Python object per span. OpenTelemetry SDKs
# export batches of 512 by default (OTEL_BSP_MAX_EXPORT_BATCH_SIZE).
DEFAULT_MAX_SPANS = 8192
# The largest OTLP request body taken (the receiver's --max-body-bytes default);
# not in the receiver, so `phasemeter --help` can show it without loading
# http.server.
DEFAULT_MAX_BODY = 4 * 1024 * 1024
