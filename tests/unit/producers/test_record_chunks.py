"""Meter.record(..., chunks=, max_gap_s=, gaps_over=, gap_threshold_s=): chunk
stats timed by the caller. What is sent must be what the worker accepts, and
what the worker would refuse is refused here, naming the argument."""

from __future__ import annotations

import pytest
from test_emitter import meters  # noqa: F401 (a fixture)
from test_emitter_chunks import WALL, accepted, sent

from phasemeter.stream_jobs.contract import STALL_FIELDS

BASE = dict(model="m", input_tokens=10, output_tokens=40, t0=WALL, ttft_s=0.2, e2e_s=2.0)


def test_record_sends_the_callers_chunk_stats_as_v2(meters):
    meter, fake = meters()
    meter.record(**BASE, chunks=40, max_gap_s=0.9, gaps_over=2, gap_threshold_s=0.25)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 2 and "output_tokens_estimated" not in ev
    assert (ev["chunks"], ev["max_gap_s"], ev["gaps_over"], ev["gap_threshold_s"]) == (40, 0.9, 2, 0.25)
    [row] = accepted(meter, fake)
    assert (row["stalled"], row["chunks"], row["max_gap_s"]) == (1, 40, 0.9)


def test_the_threshold_defaults_to_the_meters_when_gaps_over_is_given(meters):
    meter, fake = meters(stall_threshold_s=0.3)
    assert meter.stall_threshold_s == 0.3
    meter.record(**BASE, chunks=3, max_gap_s=0.1, gaps_over=0)
    meter.record(**BASE, chunks=1)  # one chunk: no gap, nothing counted against a threshold
    smooth, single = sent(meter, fake)
    assert (smooth["gaps_over"], smooth["gap_threshold_s"]) == (0, 0.3)
    assert single["chunks"] == 1 and not {"max_gap_s", "gaps_over", "gap_threshold_s"} & set(single)
    assert [r["stalled"] for r in accepted(meter, fake)] == [0, None]


def test_chunk_stats_and_an_estimated_count_travel_together(meters):
    meter, fake = meters()
    meter.record(**BASE, output_tokens_estimated=True, chunks=40, max_gap_s=0.05, gaps_over=0)
    [ev] = sent(meter, fake)
    assert (ev["output_tokens_estimated"], ev["chunks"]) == (True, 40)
    accepted(meter, fake)


def test_with_timestamps_the_gap_is_held_to_t_end(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=1, output_tokens=2, t0=WALL, t_first=WALL + 0.1, t_end=WALL + 1.0,
                 chunks=2, max_gap_s=0.9, gaps_over=1, gap_threshold_s=0.5)
    with pytest.raises(ValueError, match="max_gap_s"):
        meter.record(model="m", input_tokens=1, output_tokens=2, t0=WALL, t_end=WALL + 1.0, chunks=2, max_gap_s=1.5)
    [ev] = sent(meter, fake)
    assert ev["max_gap_s"] == 0.9
    accepted(meter, fake)


def test_without_chunk_stats_the_event_stays_v1(meters):
    meter, fake = meters()
    meter.record(**BASE, chunks=None, max_gap_s=None, gaps_over=None, gap_threshold_s=None)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 1 and not set(STALL_FIELDS) & set(ev)


@pytest.mark.parametrize("kwargs, name", [
    (dict(chunks=-1), "chunks"),
    (dict(chunks=2.0), "chunks"),
    (dict(chunks=True), "chunks"),
    (dict(chunks="3"), "chunks"),
    (dict(chunks=10_000_001), "chunks"),
    (dict(chunks=3, gaps_over=-1), "gaps_over"),
    (dict(chunks=3, gaps_over=4), "gaps_over"),          # more gaps over than chunks
    (dict(chunks=3, max_gap_s=-0.1), "max_gap_s"),
    (dict(chunks=3, max_gap_s=float("nan")), "max_gap_s"),
    (dict(chunks=3, max_gap_s=float("inf")), "max_gap_s"),
    (dict(chunks=3, max_gap_s=2.5), "max_gap_s"),        # longer than the generation (e2e_s=2.0)
    (dict(chunks=3, max_gap_s=False), "max_gap_s"),
    (dict(max_gap_s=0.1), "max_gap_s"),                  # a gap without the chunks it was measured over
    (dict(gaps_over=0), "gaps_over"),
    (dict(chunks=3, gaps_over=1, gap_threshold_s=-0.5), "gap_threshold_s"),
    (dict(chunks=3, gaps_over=1, gap_threshold_s="0.5"), "gap_threshold_s"),
    (dict(chunks=3, gaps_over=1, gap_threshold_s=86_401.0), "gap_threshold_s"),
])
def test_bad_chunk_stats_raise_naming_the_argument(meters, kwargs, name):
    meter, fake = meters()
    with pytest.raises(ValueError, match=name):
        meter.record(**BASE, **kwargs)
    assert sent(meter, fake) == [] and meter.stats().enqueued == 0
