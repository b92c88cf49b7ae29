"""A batch of Kafka records, from any topic -> its rows as columns, its refused events and the phases to
forward. The worker's one batch path, pure: whatever reads the store or the worker's positions is in
pipeline.py, so that a batch can be decoded ahead of its turn (`Ahead`).

An event the C decoder takes stays a Struct (fast_decode.py); others get the full path (derive.py, otlp_in.py),
which alone reads the rare forms (chunk and stall data, P/D phases, OTLP spans). The Structs become columns in
one pass, checked on whole columns (columnar.py), so a bad event is refused beside its neighbours. Phases in
envelopes are joined here by the join's rules (batch_join.py): a generation they complete is a row of this
batch; the other phases go to the join agent.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from itertools import chain, groupby
from types import SimpleNamespace

import numpy as np

from . import dead_letter, dedup, join
from . import reasons as R
from .batch_join import Forwarded, gather, message_time
from .columnar import Generations, _derive, columns_of
from .contract import MAX_BATCH, MIN_T0, Rejection
from .derive import process_event
from .fast_decode import _PHASE_KIND, Generation, attr, decoded_events, generations_only, message_events
from .fast_decode import phase_fields
from .join import JOINED_IN_INGEST, phase_partition
from .otlp_in import process_otlp
from .phase_events import PHASE_KINDS, Phase

# Checks whose answer moves with the clock: a batch decoded ahead with an event they refused is decoded again.
_CLOCKED = (R.ABSURD, R.OUTSIDE_RETENTION)
_KIND = {kind: i for i, kind in enumerate(PHASE_KINDS)}
_JOINED = 1 << 30  # the place of a row joined in this batch: after its message's own events


@dataclass
class Decoded:
    gens: Generations | None  # the rows, in the order of their events in the batch
    message: np.ndarray | None  # each row's message (index in the batch)
    joined: np.ndarray | None  # each row's: joined in this batch (a row of the joined topic's scope)
    refused: list[tuple[int, Rejection]] = field(default_factory=list)  # (message, rejection), in order
    payloads: list[str] = field(default_factory=list)  # each refused event's dead-letter payload
    store_refused: list[dict] = field(default_factory=list)  # dead letters of rows Arrow cannot take
    forward: list[Forwarded] = field(default_factory=list)  # lone phases, open generations' phases, then notes
    joined_in_batch: int = 0
    duplicates: int = 0  # copies of a phase of a generation joined here, dropped
    notes: Counter = field(default_factory=Counter)  # the OTLP topic's counts for /health
    otlp_ignored: int = 0
    clocked: bool = False  # a decision here moved with the clock
    scopes: list[dedup.Scope] = field(default_factory=list)  # the rows by the duplicate rule's scope
    repeats: dedup.Answer = field(default_factory=dedup.Answer)  # the rule, the store holding none
    deduped: Generations | None = None  # gens without `repeats.dropped`


def _get(phase, name: str):
    """A field of a phase, a Struct of the C decoder or the full path's Phase."""
    return phase.fields.get(name) if type(phase) is Phase else getattr(phase, name, None)


def _fields(phase) -> dict:
    """A phase's fields as validate_phase gives them: what the join agent gets."""
    return phase.fields if type(phase) is Phase else phase_fields(phase, _PHASE_KIND[type(phase)])


