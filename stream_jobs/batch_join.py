"""Ingest's own join of the generations whose phases all arrive in one batch.

Why: through the join agent a phase makes three hops in series (ingest, the
phases topic and the join, the joined topic and ingest again), so a
generation is stored a batch or two after its last phase was read, and each
phase costs the join agent a table entry and a changelog record
(BENCHMARKS.md §20). Most generations are short: their start, first token and
end are read in one batch. Ingest joins those on the spot, with the join's
own pure `join.apply`, writes the row with the rest of the batch, and
forwards the join agent one note per generation instead of its phases
(`join.JOINED_IN_INGEST`). The note leaves the join a done marker, so that a
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


@dataclass
class Folded:
    rows: list[tuple[dict, int]] = field(default_factory=list)  # (row, index of the completing phase)
    forward: list[Forwarded] = field(default_factory=list)  # open generations' phases, then notes
    duplicates: int = 0  # copies of a phase of a generation joined here, dropped


def fold(phases: list[Forwarded], derive: Callable[[dict], dict | None]) -> Folded:
    """A batch's phases, in offset order -> the rows of the generations they
    complete, and what still goes to the join agent. `derive` turns a joined
    event into its row, or None when the derivation rejects it."""
    # Only a request with a start and an end here can complete here: the rest
    # (most phases, when a batch covers less than a generation's duration)
    # go to the agent without being applied twice.
    kinds: dict[str, set] = {}
    for _, _, fields in phases:
        kinds.setdefault(fields["request_id"], set()).add(fields["kind"])
    candidates = {rid for rid, ks in kinds.items() if "start" in ks and "end" in ks}
    entries: dict[str, dict | None] = {}
    completed: dict[str, tuple[int, dict]] = {}  # request_id -> (completing index, joined event)
    for i, (partition, ts, fields) in enumerate(phases):
        rid = fields["request_id"]
        if rid not in candidates:
            continue
        # The same function the join agent applies, from no entry: a batch
        # knows nothing of earlier ones, which the agent's table remembers.
        new, outputs, what = join.apply(entries.get(rid), rid, fields, partition, ts)
        entries[rid] = new
        if what == "joined":
            completed[rid] = (i, outputs[0][1])
    out = Folded()
    kept: set[str] = set()
    for rid, (i, event) in completed.items():
        row = derive(event)
        if row is not None:
            out.rows.append((row, i))
            kept.add(rid)
    for partition, ts, fields in phases:
        if fields["request_id"] in kept:
            out.duplicates += 1
        else:
            out.forward.append((partition, ts, fields))
    for row, i in out.rows:
        partition, ts, _ = phases[i]
        rid = row["request_id"]
        out.forward.append((partition, ts, {"kind": join.JOINED_IN_INGEST, "request_id": rid,
                                            "kinds": entries[rid]["kinds"]}))
    out.duplicates -= sum(len(entries[row["request_id"]]["kinds"]) for row, _ in out.rows)
    return out
