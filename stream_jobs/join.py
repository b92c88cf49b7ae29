"""The phase join as pure functions: table entry + phase -> new entry + outputs.

join_agent.py keeps one entry per request_id and calls these. Entries are plain dicts, so this is tested without
Kafka and they survive the table's JSON changelog unchanged: open, {"p", "seen", "last", "ph": {kind: fields}},
or a done marker, {"p", "done", "how", "kinds"}, kept a while after the generation was written so that a copy of
a phase is recognised instead of starting a new, orphan entry.

Outputs are (request_id, record) pairs for the joined topic: a generation event, which ingest validates and
derives like any other (one derivation for both protocols), or an "orphan" record ingest dead-letters.
"""

from __future__ import annotations

import zlib

from . import reasons as R
from .contract import MAX_DURATION_S, PD_FIELDS, V2_OPTIONAL

Output = tuple[str, dict]
# The note ingest forwards for a generation it joined itself: not a contract phase, only ingest writes it.
JOINED_IN_INGEST = "joined_in_ingest"
ENVELOPE_MAX = 500  # records per internal message (well under the 1 MB message limit)


def phase_partition(request_id: str, partitions: int) -> int:
    """Where all phases of a request meet. crc32, not hash(): Python salts str hashes per process."""
    return zlib.crc32(request_id.encode("utf-8")) % partitions


def chunks(items: list):
    for i in range(0, len(items), ENVELOPE_MAX):
        yield items[i:i + ENVELOPE_MAX]


def _phases(ph: dict) -> tuple:
    return ph.get("start"), ph.get("first_token"), ph.get("end")


# The rules read a phase through `get`: dict.get for the agent's table (a missing field is None, as phases hold
# no nulls), the C decoder's Struct or the full path's Phase for ingest's batch join (batch_decode.py).

def _pick(phases: tuple, name: str, get=dict.get):
    """Optional fields ride on whichever phase knew them; the earliest wins."""
    for phase in phases:
        if phase is not None:
            value = get(phase, name)
            if value is not None:
                return value
    return None


def _ttft(first, end, t0: float, get=dict.get) -> float | None:
    """From first_token, else as the end repeats it (the emitter does, so a reordered end need not wait)."""
    for phase in (first, end):
        if phase is not None:
            ttft = get(phase, "ttft_s")
            if ttft is not None:
                return ttft
            t_first = get(phase, "t_first")
            if t_first is not None:
                return t_first - t0
    return None


def _generation(rid: str, start, first, end, get=dict.get, **outcome) -> dict:
    phases = (start, first, end)
    # P/D fields from whichever phase had them; absent, not null, when none did (the row keeps its shape).
    pd = {name: value for name in PD_FIELDS if (value := _pick(phases, name, get)) is not None}
    return {**pd, "request_id": rid, "model": get(start, "model"), "t0": get(start, "t0"),
            "ttft_s": _ttft(first, end, get(start, "t0"), get), "queue_s": _pick(phases, "queue_s", get),
            "input_tokens": get(start, "input_tokens"), "cached_input_tokens": _pick(phases, "cached_input_tokens", get),
            "gateway": get(start, "gateway"), "replica": get(start, "replica"), **outcome}


def joined(rid: str, start, first, end, get=dict.get) -> dict:
    """The fields of the generation complete phases make (`completes`), each from the phase that knows it."""
    e2e = get(end, "e2e_s")
    return _generation(rid, start, first, end, get,
                       e2e_s=e2e if e2e is not None else get(end, "t_end") - get(start, "t0"),
                       output_tokens=get(end, "output_tokens"), status=get(end, "status") or "ok",
                       finish_reason=get(end, "finish_reason"))


def joined_event(rid: str, ph: dict) -> dict:
    # The end's optional v2 fields (it alone knows the stream) ride along only when present, so a joined
    # generation without them stays on ingest's fast path.
    end = ph["end"]
    extras = {k: end[k] for k in V2_OPTIONAL if k in end}
    return {"schema_version": 2, "kind": "generation", **joined(rid, *_phases(ph)), **extras}


def abandoned_event(rid: str, ph: dict, clock: float) -> dict:
    """Durations known so far as lower bounds; unknown ones stay null."""
    # e2e_s keeps its place among the fields; its bound comes from the others.
    gen = _generation(rid, *_phases(ph), e2e_s=None, output_tokens=0, status="abandoned",
                      finish_reason="expired_in_decode" if "first_token" in ph else "expired_in_prefill")
    gen["e2e_s"] = min(MAX_DURATION_S, max(clock - gen["t0"], gen["ttft_s"] or 0.0, gen["queue_s"] or 0.0))
    return {"schema_version": 2, "kind": "generation", **gen}


def orphan(rid: str, reason: str, detail: str, ph: dict) -> dict:
    return {"schema_version": 2, "kind": "orphan", "request_id": rid, "reason": reason,
            "detail": detail, "phases": ph}


