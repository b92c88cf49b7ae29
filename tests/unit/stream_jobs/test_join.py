"""Unit tests of the pure phase join (stream_jobs/join.py).

Phases enter as the ingest path forwards them (validate_phase's normalised
fields). Expected values are computed here from the known inputs with
docs/phases.md and docs/metrics.md, not with join.py or derive.py; every
output is also pushed through derive.process_message as the ingest agent
does with the joined topic (internal=True).
"""

from __future__ import annotations

import copy
import itertools
import json
import random

import pytest

from phasemeter.stream_jobs import join
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_message
from phasemeter.stream_jobs.phase_events import validate_phase

NOW = 1_800_000_000.0
T0 = 1_799_999_000.0  # whole seconds: t0 + 0.5 - t0 is exactly 0.5
BUCKET = Bucketer(parse_edges("default"))
GRACE, ABANDON = 60.0, 600.0
KINDS = ("start", "first_token", "end")


def label(n: int) -> str:
    """The default input buckets (docs/metrics.md), by hand."""
    for hi, name in ((512, "0-512"), (2048, "512-2k"), (8192, "2k-8k"), (32768, "8k-32k")):
        if n < hi:
            return name
    return "32k+"


def phase(kind: str, rid: str = "r1", **fields) -> dict:
    """A phase as ingest forwards it: validated and normalised."""
    raw = {"schema_version": 2, "kind": kind, "request_id": rid, **fields}
    out = validate_phase(raw, NOW)
    assert not isinstance(out, Rejection), out
    return out


def start(rid="r1", **kw):
    return phase("start", rid, **{"model": "llama", "t0": T0, "input_tokens": 1000, **kw})


def first(rid="r1", **kw):
    return phase("first_token", rid, **{**({"ttft_s": 0.5} if "t_first" not in kw else {}), **kw})


def end(rid="r1", **kw):
    return phase("end", rid, **{"output_tokens": 101, **({"e2e_s": 2.5} if "t_end" not in kw else {}), **kw})


def run(phases, rid="r1", partition=3, ts0=NOW - 100.0, entry=None):
    """Apply phases in order (one second apart) -> (entry, outputs, notes)."""
    outputs, notes = [], []
    for i, fields in enumerate(phases):
        entry, outs, note = join.apply(entry, rid, fields, partition, ts0 + i)
        outputs += outs
        notes.append(note)
    return entry, outputs, notes


def ingest(record: dict, internal: bool = True):
    """The ingest agent's view of a record of the joined topic."""
    [result] = process_message(json.dumps(record).encode(), BUCKET, 1_000_000, NOW, internal=internal)
    return result


def expected_row(*, n_in, n_out, t0, ttft, e2e, queue, cached, status) -> dict:
    """docs/metrics.md, by hand."""
    decode = None if ttft is None else e2e - ttft
    has_decode = n_out > 1 and decode is not None and decode > 0
    uncached = None
    if cached is not None and ttft is not None and ttft - (queue or 0.0) > 0:
        uncached = (n_in - cached) / (ttft - (queue or 0.0))
    return {"ts": t0, "input_bucket": label(n_in), "status": status, "input_tokens": n_in,
            "output_tokens": n_out, "cached_input_tokens": cached, "queue_s": queue, "ttft_s": ttft,
            "e2e_s": e2e, "decode_s": decode,
            "prefill_tps": n_in / ttft if ttft else None,
            "prefill_tps_uncached": uncached,
            "decode_tps": (n_out - 1) / decode if has_decode else None,
            "tpot_s": decode / (n_out - 1) if has_decode else None}


def assert_row(row, **expected):
    assert isinstance(row, dict), row
    want = expected_row(**expected)
    assert len(want) == 14, sorted(want)  # docs/metrics.md's derived row
    for key, value in want.items():
        if isinstance(value, float):
            assert row[key] == pytest.approx(value, rel=1e-12, abs=1e-9), key
        else:
            assert row[key] == value, key


