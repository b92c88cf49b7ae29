"""Generation.chunk(): O(1) chunk state, the stall threshold, and what it sends
(the optional v2 fields on a generation event and on the `end` phase).
Clocks are fixed by replacing the modules' `time` (as test_emitter_phases
does), so every gap is exact."""

from __future__ import annotations

import json
import sys
import time
import types

import pytest
from test_emitter import FakeProducer, meters  # noqa: F401 (a fixture)
from test_emitter_phases import check_phase

from phasemeter.producers import Generation
from phasemeter.producers import generation as generation_mod
from phasemeter.producers import phases as phases_mod
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_message

BUCKET = Bucketer(parse_edges("default"))
WALL = 1_767_225_600.5


def fixed_clocks(monkeypatch, mono):
    mono = iter(mono)
    clock = types.SimpleNamespace(monotonic=lambda: next(mono), time=lambda: WALL)
    monkeypatch.setattr(phases_mod, "time", clock)
    monkeypatch.setattr(generation_mod, "time", clock)


def sent(meter, fake) -> list[dict]:
    assert meter.flush()
    return [json.loads(v) for _, _, v in fake.records]


def accepted(meter, fake) -> list[dict]:
    """What the worker makes of what was sent (none may be refused)."""
    out = []
    assert fake.records, "the meter sent what it was driven to"
    for _, _, value in fake.records:
        for r in process_message(value, BUCKET, 1_000_000, WALL + 60):
            assert not isinstance(r, Rejection), (value, r)
            out.append(r)
    assert len(out) >= len(fake.records)  # a message holds one event or an envelope of them
    return out


def test_chunks_after_first_token_measure_from_it(meters, monkeypatch):
    meter, fake = meters(stall_threshold_s=0.5)
    # t0, first_token, chunks at +0.1, +0.9 (gap 0.8 > 0.5), +1.0, +1.6 (gap 0.6), finish
    fixed_clocks(monkeypatch, [100.0, 100.5, 100.6, 101.4, 101.5, 102.1, 103.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        for n in (1, 2, 3, 4):
            g.chunk(n)
        assert g.counted_tokens == 10
        g.finish(output_tokens=10)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 2
    assert (ev["chunks"], ev["gaps_over"], ev["gap_threshold_s"]) == (4, 2, 0.5)
    assert ev["max_gap_s"] == pytest.approx(0.8) and "output_tokens_estimated" not in ev
    [row] = accepted(meter, fake)
    assert row["stalled"] == 1 and row["max_gap_s"] == pytest.approx(0.8)


def test_first_chunk_is_the_first_token_when_first_token_was_not_called(meters, monkeypatch):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 100.3, 100.3, 100.4, 103.0])  # chunk reads, then first_token reads
    with meter.generation(model="m", input_tokens=10) as g:
        g.chunk()
        g.token()  # the alias
        g.finish(output_tokens=2, output_tokens_estimated=True)
    [ev] = sent(meter, fake)
    assert ev["ttft_s"] == pytest.approx(0.3)
    assert (ev["chunks"], ev["gaps_over"], ev["output_tokens_estimated"]) == (2, 0, True)
    assert ev["max_gap_s"] == pytest.approx(0.1)  # only the gap between the two chunks
    [row] = accepted(meter, fake)
    assert (row["stalled"], row["output_tokens_estimated"]) == (0, 1)


def test_one_chunk_has_no_gap_null_not_zero(meters, monkeypatch):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 100.3, 100.3, 101.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.chunk()
        g.finish(output_tokens=1)
    [ev] = sent(meter, fake)
    assert ev["chunks"] == 1 and ev["gaps_over"] == 0 and "max_gap_s" not in ev
    assert accepted(meter, fake)[0]["stalled"] == 0


def test_no_chunk_call_sends_the_v1_event_of_before(meters):
    meter, fake = meters()
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        g.finish(output_tokens=3)
    meter.record(model="m", input_tokens=1, output_tokens=0, t0=WALL, e2e_s=0.1)
    evs = sent(meter, fake)
    assert [e["schema_version"] for e in evs] == [1, 1]
    assert not {"chunks", "max_gap_s", "gaps_over", "gap_threshold_s", "output_tokens_estimated"} & set(evs[0])


def test_record_marks_an_estimated_count(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=1, output_tokens=5, t0=WALL, ttft_s=0.1, e2e_s=0.5,
                 output_tokens_estimated=True)
    meter.record(model="m", input_tokens=1, output_tokens=5, t0=WALL, ttft_s=0.1, e2e_s=0.5,
                 output_tokens_estimated=False)
    first, second = sent(meter, fake)
    assert (first["schema_version"], first["output_tokens_estimated"]) == (2, True)
    assert "chunks" not in first and second["schema_version"] == 1
    assert [r["output_tokens_estimated"] for r in accepted(meter, fake)] == [1, 0]