def apply(entry: dict | None, rid: str, fields: dict, partition: int, ts: float
          ) -> tuple[dict | None, list[Output], str]:
    """One phase onto an entry -> (new entry, outputs, what happened: joined, partial, duplicate, late or
    joined_in_ingest). The first copy of each phase kind wins."""
    kind = fields["kind"]
    if entry is not None and "done" in entry:
        # After a join any phase is a copy, even a first_token overtaken by an end that carried everything; ingest's
        # note is one after any outcome.
        if kind == JOINED_IN_INGEST or entry["how"] == "joined" or kind in entry["kinds"]:
            return entry, [], "duplicate"
        # Already written as abandoned (or dead-lettered as an orphan): keep this phase as a dead letter.
        marker = {**entry, "kinds": entry["kinds"] + [kind]}
        detail = f"{kind} arrived after the generation was recorded as {entry['how']}"
        return marker, [(rid, orphan(rid, R.LATE_PHASE, detail, {kind: fields}))], "late"
    if kind == JOINED_IN_INGEST:
        # Ingest joined and wrote this generation (batch_join.py): mark it joined, so later copies of its phases
        # are duplicates, as after a join here.
        return {"p": partition, "done": ts, "how": "joined", "kinds": list(fields["kinds"])}, [], "joined_in_ingest"
    if entry is not None and kind in entry["ph"]:
        return entry, [], "duplicate"
    if entry is None:
        entry = {"p": partition, "seen": ts, "last": ts, "ph": {}}
    ph = {**entry["ph"], kind: {k: v for k, v in fields.items() if k not in ("kind", "request_id")}}
    if is_complete(ph):
        done = {"p": partition, "done": ts, "how": "joined", "kinds": sorted(ph)}
        return done, [(rid, joined_event(rid, ph))], "joined"
    return {**entry, "last": max(entry["last"], ts), "seen": min(entry["seen"], ts), "ph": ph}, [], "partial"


def completes(start, first, end, get=dict.get) -> bool:
    """Start and end, and the first-token time unless the end says none exists (shuffled phases may bring the
    end first). An end with 0 output tokens completes at once: an error before any token is common."""
    return start is not None and end is not None and (
        first is not None or get(end, "ttft_s") is not None or get(end, "t_first") is not None
        or get(end, "output_tokens") == 0)


def is_complete(ph: dict) -> bool:
    return completes(*_phases(ph))


DELETE = None


def expire(entry: dict, rid: str, clock: float, abandon_after_s: float, grace_s: float
           ) -> tuple[dict | None, list[Output], str | None]:
    """Time passing over one entry -> (new entry or DELETE, outputs, note); (entry, [], None) if nothing is due."""
    if "done" in entry:
        keep = grace_s if entry["how"] == "joined" else abandon_after_s
        return (DELETE, [], "forgotten") if clock - entry["done"] >= keep else (entry, [], None)
    ph = entry["ph"]
    if "start" in ph and "end" in ph:  # the first_token never came: write what we have
        if clock - entry["last"] < grace_s:
            return entry, [], None
        how, out, note = "joined", joined_event(rid, ph), "joined_without_first_token"
    elif "start" in ph:
        if clock - ph["start"]["t0"] < abandon_after_s:
            return entry, [], None
        how, out, note = "abandoned", abandoned_event(rid, ph, clock), "abandoned"
    else:
        if clock - entry["seen"] < grace_s:
            return entry, [], None
        detail = f"{' and '.join(sorted(ph))} without start after {grace_s:g} s"
        how, out, note = "orphan", orphan(rid, R.ORPHAN_PHASE, detail, ph), "orphaned"
    return {"p": entry["p"], "done": clock, "how": how, "kinds": sorted(ph)}, [(rid, out)], note


def latest(entry: dict) -> float:
    return entry["done"] if "done" in entry else entry["last"]


class PartitionClocks:
    """Event time per partition, so a worker catching up on a backlog does not abandon generations whose `end`
    is still in it. A clock is the newest record timestamp, advanced by wall time since (an idle partition
    ages), never ahead of the wall clock."""

    def __init__(self) -> None:
        self._seen: dict[int, tuple[float, float]] = {}  # partition -> (event ts, wall then)

    def observe(self, partition: int, ts: float, now: float) -> None:
        cur = self._seen.get(partition)
        if cur is None or ts >= cur[0]:
            self._seen[partition] = (ts, now)

    def clock(self, partition: int, now: float, fallback_ts: float) -> float:
        """`fallback_ts`: for a partition restored from the changelog but not yet read, its entries' newest time."""
        ts, wall = self._seen.setdefault(partition, (fallback_ts, now))
        return min(now, ts + (now - wall))


def inflight(entries, now: float, bucket) -> tuple[list[dict], int]:
    """Open generations per model x bucket x phase with the oldest age, and the count of phases awaiting start."""
    cells: dict[tuple[str, str, str], list] = {}
    awaiting_start = 0
    for entry in entries:
        if "done" in entry:
            continue
        ph = entry["ph"]
        start = ph.get("start")
        if start is None:
            awaiting_start += 1
            continue
        if "end" in ph:  # ended; only a late first_token is awaited
            continue
        key = (start["model"], bucket(start["input_tokens"]), "decode" if "first_token" in ph else "prefill")
        cell = cells.setdefault(key, [0, 0.0])
        cell[0] += 1
        cell[1] = max(cell[1], now - start["t0"])
    rows = [{"model": m, "input_bucket": b, "phase": p, "in_flight": n, "oldest_age_s": round(age, 3)}
            for (m, b, p), (n, age) in sorted(cells.items())]
    return rows, awaiting_start
