"""Decode stalls end to end on real services: the emitter's chunk() calls ->
Kafka -> worker (one-event and phase protocols) -> chDB -> `query bands --stalls`.
Expected values come from the sleeps below, not from the worker's code."""

from __future__ import annotations

import json
import time

import pytest
from conftest import wait_for

from phasemeter.producers import Meter

pytestmark = pytest.mark.integration
THRESHOLD = 0.05
STALL = 0.15  # one sleep this long between two chunks: a gap over THRESHOLD


def _stream(g, stall: bool, n: int = 5) -> list[tuple[float, float]]:
    """-> (before, after) each chunk() call on the caller's clock: a gap the
    emitter measured between chunks i-1 and i is at least before[i] -
    after[i-1] and at most after[i] - before[i-1]."""
    spans = []
    for i in range(n):
        if stall and i == 2:
            time.sleep(STALL)
        before = time.monotonic()
        g.chunk(2)
        spans.append((before, time.monotonic()))
    return spans


def gap_bounds(spans: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(least, most) each gap between successive chunk() calls can be."""
    return [(b_before - a_after, b_after - a_before)
            for (a_before, a_after), (b_before, b_after) in zip(spans[:-1], spans[1:], strict=True)]


def emit(bootstrap: str, topic: str) -> list[list[tuple[float, float]]]:
    """-> the gap bounds of each stream that sent chunks (four)."""
    meter = Meter(bootstrap_servers=bootstrap, topic=topic, gateway="gw", stall_threshold_s=THRESHOLD)
    watched = []
    for phase_events in (False, True):
        with meter.generation(model="chunky", input_tokens=100, phase_events=phase_events) as g:
            g.first_token()
            watched.append(gap_bounds(_stream(g, stall=True)))
            g.finish(output_tokens=10)
        with meter.generation(model="chunky", input_tokens=100, phase_events=phase_events) as g:
            watched.append(gap_bounds(_stream(g, stall=False)))  # first chunk = first token
            g.finish(output_tokens=g.counted_tokens, output_tokens_estimated=True)
    with meter.generation(model="chunky", input_tokens=100) as g:  # no chunk data: v1
        g.first_token()
        g.finish(output_tokens=3)
    meter.record(model="chunky", input_tokens=100, output_tokens=4, t0=time.time(), ttft_s=0.1, e2e_s=0.3,
                 output_tokens_estimated=True)
    assert meter.flush(timeout_s=60)
    meter.close()
    s = meter.stats()
    assert (s.dropped, s.failed) == (0, 0)
    return watched


def stalls(worker, *extra: str) -> dict:
    out = worker.run("query", "bands", "--stalls", "--from", "-30m", "--to", "now", "--step", "1h",
                     "--format", "json", *extra)
    return json.loads(out.stdout)


def test_stalls_from_emitter_to_query(worker, pm_env, kafka_bootstrap):
    worker.start()
    watched = emit(kafka_bootstrap, pm_env["PHASEMETER_TOPIC"])
    assert len(watched) == 4 and all(len(gaps) == 4 for gaps in watched)
    # A stream is surely stalled where a gap was at least THRESHOLD on the
    # caller's clock (the STALL sleep), possibly where one was at most over
    # it (a smooth stream on a loaded machine can stall for real).
    surely = sum(any(least > THRESHOLD for least, _ in gaps) for gaps in watched)
    possibly = sum(any(most > THRESHOLD for _, most in gaps) for gaps in watched)
    assert surely == 2  # the two with the sleep

    # Poll the worker's API (cheap), then ask the CLI once.
    wait_for(lambda: worker.stored_count() >= 6, 90, "six generations stored", worker.diagnose)
    doc = stalls(worker)
    assert doc["kind"] == "stalls" and doc["path"] == "exact" and "--stalls" in doc["reason"]
    [row] = doc["rows"]  # one model, one bucket, one step
    assert row["model"] == "chunky" and row["n"] == 6
    assert row["chunk_n"] == 4 and row["gap_n"] == 4  # two protocols x (stalled, smooth)
    assert surely <= row["stalled_n"] <= possibly
    assert row["stalled_share"] == pytest.approx(row["stalled_n"] / 4)
    assert max(least for gaps in watched for least, _ in gaps) <= row["gap_max"]
    assert row["gap_max"] <= max(most for gaps in watched for _, most in gaps)
    assert row["gap_p99"] >= row["gap_p50"]
    assert row["estimated_n"] == 3
    assert row["abandoned"] == 0

    # the table renders the same frame
    table = worker.run("query", "bands", "--stalls", "--from", "-30m", "--to", "now", "--step", "1h").stdout
    assert "stalled share" in table and "chunky" in table

    # The rollup has no gap data: refused, naming the flag (exit 2).
    refused = worker.run("query", "bands", "--stalls", "--rollup", "--from", "-30m", check=False)
    assert refused.returncode == 2 and "--stalls" in refused.stderr and "rollup" in refused.stderr
