"""Prefill/decode disaggregated serving: the two halves of one request ->
the phase events of one generation (docs/phases.md). Pure.

In P/D serving a request runs on a prefill instance, its KV cache moves,
and a decode instance streams the answer; each instance exports its own
span. Which half a span is: SGLang names its root span "prefill Req ..." or
"decode Req ..." and gives both `bootstrap_room`; vLLM's `llm_request` does
not say, so each instance names its role in the resource attribute
`phasemeter.role` (prefill | decode), and both halves share
`gen_ai.request.id` (the P/D proxy passes one request id to both).

The halves become phase events keyed by that shared id, and the worker's
phase join (stream_jobs/join.py) completes the generation whichever arrives
first, however late; a half that never arrives is reported by the join's
rules: a prefill without its decode becomes an `abandoned` row
(`expired_in_prefill`), a decode without its prefill an `orphan_phase`
dead letter. The rule for the times:
  * t0, the input and cached tokens, the queue and the replica are the
    prefill instance's: the request arrives there first;
  * each half's replica is also its pool label: `prefill_replica` from the
    prefill half, `decode_replica` from the decode half; a KV transfer time
    (`kv_transfer_s`) rides on whichever half reports it, and the joined
    generation is checked to have it inside its TTFT;
  * the first token the client sees and the end are the decode instance's
    (the prefill instance's one token is not streamed to the client):
    t_first = decode span start + its time to first token, t_end = decode
    span start + its e2e; status and finish reason are the decode's.
"""

from __future__ import annotations

import re

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import LABEL_FIELDS, Rejection

from .otlp_decode import Span
from .otlp_names import BOOTSTRAP_ROOM, ROLE

_SGLANG_ROLE = re.compile(r"(prefill|decode) Req \S+")
ROLES = ("prefill", "decode")


def role_of(span: Span) -> str | None:
    m = _SGLANG_ROLE.fullmatch(span.name)
    if m is not None:
        return m.group(1)
    role = span.resource.get(ROLE)
    return role if role in ROLES else None


def phases(span: Span, role: str, event: dict) -> dict | Rejection:
    """The phase event of one half, from the generation event the span
    would have been on its own."""
    rid = event["request_id"]
    if _SGLANG_ROLE.fullmatch(span.name):
        room = span.attrs.get(BOOTSTRAP_ROOM)
        if type(room) not in (int, str) or type(room) is bool or room == "":
            return Rejection(R.MISSING_FIELD, f"a P/D {role} span needs {BOOTSTRAP_ROOM} to meet its other half")
        rid = f"{BOOTSTRAP_ROOM}-{room}"
        if len(rid) > LABEL_FIELDS["request_id"]:
            return Rejection(R.BAD_VALUE, f"{BOOTSTRAP_ROOM} is over {LABEL_FIELDS['request_id']} characters")
    if role == "prefill":
        out = {"schema_version": 2, "kind": "start", "request_id": rid, "model": event["model"],
               "t0": event["t0"], "input_tokens": event["input_tokens"],
               "cached_input_tokens": event["cached_input_tokens"], "queue_s": event["queue_s"],
               "replica": event["replica"], "prefill_replica": event["replica"]}
    else:
        start = event["t0"]
        out = {"schema_version": 2, "kind": "end", "request_id": rid, "output_tokens": event["output_tokens"],
               "t_end": start + event["e2e_s"],
               "t_first": None if event["ttft_s"] is None else start + event["ttft_s"],
               "status": event["status"], "finish_reason": event["finish_reason"],
               "decode_replica": event["replica"]}
    out["kv_transfer_s"] = event.get("kv_transfer_s")
    return {k: v for k, v in out.items() if v is not None}