# -- every order of the three phases -------------------------------------------------
# name -> (start, first_token, end fields, expected generation fields)
VARIANTS = {
    "durations, queue on first_token": (
        {"queue_s": None}, {"ttft_s": 0.5, "queue_s": 0.1}, {"e2e_s": 2.5, "queue_s": 0.3,
                                                              "cached_input_tokens": 7},
        {"ttft_s": 0.5, "e2e_s": 2.5, "queue_s": 0.1, "cached_input_tokens": 7, "output_tokens": 101,
         "status": "ok", "finish_reason": None, "gateway": None, "replica": None}),
    "epoch alternatives, start carries queue and cache": (
        {"queue_s": 0.2, "cached_input_tokens": 400},
        {"t_first": T0 + 0.75, "cached_input_tokens": 300},
        {"t_end": T0 + 3.0, "queue_s": 0.5, "cached_input_tokens": 200, "output_tokens": 11},
        {"ttft_s": 0.75, "e2e_s": 3.0, "queue_s": 0.2, "cached_input_tokens": 400, "output_tokens": 11,
         "status": "ok", "finish_reason": None, "gateway": None, "replica": None}),
    "error with labels, queue and cache only on end": (
        {"gateway": "gw-1", "replica": "vllm-3", "input_tokens": 9000},
        {"ttft_s": 4.0}, {"e2e_s": 4.0, "status": "error", "finish_reason": "engine_dead", "output_tokens": 1,
                          "queue_s": 1.5, "cached_input_tokens": 8192},
        {"ttft_s": 4.0, "e2e_s": 4.0, "queue_s": 1.5, "cached_input_tokens": 8192, "output_tokens": 1,
         "status": "error", "finish_reason": "engine_dead", "gateway": "gw-1", "replica": "vllm-3"}),
}


def _variant(name):
    s, f, e, want = VARIANTS[name]
    s = {k: v for k, v in s.items() if v is not None}
    return {"start": start(**s), "first_token": first(**f), "end": end(**e)}, want


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("order", list(itertools.permutations(KINDS)), ids="-".join)
def test_every_order_joins_exactly_once(order, variant):
    phases, want = _variant(variant)
    entry, outputs, notes = run([phases[k] for k in order])
    assert notes == ["partial", "partial", "joined"]
    assert len(outputs) == 1
    rid, rec = outputs[0]
    n_in = phases["start"]["input_tokens"]
    assert rid == "r1"
    assert rec == {"schema_version": 2, "kind": "generation", "request_id": "r1", "model": "llama", "t0": T0,
                   "input_tokens": n_in, **want}
    assert entry == {"p": 3, "done": NOW - 100.0 + 2, "how": "joined", "kinds": ["end", "first_token", "start"]}
    assert_row(ingest(rec), n_in=n_in, n_out=want["output_tokens"], t0=T0, ttft=want["ttft_s"],
               e2e=want["e2e_s"], queue=want["queue_s"], cached=want["cached_input_tokens"],
               status=want["status"])
    # An ordinary generation: the public path accepts it too.
    assert isinstance(ingest(rec, internal=False), dict)


@pytest.mark.parametrize("order", list(itertools.permutations(KINDS)), ids="-".join)
def test_partial_entries_keep_first_and_latest_timestamps(order):
    phases, _ = _variant("durations, queue on first_token")
    entry = None
    stamps = [NOW - 10, NOW - 30]  # the second arrives with an older stamp
    for kind, ts in zip(order[:2], stamps, strict=True):
        entry, outs, note = join.apply(entry, "r1", phases[kind], 7, ts)
        assert outs == [] and note == "partial"
    assert entry["p"] == 7 and entry["seen"] == NOW - 30 and entry["last"] == NOW - 10
    assert set(entry["ph"]) == set(order[:2])
    for kind in order[:2]:  # stored without kind/request_id, otherwise as forwarded
        assert entry["ph"][kind] == {k: v for k, v in phases[kind].items() if k not in ("kind", "request_id")}


# -- duplicates ----------------------------------------------------------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_duplicate_before_completion_is_ignored_first_wins(kind):
    other = {"start": start(model="other", input_tokens=5), "first_token": first(ttft_s=1.0),
             "end": end(e2e_s=9.0, output_tokens=3)}[kind]
    phases = {"start": start(), "first_token": first(), "end": end()}
    before, _, _ = run([phases[kind]])
    snapshot = copy.deepcopy(before)
    after, outs, note = join.apply(before, "r1", other, 3, NOW)
    assert (after, outs, note) == (before, [], "duplicate") and after == snapshot
    rest = [phases[k] for k in KINDS if k != kind]
    _, outputs, notes = run(rest, entry=after)
    assert notes[-1] == "joined"
    [(_, rec)] = outputs
    assert (rec["model"], rec["input_tokens"], rec["ttft_s"], rec["e2e_s"], rec["output_tokens"]) == \
        ("llama", 1000, 0.5, 2.5, 101)


