"""Ingest's own join of the generations whose phases all arrive in one batch.

Why: through the join agent a phase makes three hops in series (ingest, the
phases topic and the join, the joined topic and ingest again), so a
generation is stored a batch or two after its last phase was read, and each
phase costs the join agent a table entry and a changelog record
(docs/performance/worker.md). Most generations are short: their start, first token and
end are read in one batch. Ingest joins those on the spot
(stream_jobs/batch_decode.py), by the join's own rules (`gather` below,
`join.joined`), writes the row with the rest of the batch, and forwards the join agent one note per generation
instead of its phases (`join.JOINED_IN_INGEST`). The note leaves the join a done marker, so that a
copy of any of the phases arriving later is a duplicate, exactly as after a
join in the agent (docs/phases.md).

Everything else is forwarded unchanged: the phases of a generation the batch
does not complete, and those of one whose joined event the derivation
rejects (the join agent then dead-letters it from the joined topic with its
reason code, the one place such a dead letter is written).

Pure: no Faust, no store. The rows carry the source of the phase that
completed them; pipeline.py applies the re-read and duplicate rules. The
rules are `join.apply`'s from no entry (a batch knows nothing of earlier
ones, which the agent's table remembers). apply copies its entry at every
phase so that the table's old value stays intact until the changelog has
the new one; a batch needs no such copy, and applying 60,000 phases that
way took a third of a batch's split (docs/performance/worker.md).
"""

from __future__ import annotations

from . import join

# (join partition, gateway timestamp, validated phase fields): what ingest forwards.
Forwarded = tuple[int, float, dict]


def message_time(msg, now: float) -> float:
    """The gateway's timestamp of a record, which a phase carries to the
    join as its clock; `now` where the record has none."""
    ts = getattr(msg, "timestamp", None)
    return ts if isinstance(ts, (int, float)) and ts > 0 else now


def gather(phases: list, keys: list[tuple[str, int]], get=dict.get) -> tuple[dict[str, list], dict[str, int]]:
    """The join's rules over a batch's phases, in offset order (`keys`: each
    one's request_id and place in PHASE_KINDS): per request_id the first
    copy of each kind, [start, first_token, end], and the place in `phases`
    of the phase after which `join.completes` holds. `get` reads a phase's
    field (stream_jobs/batch_decode.py reads Structs and Phases)."""
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
