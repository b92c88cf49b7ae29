"""Ingest's batch join (batch_join.py) for a batch of phase envelopes, on the
C decoder's Structs and into columns.

Why: a batch of 20,000 generations sent as phases in envelopes of 100 spent
0.6-0.75 s in `Pipeline.split`, against 0.05-0.07 s for the same generations
sent whole (docs/performance/worker.md). Nearly all of it was per phase in Python: a
dict of each phase's fields and its checks across fields, the fold over
those dicts, then per generation the joined event as a dict, validated
and derived again, and the rows written as dicts. Here the phases stay the
Structs msgspec decoded and checked, the fold keeps Structs, and each
completed generation becomes one `Generation` Struct for columnar.py's
derivation on whole columns. Dicts are built only for what is forwarded.

This is an accelerator, not a second definition: the join's rules are
join.py's (`join.completes`, `join.joined`), the batch's fold
`batch_join.gather`, and the checks of a phase
`phase_events.check_across` (`fast_decode.accepted`), called on the Structs;
a test holds `Pipeline.split` on this path to the row path on generated
batches. Whatever this module does not take whole (a
message that is not an envelope of phases, a phase the row path would
dead-letter, a joined generation the derivation would reject or check
further) returns None, and the whole batch takes the row path, unchanged.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .batch_join import Forwarded, gather, message_time
from .columnar import Generations, _derive
from .contract import MAX_BATCH, MAX_DURATION_S, MIN_T0
from .fast_decode import _PHASE_KIND, PHASES, Generation, accepted, attr, decoded_events, phase_fields
from . import join
from .join import JOINED_IN_INGEST, phase_partition
from .phase_events import PHASE_KINDS

# A phase's place in a generation's list, in PHASE_KINDS' order (join._pick's:
# the earliest phase wins).
_INDEX = {PHASES[kind]: i for i, kind in enumerate(PHASE_KINDS)}
# The kinds a note names (sorted, as batch_join's), by which of PHASE_KINDS a
# generation had: one list per combination, shared by the notes (read-only:
# they are only serialised, and join.apply copies them).
_NOTED = {have: sorted(k for k, h in zip(PHASE_KINDS, have) if h)
          for have in itertools.product((False, True), repeat=3)}


@dataclass
class Joined:
    gens: Generations  # the completed generations, grouped by the message whose phase completed each
    forward: list[Forwarded]  # as the row path forwards: lone phases, open generations' phases, then notes
    duplicates: int  # copies of a phase of a generation joined here, dropped


def _generation(rid: str, ph: list):
    """join.joined as a Generation Struct. A computed duration out of the
    contract's range is found on the columns (formulas.out_of_range), like
    any refused row, and sends the batch to the row path, which names it."""
    return Generation(schema_version=2, **join.joined(rid, *ph, get=attr))


def fold(events, bucket, max_bytes: int, now: float, partitions: int, max_batch: int = MAX_BATCH,
         oldest: float = MIN_T0) -> Joined | None:
    """A batch of phase messages -> what the row path makes of it (its rows
    as columns), or None for the row path. As there, only phases that came
    in a message of more than one event are joined in the batch; a joined
    generation older than `oldest` (the retention) sends the batch there."""
    latest = now + MAX_DURATION_S
    lone: list[tuple[int, object]] = []  # (message, phase): forwarded as they are
    enveloped: list[tuple[int, object]] = []
    for m, event in enumerate(events):
        raw = event.value
        if raw is None or len(raw) > max_bytes:
            return None
        inner = decoded_events(raw, max_batch)
        if inner is None:
            return None
        for e in inner:
            kind = _INDEX.get(type(e))
            if kind is None or not accepted(e, PHASE_KINDS[kind], latest):
                return None
        (enveloped if len(inner) > 1 else lone).extend((m, e) for e in inner)

    # batch_join.fold's rules, on the Structs.
    seen, completed = gather([e for _, e in enveloped], [(e.request_id, _INDEX[type(e)]) for _, e in enveloped], attr)
    if not completed:
        return None
    gens, counts = [], [0] * len(events)
    for rid, i in completed.items():  # in the order of completion, so grouped by message
        gens.append(_generation(rid, seen[rid]))
        counts[enveloped[i][0]] += 1
    columns, refused = _derive(gens, counts, events, bucket, now, oldest)
    if refused:
        return None

    clocks = [message_time(event.message, now) for event in events]

    def forwarded(m: int, e) -> Forwarded:
        return (phase_partition(e.request_id, partitions), clocks[m], phase_fields(e, _PHASE_KIND[type(e)]))
    forward = [forwarded(m, e) for m, e in lone]
    duplicates = 0
    for m, e in enveloped:
        if e.request_id in completed:
            duplicates += 1
        else:
            forward.append(forwarded(m, e))
    for rid, i in completed.items():
        kinds = _NOTED[tuple(p is not None for p in seen[rid])]
        duplicates -= len(kinds)
        forward.append((phase_partition(rid, partitions), clocks[enveloped[i][0]],
                        {"kind": JOINED_IN_INGEST, "request_id": rid, "kinds": kinds}))
    return Joined(columns, forward, duplicates)