def test_duplicates_after_completion_produce_nothing():
    done, outputs, _ = run([start(), first(), end()])
    assert len(outputs) == 1
    for fields in (start(), first(), end(), end(e2e_s=3.0), start(model="x")):
        new, outs, note = join.apply(done, "r1", fields, 3, NOW)
        assert (new, outs, note) == (done, [], "duplicate")


def test_inputs_are_not_mutated_and_entries_survive_json():
    """join_agent keeps the old entry until Kafka has the outputs, and the
    table's changelog stores entries as JSON."""
    entry, written = None, 0
    for fields in (first(), start(), end()):
        snapshot = copy.deepcopy(entry)
        fields_snapshot = copy.deepcopy(fields)
        new, outs, _ = join.apply(entry, "r1", fields, 0, NOW)
        assert entry == snapshot and fields == fields_snapshot
        assert json.loads(json.dumps(new)) == new
        for _, rec in outs:
            assert json.loads(json.dumps(rec)) == rec
            written += 1
        entry = json.loads(json.dumps(new))
    assert written == 1  # the end completes the generation: its one row
    for ph in ([start()], [first()], [start(), end()]):
        e, _, _ = run(ph)
        snapshot = copy.deepcopy(e)
        new, _, _ = join.expire(e, "r1", NOW + 10 * ABANDON, ABANDON, GRACE)
        assert e == snapshot and json.loads(json.dumps(new)) == new


# -- end before first_token ----------------------------------------------------------------
def test_end_before_first_token_waits_for_it():
    entry, outputs, notes = run([start(), end()])
    assert outputs == [] and notes == ["partial", "partial"]
    last = NOW - 100.0 + 1
    assert join.expire(entry, "r1", last + GRACE - 0.001, ABANDON, GRACE) == (entry, [], None)
    entry, outputs, notes = run([first()], entry=entry)
    assert notes == ["joined"] and outputs[0][1]["ttft_s"] == 0.5


def test_end_without_first_token_written_after_grace():
    entry, _, _ = run([start(), end(output_tokens=40)])
    last = entry["last"]
    same, outs, note = join.expire(entry, "r1", last + GRACE - 0.001, ABANDON, GRACE)
    assert same is entry and outs == [] and note is None
    clock = last + GRACE
    marker, outs, note = join.expire(entry, "r1", clock, ABANDON, GRACE)
    assert note == "joined_without_first_token"
    assert marker == {"p": 3, "done": clock, "how": "joined", "kinds": ["end", "start"]}
    [(rid, rec)] = outs
    assert rid == "r1" and rec["kind"] == "generation" and rec["ttft_s"] is None
    assert (rec["e2e_s"], rec["output_tokens"], rec["status"]) == (2.5, 40, "ok")
    # Output tokens without a first token: the ingest path dead-letters it.
    result = ingest(rec)
    assert isinstance(result, Rejection) and result.reason == R.INCONSISTENT
    # The first_token, late: a duplicate of the written generation.
    assert join.apply(marker, "r1", first(), 3, clock + 1) == (marker, [], "duplicate")


def test_grace_for_the_first_token_counts_from_the_latest_phase():
    entry, _, _ = join.apply(None, "r1", start(), 0, 1000.0)
    entry, _, _ = join.apply(entry, "r1", end(), 0, 1050.0)
    assert join.expire(entry, "r1", 1000.0 + GRACE + 1, ABANDON, GRACE)[2] is None
    assert join.expire(entry, "r1", 1050.0 + GRACE, ABANDON, GRACE)[2] == "joined_without_first_token"


@pytest.mark.parametrize("order", [("start", "end"), ("end", "start")])
def test_zero_output_tokens_complete_without_first_token(order):
    phases = {"start": start(cached_input_tokens=100),
              "end": end(output_tokens=0, status="cancelled", e2e_s=0.8, finish_reason="client_gone")}
    entry, outputs, notes = run([phases[k] for k in order])
    assert notes == ["partial", "joined"]
    [(_, rec)] = outputs
    assert rec["ttft_s"] is None and rec["output_tokens"] == 0 and rec["status"] == "cancelled"
    assert_row(ingest(rec), n_in=1000, n_out=0, t0=T0, ttft=None, e2e=0.8, queue=None, cached=100,
               status="cancelled")
    # a first_token after that is a duplicate, never a second generation
    assert join.apply(entry, "r1", first(), 3, NOW) == (entry, [], "duplicate")


