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


def _stream(g, stall: bool, n: int = 5) -> None:
    for i in range(n):
        if stall and i == 2:
            time.sleep(STALL)
        g.chunk(2)


def emit(bootstrap: str, topic: str) -> None:
    meter = Meter(bootstrap_servers=bootstrap, topic=topic, gateway="gw", stall_threshold_s=THRESHOLD)
    for phase_events in (False, True):
        with meter.generation(model="chunky", input_tokens=100, phase_events=phase_events) as g:
            g.first_token()
            _stream(g, stall=True)
            g.finish(output_tokens=10)
        with meter.generation(model="chunky", input_tokens=100, phase_events=phase_events) as g:
            _stream(g, stall=False)  # first chunk = first token
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


def stalls(worker, *extra: str) -> dict:
    out = worker.run("query", "bands", "--stalls", "--from", "-30m", "--to", "now", "--step", "1h",
                     "--format", "json", *extra)
    return json.loads(out.stdout)


def test_stalls_from_emitter_to_query(worker, pm_env, kafka_bootstrap):
    worker.start()
    emit(kafka_bootstrap, pm_env["PHASEMETER_TOPIC"])

    # Poll the worker's API (cheap), then ask the CLI once.
    wait_for(lambda: worker.stored_count() >= 6, 90, "six generations stored", worker.diagnose)
    doc = stalls(worker)
    assert doc["kind"] == "stalls" and doc["path"] == "exact" and "--stalls" in doc["reason"]
    [row] = doc["rows"]  # one model, one bucket, one step
    assert row["model"] == "chunky" and row["n"] == 6
    assert row["chunk_n"] == 4 and row["gap_n"] == 4  # two protocols x (stalled, smooth)
    assert row["stalled_n"] == 2 and row["stalled_share"] == pytest.approx(0.5)
    assert STALL <= row["gap_max"] < 5 and row["gap_p99"] >= row["gap_p50"]
    assert row["estimated_n"] == 3
    assert row["abandoned"] == 0

    # the table renders the same frame
    table = worker.run("query", "bands", "--stalls", "--from", "-30m", "--to", "now", "--step", "1h").stdout
    assert "stalled share" in table and "chunky" in table

    # The rollup has no gap data: refused, naming the flag (exit 2).
    refused = worker.run("query", "bands", "--stalls", "--rollup", "--from", "-30m", check=False)
    assert refused.returncode == 2 and "--stalls" in refused.stderr and "rollup" in refused.stderr
