"""Ingest's own join of the generations whose phases all arrive in one batch.

Why: through the join agent a phase makes three hops in series (ingest, the
phases topic and the join, the joined topic and ingest again), so a
generation is stored a batch or two after its last phase was read, and each
phase costs the join agent a table entry and a changelog record
(docs/performance/worker.md). Most generations are short: their start, first token and
end are read in one batch. Ingest joins those on the spot, by the join's
own rules (`join.is_complete`, `join.joined_event`), writes the row with the
rest of the batch, and forwards the join agent one note per generation
instead of its phases (`join.JOINED_IN_INGEST`). The note leaves the join a done marker, so that a
copy of any of the phases arriving later is a duplicate, exactly as after a
join in the agent (docs/phases.md).

Everything else is forwarded unchanged: the phases of a generation the batch
does not complete, and those of one whose joined event the derivation
rejects (the join agent then dead-letters it from the joined topic with its
reason code, the one place such a dead letter is written).

Pure: no Faust, no store. The rows carry the source of the phase that
completed them; pipeline.py applies the re-read and duplicate rules.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from . import join

# (join partition, gateway timestamp, validated phase fields): what ingest forwards.
Forwarded = tuple[int, float, dict]


def message_time(msg, now: float) -> float:
    """The gateway's timestamp of a record, which a phase carries to the
    join as its clock; `now` where the record has none."""
    ts = getattr(msg, "timestamp", None)
    return ts if isinstance(ts, (int, float)) and ts > 0 else now


@dataclass
class Folded:
    rows: list[tuple[dict, int]] = field(default_factory=list)  # (row, index of the completing phase)
    forward: list[Forwarded] = field(default_factory=list)  # open generations' phases, then notes
    duplicates: int = 0  # copies of a phase of a generation joined here, dropped


def fold(phases: list[Forwarded], derive: Callable[[dict], dict | None]) -> Folded:
    """A batch's phases, in offset order -> the rows of the generations they
    complete, and what still goes to the join agent. `derive` turns a joined
    event into its row, or None when the derivation rejects it.

    The rules are `join.apply`'s from no entry (a batch knows nothing of
    earlier ones, which the agent's table remembers): the first copy of a
    kind wins, the generation completes when `join.is_complete` says so, and
    it is built by `join.joined_event`. apply itself copies its entry at
    every phase so that the table's old value stays intact until the
    changelog has the new one; a batch needs no such copy, and applying
    60,000 phases that way took a third of a batch's split (§20). A unit
    test holds the rows of both to be equal.
    """
    seen: dict[str, dict] = {}  # request_id -> {kind: phase fields}, first copy wins
    completed: dict[str, int] = {}  # request_id -> index of the phase that completed it
    for i, (_, _, fields) in enumerate(phases):
        rid = fields["request_id"]
        if rid in completed:
            continue
        ph = seen.get(rid)
        if ph is None:
            ph = seen[rid] = {}
        if fields["kind"] not in ph:
            ph[fields["kind"]] = fields
            if join.is_complete(ph):
                completed[rid] = i
    out = Folded()
    kept: dict[str, int] = {}  # request_id -> kinds used
    for rid, i in completed.items():
        ph = seen[rid]
        row = derive(join.joined_event(rid, ph))
        if row is not None:
            out.rows.append((row, i))
            kept[rid] = len(ph)
    for phase in phases:
        if phase[2]["request_id"] in kept:
            out.duplicates += 1
        else:
            out.forward.append(phase)
    out.duplicates -= sum(kept.values())
    for row, i in out.rows:
        partition, ts, _ = phases[i]
        rid = row["request_id"]
        out.forward.append((partition, ts, {"kind": join.JOINED_IN_INGEST, "request_id": rid,
                                            "kinds": sorted(seen[rid])}))
    return out