@pytest.mark.parametrize("order", list(itertools.permutations(KINDS)), ids="-".join)
def test_zero_output_after_first_token_keeps_ttft_in_every_order(order):
    """A client that disconnects after its first token: the emitter sends
    start, first_token, then end with output_tokens=0 and status cancelled
    (PhaseGeneration.__exit__), the end repeating ttft_s (docs/phases.md).
    The first token was seen, so the generation has a ttft_s, whatever order
    the three phases reach the join in (envelopes have no key, so their
    phases may be reordered)."""
    phases = {"start": start(), "first_token": first(ttft_s=0.5),
              "end": end(output_tokens=0, status="cancelled", e2e_s=0.8, ttft_s=0.5)}
    entry, outputs, notes = run([phases[k] for k in order])
    for clock in (NOW, NOW + GRACE, NOW + ABANDON):  # whatever the join may still be waiting for
        if "done" not in entry:
            entry, outs, _ = join.expire(entry, "r1", clock, ABANDON, GRACE)
            outputs += outs
    [(_, rec)] = outputs
    assert (rec["ttft_s"], rec["e2e_s"], rec["output_tokens"], rec["status"]) == (0.5, 0.8, 0, "cancelled")
    assert_row(ingest(rec), n_in=1000, n_out=0, t0=T0, ttft=0.5, e2e=0.8, queue=None, cached=None,
               status="cancelled")


@pytest.mark.parametrize("alt", ["ttft_s", "t_first"])
@pytest.mark.parametrize("order", [("start", "end"), ("end", "start")])
def test_end_repeating_the_first_token_time_completes_at_once(order, alt):
    """docs: an end may repeat the first token's time; then it need not wait."""
    rep = {"ttft_s": 0.75} if alt == "ttft_s" else {"t_first": T0 + 0.75}
    phases = {"start": start(), "end": end(output_tokens=20, e2e_s=3.0, **rep)}
    entry, outputs, notes = run([phases[k] for k in order])
    assert notes == ["partial", "joined"]
    [(_, rec)] = outputs
    assert (rec["ttft_s"], rec["e2e_s"], rec["output_tokens"]) == (0.75, 3.0, 20)
    assert_row(ingest(rec), n_in=1000, n_out=20, t0=T0, ttft=0.75, e2e=3.0, queue=None, cached=None,
               status="ok")
    assert join.apply(entry, "r1", first(ttft_s=0.75), 3, NOW) == (entry, [], "duplicate")


def test_first_token_time_preferred_to_the_ends_copy():
    _, outputs, _ = run([start(), first(ttft_s=0.5), end(ttft_s=0.5000001)])
    assert outputs[0][1]["ttft_s"] == 0.5


# -- abandoned ---------------------------------------------------------------------------------
def test_abandoned_in_prefill():
    entry, _, _ = run([start(queue_s=0.25, cached_input_tokens=10)])
    assert join.expire(entry, "r1", T0 + ABANDON - 0.001, ABANDON, GRACE) == (entry, [], None)
    clock = T0 + ABANDON + 7.5
    marker, outs, note = join.expire(entry, "r1", clock, ABANDON, GRACE)
    assert note == "abandoned"
    assert marker == {"p": 3, "done": clock, "how": "abandoned", "kinds": ["start"]}
    [(rid, rec)] = outs
    assert rid == "r1"
    assert rec == {"schema_version": 2, "kind": "generation", "request_id": "r1", "model": "llama", "t0": T0,
                   "ttft_s": None, "queue_s": 0.25, "input_tokens": 1000, "cached_input_tokens": 10,
                   "gateway": None, "replica": None, "e2e_s": ABANDON + 7.5, "output_tokens": 0,
                   "status": "abandoned", "finish_reason": "expired_in_prefill"}
    row = ingest(rec)
    assert_row(row, n_in=1000, n_out=0, t0=T0, ttft=None, e2e=ABANDON + 7.5, queue=0.25, cached=10,
               status="abandoned")
    assert row["finish_reason"] == "expired_in_prefill"
    assert row["prefill_tps"] is None and row["decode_s"] is None and row["decode_tps"] is None
    assert row["tpot_s"] is None