def test_phase_end_carries_the_fields(meters, monkeypatch):
    meter, fake = meters(phase_events=True, stall_threshold_s=0.25)
    fixed_clocks(monkeypatch, [100.0, 100.5, 100.6, 101.0, 102.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        g.chunk()
        g.chunk()
        g.finish(output_tokens=2)
    start, first, end = sent(meter, fake)
    assert [start["kind"], first["kind"], end["kind"]] == ["start", "first_token", "end"]
    assert (end["chunks"], end["gaps_over"], end["gap_threshold_s"]) == (2, 1, 0.25)
    assert end["max_gap_s"] == pytest.approx(0.4)
    assert not {"chunks", "gaps_over"} & (set(start) | set(first))
    for ev in (start, first, end):
        check_phase(ev)  # the hand-written table of docs/phases.md
    accepted(meter, fake)


def test_phase_generation_first_chunk_sends_first_token(meters, monkeypatch):
    meter, fake = meters(phase_events=True)
    fixed_clocks(monkeypatch, [100.0, 100.2, 100.2, 101.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.chunk(5)
        g.finish(output_tokens=5, output_tokens_estimated=True)
    kinds = [(e["kind"], e.get("ttft_s")) for e in sent(meter, fake)]
    assert kinds[:2] == [("start", None), ("first_token", pytest.approx(0.2))]
    end = json.loads(fake.records[-1][2])
    assert end["output_tokens_estimated"] is True and end["chunks"] == 1
    check_phase(end)


def test_end_low_level_estimated(meters):
    meter, fake = meters(phase_events=True)
    rid = meter.start(model="m", input_tokens=1, t0=WALL)
    meter.end(rid, output_tokens=0, e2e_s=0.5, output_tokens_estimated=True)
    assert sent(meter, fake)[-1]["output_tokens_estimated"] is True


def test_envelope_with_a_v2_generation_is_v2(meters):
    meter, fake = meters(envelope_size=10)
    meter.record(model="m", input_tokens=1, output_tokens=0, t0=WALL, e2e_s=0.1)
    meter.record(model="m", input_tokens=1, output_tokens=0, t0=WALL, e2e_s=0.1, output_tokens_estimated=True)
    envs = sent(meter, fake)  # one or two envelopes: the sender may take the first event alone
    assert [e["schema_version"] for env in envs for e in env["events"]] == [1, 2]
    for env in envs:
        assert env["schema_version"] == max(e["schema_version"] for e in env["events"])
    assert len(accepted(meter, fake)) == 2


def test_threshold_is_strictly_over(meters, monkeypatch):
    meter, fake = meters(stall_threshold_s=0.5)
    fixed_clocks(monkeypatch, [100.0, 100.0, 100.5, 101.0000001, 102.0])
    with meter.generation(model="m", input_tokens=1) as g:
        g.first_token()
        g.chunk()  # gap 0.5: not over
        g.chunk()  # gap 0.5000001: over
        g.finish(output_tokens=2)
    assert sent(meter, fake)[0]["gaps_over"] == 1


@pytest.mark.parametrize("bad", [0, -0.1, True, "0.5", 86_401, float("nan")])
def test_threshold_is_validated(bad):
    from phasemeter.producers import Meter

    with pytest.raises(ValueError, match="stall_threshold_s"):
        Meter(bootstrap_servers="127.0.0.1:1", producer_factory=FakeProducer().factory, stall_threshold_s=bad)


@pytest.mark.parametrize("bad", [-1, 1.0, "1", None])
def test_chunk_n_is_validated(meters, bad):
    meter, _ = meters()
    with meter.generation(model="m", input_tokens=1) as g:
        with pytest.raises(ValueError, match="chunk"):
            g.chunk(bad)
        g.finish(output_tokens=0)


def test_estimated_flag_is_validated(meters):
    meter, _ = meters()
    with pytest.raises(ValueError, match="output_tokens_estimated"):
        meter.record(model="m", input_tokens=1, output_tokens=0, t0=WALL, e2e_s=0.1, output_tokens_estimated=1)
    with meter.generation(model="m", input_tokens=1) as g:
        with pytest.raises(ValueError, match="output_tokens_estimated"):
            g.finish(output_tokens=0, output_tokens_estimated="yes")
        g.finish(output_tokens=0)


def test_chunks_after_finish_are_ignored(meters):
    meter, fake = meters()
    with meter.generation(model="m", input_tokens=1) as g:
        g.chunk()
        g.finish(output_tokens=1)
        g.chunk()
    assert sent(meter, fake)[0]["chunks"] == 1


def test_state_is_constant_size(meters):
    """O(1): 10,000 chunks leave the object as big as one chunk does. With
    real monotonic gaps (no fake clock), each gap the emitter measures is
    bounded by the caller's own clock: from before the previous chunk() to
    after this one; a gap can be over the 0.5 s threshold only where that
    bound is (a loaded machine may make some)."""
    meter, fake = meters()
    clock, spans = time.monotonic, []  # (before, after) each chunk() call
    with meter.generation(model="m", input_tokens=1) as g:
        before = clock()
        g.chunk()
        spans.append((before, clock()))
        size = sys.getsizeof(g)
        attrs = {name: getattr(g, name) for name in Generation.__slots__ if hasattr(g, name)}
        for _ in range(9_999):
            before = clock()
            g.chunk()
            spans.append((before, clock()))
        assert sys.getsizeof(g) == size and set(attrs) == {n for n in Generation.__slots__ if hasattr(g, n)}
        assert all(not isinstance(getattr(g, n), (list, dict, set)) for n in attrs)
        g.finish(output_tokens=10_000, output_tokens_estimated=True)
    [ev] = sent(meter, fake)
    assert ev["chunks"] == 10_000 and 0 <= ev["max_gap_s"] <= ev["e2e_s"]
    assert len(spans) == 10_000
    widest = [b_after - a_before for (a_before, _), (_, b_after) in zip(spans[:-1], spans[1:], strict=True)]
    assert ev["max_gap_s"] <= max(widest)
    assert ev["gaps_over"] <= sum(w > ev["gap_threshold_s"] for w in widest)
