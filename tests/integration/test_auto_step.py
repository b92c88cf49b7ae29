"""The auto step on a real store: the step run_query picks is the one the
rule gives on counts made in Python from the rows written, at the minute and
the hour grain, and the table's header states the rule."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
from clock import days_ago

from phasemeter.analytics import run_query
from phasemeter.analytics.paths import auto_candidates, count_grain, sample_step
from phasemeter.analytics.present import render
from phasemeter.demo.rows import synthetic_rows
from phasemeter.query.runner import DirectRunner
from phasemeter.stream_jobs.sink import Sink
from tests.stores import migrated_client


def python_step(rows: list[dict], span_s: float, needed: int = 100) -> int:
    """The rule on counts made here from the rows, at each candidate step directly."""
    steps = auto_candidates(span_s)
    for step in steps:
        cells: dict = {}
        for r in rows:
            key = (r["model"], r["input_bucket"], int(r["ts"]) // step)
            cells[key] = cells.get(key, 0) + 1
        if sum(n >= needed for n in cells.values()) >= len(cells) / 2:
            return step
    return steps[-1]


@pytest.mark.parametrize("n,hours", [(6000, 1), (40000, 1), (30000, 72)])
def test_the_step_is_the_rules_answer_on_the_rows(tmp_path, n, hours):
    span = hours * 3600
    t0 = days_ago(4)  # whole days ago, inside the raw TTL
    rows = synthetic_rows(n, t0, span, seed=9)
    with migrated_client(tmp_path, "auto") as client:
        Sink.over(client, "chdb").write(rows, [])
        start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (t0, t0 + span))
        df, meta = run_query(DirectRunner(client), start, end, None)
    assert count_grain(span) == (60 if hours == 1 else 3600)
    assert len(rows) > 0.9 * n and len(df) > 0
    # Cells finer than the grain are estimated from it; the minute grain holds these stores' steps.
    if count_grain(span) == 60 or meta["step_s"] >= 3600:
        assert meta["step_s"] == python_step(rows, span), meta
    assert meta["step_s"] in auto_candidates(span) and "most cells hold ≥ 100" in meta["step_rule"]
    assert f"step: {meta['step_s']}s, auto step: the finest of" in render(df, "table", meta)


def test_a_given_step_has_no_rule(tmp_path):
    t0 = days_ago(4)
    with migrated_client(tmp_path, "fixed") as client:
        Sink.over(client, "chdb").write(synthetic_rows(500, t0, 3600, seed=2), [])
        start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (t0, t0 + 3600))
        df, meta = run_query(DirectRunner(client), start, end, 60)
    assert meta["step_s"] == 60 and meta["step_rule"] == "" and "auto step" not in render(df, "table", meta)
    assert sample_step([], 60, [15, 60], 100) == 15