@pytest.mark.parametrize("alt", ["ttft_s", "t_first"])
def test_abandoned_in_decode_keeps_exact_ttft(alt):
    ft = first(ttft_s=1.25) if alt == "ttft_s" else first(t_first=T0 + 1.25)
    entry, _, _ = run([ft, start()])
    clock = T0 + ABANDON
    marker, outs, note = join.expire(entry, "r1", clock, ABANDON, GRACE)
    assert note == "abandoned" and marker["kinds"] == ["first_token", "start"]
    [(_, rec)] = outs
    assert (rec["ttft_s"], rec["e2e_s"], rec["output_tokens"]) == (1.25, ABANDON, 0)
    assert (rec["status"], rec["finish_reason"]) == ("abandoned", "expired_in_decode")
    row = ingest(rec)
    assert_row(row, n_in=1000, n_out=0, t0=T0, ttft=1.25, e2e=ABANDON, queue=None, cached=None,
               status="abandoned")
    assert row["prefill_tps"] == 1000 / 1.25 and row["decode_s"] == ABANDON - 1.25  # a lower bound
    assert row["decode_tps"] is None and row["tpot_s"] is None  # unknown, never 0


def test_abandoned_e2e_capped_at_a_day():
    entry, _, _ = run([start()])
    long_expiry = 2 * 86_400.0
    marker, outs, note = join.expire(entry, "r1", T0 + long_expiry + 5, long_expiry, GRACE)
    assert note == "abandoned" and outs[0][1]["e2e_s"] == 86_400.0
    assert ingest(outs[0][1])["e2e_s"] == 86_400.0


def test_abandoned_lower_bounds_stay_ordered():
    """Whatever the phases say, the abandoned record passes ingest: e2e_s is
    never below the queue or the first token already seen."""
    entry, _, _ = run([start(queue_s=30.0)])
    _, outs, _ = join.expire(entry, "r1", T0 + 10.0, 10.0, GRACE)
    rec = outs[0][1]
    assert rec["e2e_s"] >= 30.0 and isinstance(ingest(rec), dict)
    entry, _, _ = run([start(), first(ttft_s=50.0)])
    _, outs, _ = join.expire(entry, "r1", T0 + 10.0, 10.0, GRACE)
    rec = outs[0][1]
    assert rec["e2e_s"] >= 50.0 and isinstance(ingest(rec), dict)


def test_abandoned_only_from_the_join():
    entry, _, _ = run([start()])
    _, outs, _ = join.expire(entry, "r1", T0 + ABANDON, ABANDON, GRACE)
    rec = outs[0][1]
    assert ingest(rec, internal=True)["status"] == "abandoned"
    public = ingest(rec, internal=False)
    assert isinstance(public, Rejection) and public.reason == R.BAD_VALUE


@pytest.mark.parametrize("late_kind", ["end", "first_token"])
def test_late_phase_after_abandonment_is_kept_once(late_kind):
    entry, _, _ = run([start()])
    marker, _, _ = join.expire(entry, "r1", T0 + ABANDON, ABANDON, GRACE)
    late = {"end": end(), "first_token": first()}[late_kind]
    marker2, outs, note = join.apply(marker, "r1", late, 3, T0 + ABANDON + 1)
    assert note == "late"
    assert marker2 == {**marker, "kinds": ["start", late_kind]}
    [(rid, rec)] = outs
    assert rid == "r1" and rec["kind"] == "orphan" and rec["reason"] == R.LATE_PHASE
    assert late_kind in rec["detail"] and "abandoned" in rec["detail"]
    assert rec["phases"][late_kind]["kind"] == late_kind  # the late phase is kept in the dead letter
    result = ingest(rec)
    assert isinstance(result, Rejection) and result.reason == R.LATE_PHASE and late_kind in result.detail
    public = ingest(rec, internal=False)
    assert isinstance(public, Rejection) and public.reason == R.BAD_KIND
    # again: a duplicate; so is the start that was already joined into the abandoned record
    for again in (late, start()):
        assert join.apply(marker2, "r1", again, 3, T0 + ABANDON + 2) == (marker2, [], "duplicate")


def test_start_redelivered_after_abandonment_is_a_duplicate():
    entry, _, _ = run([start(), first()])
    marker, _, _ = join.expire(entry, "r1", T0 + ABANDON, ABANDON, GRACE)
    for again in (start(), first()):
        assert join.apply(marker, "r1", again, 3, NOW) == (marker, [], "duplicate")