def decode(events, bucket, max_bytes: int, now: float, partitions: int = 1, max_batch: int = MAX_BATCH,
           oldest: float = MIN_T0, internal_topic: str | None = None, otlp_topic: str | None = None,
           otlp_model: str | None = None, payload_cap: int = 0, broken: dict[int, Rejection] | None = None) -> Decoded:
    """The batch decoded. `internal_topic`: the join's, whose records name their own reasons; `otlp_topic`'s
    records are OTLP exports. `broken`: messages refused unread (their decode raised)."""
    structs: list[list] = [[] for _ in events]  # per message: its generations' Structs
    # Per message, each Struct's place (its event's index, or _JOINED), or None when they are its events in order.
    places: list[list | None] = [None] * len(events)
    envelopes = [False] * len(events)
    rows: list[tuple[dict, int, int]] = []  # the full path's rows: (row, its message, its place)
    refused: list[tuple[tuple[int, int], Rejection]] = []
    lone, enveloped = [], []  # (message, phase)
    out = Decoded(None, None, None)
    for m, event in enumerate(events):
        msg = event.message
        if broken and m in broken:
            refused.append(((m, -1), broken[m]))
            continue
        if msg.topic == otlp_topic:
            items, ignored, notes = process_otlp(event.value, bucket, max_bytes, now, otlp_model, oldest)
            out.otlp_ignored += ignored
            out.notes.update(notes)
        else:
            raw = event.value
            inner = decoded_events(raw, max_batch) if raw is not None and len(raw) <= max_bytes else None
            if inner is not None and generations_only(inner):  # the common message: no Python loop per event
                structs[m], envelopes[m] = (inner, True) if type(inner) is list else (list(inner), False)
                continue
            items, envelopes[m] = message_events(raw, bucket, max_bytes, now, max_batch, msg.topic == internal_topic,
                                                 oldest, inner)
        places[m] = []
        phases = lone if len(items) == 1 else enveloped
        for i, item in enumerate(items):
            kind = type(item)
            if kind is Generation:
                structs[m].append(item)
                places[m].append(i)
            elif kind is Rejection:
                refused.append(((m, i), item))
            elif kind is dict:
                rows.append((_sourced(item, msg), m, i))
            else:
                phases.append((m, item))
    kept = _join(out, enveloped, structs, places, rows, events, bucket, now, oldest)

    flat = list(chain.from_iterable(structs))
    counts = list(map(len, structs))
    out.gens, bad = _derive(flat, counts, events, bucket, now, oldest)
    message = np.repeat(np.arange(len(events)), counts)
    place = np.concatenate([np.arange(n) if ps is None else np.array(ps, dtype=np.int64)
                            for n, ps in zip(counts, places)]) if kept or rows or bad else None
    good = np.ones(len(flat), dtype=bool)
    taken = {}  # (message, place) -> the Generation refused there: its payload is found by its request_id
    for i, r in bad:
        good[i] = False
        m, p = int(message[i]), int(place[i])
        out.clocked |= r.reason in _CLOCKED
        if p == _JOINED:
            kept.pop(flat[i].request_id)  # its phases go to the join agent, which names it
        else:
            refused.append(((m, p), r.in_envelope(p) if envelopes[m] else r))
            taken[m, p] = flat[i]
    _add_rows(out, rows, message[good], place[good] if place is not None else None, now)
    out.forward = _forwarded(lone, enveloped, kept, events, now, partitions, out)
    out.scopes = dedup.scopes(out.gens, out.message, out.joined, [e.message.topic for e in events], internal_topic)
    out.repeats = dedup.answer(out.scopes, [set()] * len(out.scopes), internal_topic)
    out.deduped = out.gens.without(out.repeats.dropped) if out.repeats.dropped else out.gens
    out.clocked |= any(r.reason in _CLOCKED for _, r in refused)

    refused.sort(key=lambda x: x[0])
    for m, group in groupby(refused, key=lambda x: x[0][0]):
        group = list(group)
        out.payloads += dead_letter.payloads(events[m].value, payload_cap, [r.event for _, r in group],
                                             parse=events[m].message.topic != otlp_topic,
                                             taken=[taken.get(k) for k, _ in group] if envelopes[m] else None)
    out.refused = [(m, r) for (m, _), r in refused]
    return out


def _add_rows(out: Decoded, rows: list, message: np.ndarray, place: np.ndarray | None, now: float) -> None:
    """Add the full path's rows (columnar.columns_of refuses one Arrow cannot take, as the store would) to the
    Structs', all in their events' batch order, where the duplicate rule reads "first"."""
    extra, letters = columns_of([r for r, _, _ in rows], now)
    gone = {k for k, _ in letters}
    kept = [(m, p) for k, (_, m, p) in enumerate(rows) if k not in gone]
    out.store_refused = [letter for _, letter in letters]
    if place is None:  # Structs alone, each its message's event in order
        out.message, out.joined = message, np.zeros(len(message), dtype=bool)
        return
    if kept:
        out.gens = out.gens + extra
        message = np.concatenate([message, np.array([m for m, _ in kept], dtype=np.int64)])
        place = np.concatenate([place, np.array([p for _, p in kept], dtype=np.int64)])
        order = np.lexsort((place, message))
        if (order != np.arange(len(order))).any():
            out.gens, message, place = out.gens.take(order), message[order], place[order]
    out.message, out.joined = message, place == _JOINED


def _sourced(row: dict, msg) -> dict:
    row.update(src_topic=msg.topic, src_partition=msg.partition, src_offset=msg.offset)
    return row


