"""The span and resource attributes the OTLP mapping reads, in precedence
order: the one definition of the mapping. otlp_map picks values with these
tuples, and docs/ingest/otlp.md's table is `table()`'s output, held equal by
tests/unit/integrations/test_otlp_doc_table.py. Pure.

Sources of the names: vLLM's `llm_request` span (vllm/tracing SpanAttributes),
whose latency and usage names SGLang also sets on its request root span;
TensorRT-LLM's KV-transfer latency; the OpenTelemetry GenAI semantic
conventions (the `gen_ai.inference.client` span); and the TTFT names of
OpenLIT, OpenLLMetry, pydantic-ai and older Sentry SDKs. Where two name one
field, the first present wins, so a span carrying both gives one answer.
"""

from __future__ import annotations

from typing import NamedTuple

INPUT = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")
OUTPUT = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")
CACHED = ("gen_ai.usage.cache_read.input_tokens", "gen_ai.usage.cache_read_input_tokens",
          "gen_ai.usage.cached_tokens")
MODEL = ("gen_ai.request.model", "gen_ai.response.model")
REQUEST_ID = ("gen_ai.request.id", "gen_ai.response.id", "rid")  # rid: SGLang's root span
TTFT = ("gen_ai.latency.time_to_first_token", "gen_ai.response.time_to_first_chunk",
        "gen_ai.client.operation.time_to_first_chunk", "gen_ai.server.time_to_first_token",
        "gen_ai.server.ttft", "gen_ai.response.time_to_first_token")
E2E = ("gen_ai.latency.e2e",)
QUEUE = ("gen_ai.latency.time_in_queue",)
# TensorRT-LLM's KV-cache transfer time between its context (prefill) and
# generation (decode) instances, in seconds (its PR #5897).
KV_TRANSFER = ("gen_ai.latency.kv_cache_transfer_time",)
FINISH = ("gen_ai.response.finish_reasons",)
ERROR_TYPE = "error.type"
STREAM = "gen_ai.request.stream"
REQUEST_N = "gen_ai.request.n"            # vLLM: the request's `n`; its children share one request id
OPERATION = ("gen_ai.operation.name", "llm.request.type")  # llm.request.type: OpenLLMetry
# Resource attributes naming the replica. `phasemeter.replica` is the one a
# site sets on purpose (OTEL_RESOURCE_ATTRIBUTES) and is kept as given; the
# others are dropped when UUID-shaped: the Python SDK puts a random
# service.instance.id on every process, which would make each restart a new label.
REPLICA_SET = "phasemeter.replica"
REPLICA = (REPLICA_SET, "host.name", "service.instance.id")
ROLE = "phasemeter.role"                  # resource: prefill | decode, in P/D serving (otlp_pd)
BOOTSTRAP_ROOM = "bootstrap_room"         # SGLang P/D: shared by a request's two halves
# Span attributes outside gen_ai.* that are read.
OTHER_SPAN_KEYS = frozenset({ERROR_TYPE, "rid", OPERATION[1], BOOTSTRAP_ROOM})


class Source(NamedTuple):
    field: str                 # the event field
    names: tuple[str, ...]     # attributes, first present wins
    then: str                  # what is used when none is present
    otherwise: str             # when that is absent too


SOURCES = (
    Source("t0", (), "span start (`startTimeUnixNano` / 1e9)", "rejected"),
    Source("e2e_s", E2E, "span end - span start", "rejected"),
    Source("ttft_s", TTFT, "", f"null; rejected when output tokens > 0, unless `{STREAM}` is false "
                               "(0.0 means no first token)"),
    Source("queue_s", QUEUE, "", "null"),
    Source("input_tokens", INPUT, "", "rejected"),
    Source("output_tokens", OUTPUT, "", "rejected (an engine span without it is an embedding: ignored)"),
    Source("cached_input_tokens", CACHED, "", "null"),
    Source("model", MODEL, "`--model` / `PHASEMETER_OTLP_MODEL`", "rejected"),
    Source("request_id", REQUEST_ID, f"`-<span id>` appended when `{REQUEST_N}` > 1 (vLLM's n > 1 children)",
           "trace id + span id (hex)"),
    Source("status", (ERROR_TYPE,), "`error` when that is set or the span status is ERROR; `cancelled` "
                                    "when the finish reason is `abort` or a TTFT is 0.0", "`ok`"),
    Source("finish_reason", FINISH, "", "null (first of the array, or of its JSON string)"),
    Source("replica", tuple(f"resource `{n}`" for n in REPLICA), "", "null; a UUID-shaped value "
                                                                    "(except `phasemeter.replica`) is dropped"),
    Source("gateway", (), "`phasemeter otlp --gateway`", "null"),
    Source("kv_transfer_s", KV_TRANSFER, "", "null; rejected when longer than the TTFT (unless a P/D half: "
                                             "checked against the joined TTFT)"),
    Source("prefill_replica", (), "a P/D pair: the prefill half's `replica`", "null"),
    Source("decode_replica", (), "a P/D pair: the decode half's `replica`", "null"),
    Source("streamed", (STREAM,), "`false` only: a call not streamed, stored with null `ttft_s` and phases "
                                  "(a v2 event)", "absent"),
)


def table() -> str:
    """The Markdown table of SOURCES, as docs/ingest/otlp.md carries it."""
    rows = ["| event field | read from, first present wins | then | else |", "|---|---|---|---|"]
    for s in SOURCES:
        names = ", ".join(n if n.startswith("resource") else f"`{n}`" for n in s.names) or "-"
        rows.append(f"| `{s.field}` | {names} | {s.then or '-'} | {s.otherwise} |")
    return "\n".join(rows)