# -- orphans -------------------------------------------------------------------------------------
@pytest.mark.parametrize("kinds", [("first_token",), ("end",), ("first_token", "end"), ("end", "first_token")])
def test_orphans_after_grace(kinds):
    phases = {"first_token": first(), "end": end()}
    entry, outputs, notes = run([phases[k] for k in kinds], ts0=1000.0)
    assert outputs == [] and set(notes) == {"partial"}
    assert join.expire(entry, "r1", 1000.0 + GRACE - 0.001, ABANDON, GRACE) == (entry, [], None)
    clock = 1000.0 + GRACE
    marker, outs, note = join.expire(entry, "r1", clock, ABANDON, GRACE)
    assert note == "orphaned"
    assert marker == {"p": 3, "done": clock, "how": "orphan", "kinds": sorted(kinds)}
    [(rid, rec)] = outs
    assert rid == "r1" and rec["kind"] == "orphan" and rec["reason"] == R.ORPHAN_PHASE
    for kind in kinds:
        assert kind in rec["detail"]
    assert "start" in rec["detail"] and set(rec["phases"]) == set(kinds)
    result = ingest(rec)
    assert isinstance(result, Rejection) and result.reason == R.ORPHAN_PHASE
    assert all(kind in result.detail for kind in kinds)
    public = ingest(rec, internal=False)
    assert isinstance(public, Rejection) and public.reason == R.BAD_KIND
    # the start, late: kept once as a late phase, then a duplicate
    marker2, outs, note = join.apply(marker, "r1", start(), 3, clock + 1)
    assert note == "late" and outs[0][1]["reason"] == R.LATE_PHASE and "orphan" in outs[0][1]["detail"]
    assert marker2["kinds"] == sorted(kinds) + ["start"]
    assert join.apply(marker2, "r1", start(), 3, clock + 2) == (marker2, [], "duplicate")
    assert join.apply(marker2, "r1", phases[kinds[0]], 3, clock + 2) == (marker2, [], "duplicate")


def test_orphan_grace_counts_from_the_earliest_phase():
    entry, _, _ = join.apply(None, "r1", first(), 0, 1000.0)
    entry, _, _ = join.apply(entry, "r1", end(), 0, 990.0)  # older record timestamp
    assert join.expire(entry, "r1", 990.0 + GRACE, ABANDON, GRACE)[2] == "orphaned"


def test_start_in_time_is_not_an_orphan():
    entry, _, _ = run([end(), first()], ts0=1000.0)
    entry, outs, note = join.apply(entry, "r1", start(), 3, 1000.0 + GRACE - 1)
    assert note == "joined" and len(outs) == 1


# -- done markers ----------------------------------------------------------------------------------
def test_joined_marker_forgotten_after_grace():
    marker, _, _ = run([start(), first(), end()], ts0=1000.0)
    done = marker["done"]
    assert join.expire(marker, "r1", done + GRACE - 0.001, ABANDON, GRACE) == (marker, [], None)
    assert join.expire(marker, "r1", done + GRACE, ABANDON, GRACE) == (join.DELETE, [], "forgotten")


@pytest.mark.parametrize("how", ["abandoned", "orphan"])
def test_abandoned_and_orphan_markers_kept_for_abandon_after(how):
    entry, _, _ = run([start()] if how == "abandoned" else [end()], ts0=1000.0)
    clock = T0 + ABANDON if how == "abandoned" else 1000.0 + GRACE
    marker, _, _ = join.expire(entry, "r1", clock, ABANDON, GRACE)
    assert marker["how"] == how and marker["done"] == clock
    for later in (clock + GRACE, clock + ABANDON - 0.001):
        assert join.expire(marker, "r1", later, ABANDON, GRACE) == (marker, [], None)
    assert join.expire(marker, "r1", clock + ABANDON, ABANDON, GRACE) == (None, [], "forgotten")


def test_latest():
    entry, _, _ = run([start(), end()], ts0=1000.0)
    assert join.latest(entry) == 1001.0
    marker, _, _ = join.expire(entry, "r1", 1001.0 + GRACE, ABANDON, GRACE)
    assert join.latest(marker) == 1001.0 + GRACE


def test_nothing_due_returns_the_same_entry():
    for phases in ([start(t0=NOW)], [first()], [start(t0=NOW), end()], [start(t0=NOW), first(), end()]):
        entry, _, _ = run(phases, ts0=NOW)
        new, outs, note = join.expire(entry, "r1", NOW + 1, ABANDON, GRACE)
        assert new is entry and outs == [] and note is None


