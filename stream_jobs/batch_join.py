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
from .phase_events import PHASE_KINDS

# (join partition, gateway timestamp, validated phase fields): what ingest forwards.
Forwarded = tuple[int, float, dict]
_KIND = {kind: i for i, kind in enumerate(PHASE_KINDS)}


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
    kind wins, the generation completes when `join.completes` says so
    (`gather`), and it is built by `join.joined_event`. apply itself copies
    its entry at every phase so that the table's old value stays intact
    until the changelog has the new one; a batch needs no such copy, and
    applying 60,000 phases that way took a third of a batch's split
    (docs/performance/worker.md). A unit test holds the rows of both to be equal.
    """
    seen, completed = gather([fields for _, _, fields in phases],
                             [(fields["request_id"], _KIND[fields["kind"]]) for _, _, fields in phases])
    out = Folded()
    kept: dict[str, list[str]] = {}  # request_id -> the kinds its row was joined of
    for rid, i in completed.items():
        ph = {kind: p for kind, p in zip(PHASE_KINDS, seen[rid]) if p is not None}
        row = derive(join.joined_event(rid, ph))
        if row is not None:
            out.rows.append((row, i))
            kept[rid] = sorted(ph)
    for phase in phases:
        if phase[2]["request_id"] in kept:
            out.duplicates += 1
        else:
            out.forward.append(phase)
    out.duplicates -= sum(map(len, kept.values()))
    for row, i in out.rows:
        partition, ts, _ = phases[i]
        rid = row["request_id"]
        out.forward.append((partition, ts, {"kind": join.JOINED_IN_INGEST, "request_id": rid, "kinds": kept[rid]}))
    return out


def gather(phases: list, keys: list[tuple[str, int]], get=dict.get) -> tuple[dict[str, list], dict[str, int]]:
    """The join's rules over a batch's phases, in offset order (`keys`: each
    one's request_id and place in PHASE_KINDS): per request_id the first
    copy of each kind, [start, first_token, end], and the place in `phases`
    of the phase after which `join.completes` holds. `get` reads a phase's
    field: of a dict here, of the C decoder's Struct in columnar_join.py."""
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