def _join(out: Decoded, enveloped: list, structs: list, places: list, rows: list, events, bucket, now: float,
          oldest: float) -> dict[str, tuple[int, list]]:
    """Generations the envelopes' phases complete (batch_join.gather), each a row of the message whose phase
    completed it: a Struct if all its phases are Structs, else the full path's row. -> request_id -> (message,
    phases), in completion order; one the full path refuses is left out, its phases forwarded."""
    phases = [p for _, p in enveloped]
    seen, completed = gather(phases, [(p.request_id, _KIND[p.fields["kind"] if type(p) is Phase
                                                          else _PHASE_KIND[type(p)]]) for p in phases], _get)
    kept = {}
    for rid, i in completed.items():
        m, ph = enveloped[i][0], seen[rid]
        if all(p is None or type(p) is not Phase for p in ph):
            if places[m] is None:
                places[m] = list(range(len(structs[m])))
            structs[m].append(Generation(schema_version=2, **join.joined(rid, *ph, get=attr)))
            places[m].append(_JOINED)
        else:
            row = process_event(join.joined_event(rid, {k: _fields(p) for k, p in zip(PHASE_KINDS, ph) if p}),
                                bucket, now, internal=True, oldest=oldest)
            if type(row) is not dict:
                out.clocked |= row.reason in _CLOCKED
                continue
            rows.append((_sourced(row, events[m].message), m, _JOINED))
        kept[rid] = (m, ph)
    return kept


def _forwarded(lone: list, enveloped: list, kept: dict, events, now: float, partitions: int,
               out: Decoded) -> list[Forwarded]:
    """What goes to the join agent (batch_join): lone phases, phases of generations not joined here, then a
    note per joined one."""
    def forwarded(m: int, phase) -> Forwarded:
        return phase_partition(phase.request_id, partitions), message_time(events[m].message, now), _fields(phase)
    forward = [forwarded(m, p) for m, p in lone]
    for m, p in enveloped:
        if p.request_id in kept:
            out.duplicates += 1
        else:
            forward.append(forwarded(m, p))
    for rid, (m, ph) in kept.items():
        kinds = [k for k, p in zip(PHASE_KINDS, ph) if p is not None]
        out.duplicates -= len(kinds)
        forward.append((phase_partition(rid, partitions), message_time(events[m].message, now),
                        {"kind": JOINED_IN_INGEST, "request_id": rid, "kinds": sorted(kinds)}))
    out.joined_in_batch = len(kept)
    return forward


_NOWHERE = SimpleNamespace(message=SimpleNamespace(topic="", partition=0, offset=0))  # `answer`'s record


def answer(raw: bytes | None, bucket, max_bytes: int, now: float, max_batch: int = MAX_BATCH,
           internal: bool = False, oldest: float = MIN_T0) -> list:
    """One message's results by the batch path, in event order: a row (without its source), a Phase or a Rejection
    each. Tests hold it equal to derive.process_message, the full path's (`phasemeter emit`, the OTLP receiver)."""
    items, envelope = message_events(raw, bucket, max_bytes, now, max_batch, internal, oldest)
    out = []
    for i, item in enumerate(items):
        if type(item) is Generation:
            gens, bad = _derive([item], [1], [_NOWHERE], bucket, now, oldest)
            if bad:
                item = bad[0][1].in_envelope(i) if envelope else bad[0][1]
            else:
                item = {k: v for k, v in gens[0].items() if k not in ("src_topic", "src_partition", "src_offset")}
        elif type(item) in _PHASE_KIND:
            item = Phase(item.request_id, _fields(item))
        out.append(item)
    return out


class Ahead:
    """`decode` of the next batch while the store writes this one (the insert runs without the GIL): ~10-20 %
    off a batch of envelopes (docs/performance/worker.md). Decisions that read the store or the worker's
    positions wait for the batch's turn. `decoded_for` gives what `decode` would give then, or None to decode
    again: admission may have changed the batch, and checks bound to the clock (a t0 too far ahead, the
    retention bound) may answer otherwise."""

    def __init__(self, events, *args, otlp_topic: str | None = None, **kwargs):
        self.events = list(events)
        # An OTLP record's mapping reads the clock throughout: such a batch is decoded in its turn only.
        early = not (otlp_topic and any(e.message.topic == otlp_topic for e in self.events))
        self.decoded = decode(self.events, *args, otlp_topic=otlp_topic, **kwargs) if early else None

    def decoded_for(self, events, oldest: float = MIN_T0) -> Decoded | None:
        d = self.decoded
        if (d is None or d.clocked or len(events) != len(self.events)
                or (len(d.gens) and d.gens.ts.min() < oldest)):
            return None
        return d if all(a is b for a, b in zip(events, self.events)) else None