# -- a shuffled stream -----------------------------------------------------------------------------
def test_shuffled_stream_with_duplicates_and_expiry():
    """Many generations, phases shuffled and duplicated, expiry ticks between
    them: each generation is written once, as its phases say."""
    rng = random.Random(5)
    table: dict[str, dict] = {}
    written: dict[str, list[dict]] = {}
    stream, want = [], {}
    for i in range(300):
        rid = f"g{i}"
        n_out = rng.choice([0, 1, 7])
        ttft, e2e = rng.choice([0.25, 0.5, 2.0]), 4.0
        ph = [start(rid), first(rid, ttft_s=ttft), end(rid, output_tokens=n_out, e2e_s=e2e)]
        ends = i % 10 != 0
        if not ends:
            ph = ph[:2]  # never ends: abandoned
        elif n_out == 0:
            ph, ttft = [ph[0], ph[2]], None  # no token at all (see test_zero_output_after_first_token...)
        want[rid] = (n_out, ttft, e2e, ends)
        stream += ph + [rng.choice(ph) for _ in range(rng.randint(0, 2))]
    rng.shuffle(stream)
    assert len(want) == 300 and len(stream) >= 2 * len(want)  # each generation's phases, some copied
    ts = T0
    for k, fields in enumerate(stream):
        ts += 0.01  # all within the grace: nothing is forgotten, no first_token is given up on
        rid = fields["request_id"]
        new, outs, note = join.apply(table.get(rid), rid, fields, 0, ts)
        assert note in ("joined", "partial", "duplicate")  # nothing is late: the expiry is long
        table[rid] = new
        for r, rec in outs:
            written.setdefault(r, []).append(rec)
        if k % 50 == 0:
            assert table, "the phase just applied is held"
            for rid, entry in list(table.items()):
                new, outs, note = join.expire(entry, rid, ts, ABANDON, GRACE)
                assert (new, outs, note) == (entry, [], None)  # nothing due yet
    for rid, entry in list(table.items()):
        new, outs, _ = join.expire(entry, rid, T0 + ABANDON + 1, ABANDON, GRACE * 100)
        for r, rec in outs:
            written.setdefault(r, []).append(rec)
    for rid, (n_out, ttft, e2e, ends) in want.items():
        [rec] = written[rid]
        if not ends:
            assert rec["status"] == "abandoned" and rec["ttft_s"] == ttft and rec["output_tokens"] == 0
        else:
            assert (rec["status"], rec["ttft_s"], rec["e2e_s"], rec["output_tokens"]) == ("ok", ttft, e2e, n_out)
        assert isinstance(ingest(rec), dict)


# -- PartitionClocks -------------------------------------------------------------------------------
def test_idle_partition_ages_with_wall_time():
    c = join.PartitionClocks()
    c.observe(0, 1000.0, 1000.0)
    assert c.clock(0, 1000.0, 0.0) == 1000.0
    assert c.clock(0, 1600.0, 0.0) == 1600.0


def test_lagging_partition_uses_event_time():
    c = join.PartitionClocks()
    c.observe(1, 400.0, 1000.0)  # catching up: the record is 600 s old
    assert c.clock(1, 1000.0, 0.0) == 400.0
    assert c.clock(1, 1010.0, 0.0) == 410.0
    c.observe(1, 700.0, 1020.0)
    assert c.clock(1, 1020.0, 0.0) == 700.0


def test_clock_never_ahead_of_wall_clock():
    c = join.PartitionClocks()
    c.observe(2, 5000.0, 1000.0)  # a producer clock ahead of ours
    assert c.clock(2, 1000.0, 0.0) == 1000.0
    assert c.clock(2, 1003.0, 0.0) == 1003.0
    assert c.clock(9, 1000.0, 9999.0) == 1000.0  # a fallback ahead too


def test_older_record_does_not_move_the_clock_back():
    c = join.PartitionClocks()
    c.observe(0, 1000.0, 1000.0)
    c.observe(0, 900.0, 1001.0)  # out of order within the partition
    assert c.clock(0, 1001.0, 0.0) == 1001.0


def test_unseen_partition_starts_from_the_fallback_then_ages():
    c = join.PartitionClocks()
    assert c.clock(5, 1000.0, 800.0) == 800.0
    assert c.clock(5, 1010.0, 999.0) == 810.0  # the first fallback holds and ages
    c.observe(5, 900.0, 1010.0)
    assert c.clock(5, 1010.0, 0.0) == 900.0


def test_partitions_are_independent():
    c = join.PartitionClocks()
    c.observe(0, 1000.0, 1000.0)
    c.observe(1, 100.0, 1000.0)
    assert (c.clock(0, 1000.0, 0.0), c.clock(1, 1000.0, 0.0)) == (1000.0, 100.0)


