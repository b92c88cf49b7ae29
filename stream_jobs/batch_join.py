"""Ingest's own join of the generations whose phases all arrive in one batch.

Through the join agent a phase takes three hops in series (ingest, join, ingest again), so a generation is
stored a batch or two after its last phase, and each phase costs the agent a table entry and a changelog record
(docs/performance/worker.md). Most generations are short: ingest joins those whose phases share a batch
(batch_decode.py) by the join's own rules (`gather`, `join.joined`), writes the row with the batch, and forwards
one `join.JOINED_IN_INGEST` note instead of the phases, so later copies of them are duplicates in the agent too
(docs/phases.md). Other phases go to the agent unchanged, including those of a generation the derivation
rejects, so that the joined topic stays the one place such a dead letter is written.

Pure: no Faust, no store. The rows carry their completing phase's source; pipeline.py applies the re-read and
duplicate rules. The rules are `join.apply`'s from no entry (a batch knows nothing of earlier ones), without
apply's copy of the entry at every phase (which keeps the table's old value intact until the changelog has the
new one): applying 60,000 phases that way took a third of a batch's split.
"""

from __future__ import annotations

from . import join

# (join partition, gateway timestamp, validated phase fields): what ingest forwards.
Forwarded = tuple[int, float, dict]


def message_time(msg, now: float) -> float:
    """The gateway's timestamp of a record, its phase's clock in the join; `now` if the record has none."""
    ts = getattr(msg, "timestamp", None)
    return ts if isinstance(ts, (int, float)) and ts > 0 else now


def gather(phases: list, keys: list[tuple[str, int]], get=dict.get) -> tuple[dict[str, list], dict[str, int]]:
    """The join's rules over a batch's phases in offset order (`keys`: each one's request_id and PHASE_KINDS index):
    per request_id, the first copy of each kind as [start, first_token, end], and the index in `phases` after
    which `join.completes` holds. `get` reads a field (batch_decode.py passes Structs and Phases)."""
    seen: dict[str, list] = {}
    completed: dict[str, int] = {}
    for i, (phase, (rid, kind)) in enumerate(zip(phases, keys)):
        if rid in completed:
            continue
        ph = seen.get(rid)
        if ph is None:
            ph = seen[rid] = [None, None, None]
        if ph[kind] is None:
            ph[kind] = phase
            if join.completes(*ph, get=get):
                completed[rid] = i
    return seen, completed