def test_backlog_does_not_abandon_what_its_end_will_join():
    """The reason for event time: a worker back after 20 minutes reads the
    start and end of a generation in its backlog before expiring anything."""
    c = join.PartitionClocks()
    wall = T0 + 1200.0
    entry, _, _ = join.apply(None, "r1", start(), 0, T0)
    c.observe(0, T0, wall)
    new, outs, note = join.expire(entry, "r1", c.clock(0, wall, 0.0), ABANDON, GRACE)
    assert note is None
    entry, outs, note = join.apply(entry, "r1", end(output_tokens=0), 0, T0 + 2.5)
    assert note == "joined" and outs[0][1]["status"] == "ok"


# -- inflight ---------------------------------------------------------------------------------------
def _bucket_calls():
    calls = []

    def bucket(n):
        calls.append(n)
        return label(n)
    return bucket, calls


def test_inflight_groups_by_model_bucket_phase():
    t = NOW
    entries = [
        run([start("a", model="m1", t0=t - 10, input_tokens=100)])[0],          # m1 0-512 prefill
        run([start("b", model="m1", t0=t - 30.5, input_tokens=200)])[0],        # m1 0-512 prefill (oldest)
        run([start("c", model="m1", t0=t - 5, input_tokens=600), first("c")])[0],  # m1 512-2k decode
        run([first("d"), start("d", model="m0", t0=t - 2.0004, input_tokens=3000)])[0],  # m0 2k-8k decode
        run([start("e", model="m1", t0=t - 99, input_tokens=100), end("e")])[0],  # ended: excluded
        run([start("f", model="m1", t0=t - 99), first("f"), end("f")])[0],      # done marker: excluded
        run([first("g")])[0],                                                   # awaiting its start
    ]
    bucket, calls = _bucket_calls()
    rows, awaiting = join.inflight(entries, t, bucket)
    assert rows == [
        {"model": "m0", "input_bucket": "2k-8k", "phase": "decode", "in_flight": 1, "oldest_age_s": 2.0},
        {"model": "m1", "input_bucket": "0-512", "phase": "prefill", "in_flight": 2, "oldest_age_s": 30.5},
        {"model": "m1", "input_bucket": "512-2k", "phase": "decode", "in_flight": 1, "oldest_age_s": 5.0},
    ]
    assert sorted(calls) == [100, 200, 600, 3000]
    assert awaiting == 1


def test_inflight_empty():
    assert join.inflight([], NOW, label) == ([], 0)
    assert join.inflight(iter([]), NOW, label) == ([], 0)


@pytest.mark.parametrize("phases", [["first_token"], ["end"], ["first_token", "end"]])
def test_inflight_counts_phases_waiting_for_their_start(phases):
    """metrics.py: "first_token/end phases waiting for their start event";
    join.inflight: "the number of phases still waiting for their start"."""
    made = {"first_token": first(), "end": end()}
    entry, _, _ = run([made[k] for k in phases])
    rows, awaiting = join.inflight([entry], NOW, label)
    assert rows == []
    assert awaiting >= 1, entry  # one generation (or its phases) waits for its start


# -- internal transport: partitioning and envelopes ---------------------------------------------
def test_phase_partition_is_stable_and_in_range():
    import zlib

    ids = [f"req-{i}" for i in range(2000)]
    parts = [join.phase_partition(r, 4) for r in ids]
    assert set(parts) == {0, 1, 2, 3}  # spreads
    assert parts == [join.phase_partition(r, 4) for r in ids]  # deterministic
    # independent of this process's str hash salt: crc32 of the UTF-8 id
    assert join.phase_partition("req-é", 7) == zlib.crc32("req-é".encode()) % 7


def test_phase_envelopes_group_by_partition_keep_order_and_chunk():
    from phasemeter.stream_jobs.join_agent import phase_envelopes

    n = join.ENVELOPE_MAX + 7
    phases = [(i % 2, 1000.0 + i, {"kind": "start", "request_id": f"r{i}"}) for i in range(2 * n)]
    out = phase_envelopes(phases)
    assert [p for p, _ in out] == [0, 0, 1, 1]  # two chunks per partition
    for p in (0, 1):
        items = [it for q, v in out if q == p for it in json.loads(v)["phases"]]
        assert items == [[ts, f] for q, ts, f in phases if q == p]
        assert all(len(json.loads(v)["phases"]) <= join.ENVELOPE_MAX for q, v in out)
    assert phase_envelopes([]) == []
