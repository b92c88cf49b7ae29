"""Small cells kept whole (schema/0022, 0023): an answer cell whose values the
rollup holds, at most 512 per phase, is answered exactly from them; any
other cell from its sketches as before. Against numpy's linear percentile of
the raw rows, on a real chDB store filled through the real derivation and Sink.
"""

from __future__ import annotations

import time
from datetime import datetime, timedelta, timezone

import numpy as np
import pandas as pd
import pytest

from stores import in_database, migrated_client

from phasemeter.analytics import run_query
from phasemeter.demo.rows import synthetic_rows
from phasemeter.query.runner import DirectRunner
from phasemeter.store.migrate import discover, migrate
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration

T0 = (time.time() // 86400 - 2) * 86400  # two days ago, midnight UTC (inside the raw TTL)
START = datetime.fromtimestamp(T0, timezone.utc)
SPAN_S = 8 * 3600
END = START + timedelta(seconds=SPAN_S + 60)
HELD = 512  # values per phase a cell keeps (schema/0022)
PCOLS = [f"{ph}_{p}" for ph in ("prefill", "decode") for p in ("p1", "p5", "p50", "p95", "p99")]
SKETCH_MAX_TOL = 0.10  # the sketch path's measured bound (docs/analytics.md)


def write(client, rows, size=4000):
    sink = Sink.over(client, "chdb://test")
    for i in range(0, len(rows), size):
        sink.write(rows[i:i + size], [])


def one_series(rows, first_offset):
    """Every row in one model x bucket, so a minute cell grows past 512."""
    return [{**r, "model": "m", "input_bucket": "0-512", "src_offset": first_offset + i} for i, r in enumerate(rows)]


def exact_and_rollup(client, start, end, step_s, tiers=True):
    runner = DirectRunner(client)
    ex, _ = run_query(runner, start, end, step_s, force="exact")
    ro, meta = run_query(runner, start, end, step_s, force="rollup", tiers=tiers)
    assert meta["path"] == "rollup" and list(ro.columns) == list(ex.columns) and len(ro) == len(ex) > 0
    key = ["t", "model", "input_bucket"]
    ex, ro = ex.sort_values(key).reset_index(drop=True), ro.sort_values(key).reset_index(drop=True)
    assert (ro[key].astype(str).values == ex[key].astype(str).values).all()
    assert (ro[["n", "prefill_n", "decode_n", "abandoned"]].values
            == ex[["n", "prefill_n", "decode_n", "abandoned"]].values).all()
    return ex, ro, meta


def held(ex: pd.DataFrame) -> np.ndarray:
    return ((ex["prefill_n"] <= HELD) & (ex["decode_n"] <= HELD)).to_numpy()


def assert_exact(ro, ex, mask, what):
    got, want = ro.loc[mask, PCOLS].to_numpy(float), ex.loc[mask, PCOLS].to_numpy(float)
    np.testing.assert_allclose(got, want, rtol=1e-9, equal_nan=True, err_msg=what)


def assert_sketch_close(ro, ex, mask, what):
    if not mask.any():
        return
    got, want = ro.loc[mask, PCOLS].to_numpy(float), ex.loc[mask, PCOLS].to_numpy(float)
    assert (np.isnan(got) == np.isnan(want)).all(), what
    rel = np.abs(got / want - 1)
    assert np.nanmax(rel) <= SKETCH_MAX_TOL, (what, np.nanmax(rel))


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with migrated_client(tmp_path_factory.mktemp("whole"), "t_whole") as c:
        rows = synthetic_rows(30_000, T0, SPAN_S, seed=31)
        write(c, rows)  # 4000-row blocks: cells at block edges are split over two parts
        write(c, rows[8000:12000])  # a retried block (same token): counted once, values held once
        yield c


@pytest.mark.parametrize("step_s", [60, 600, 3600])
def test_cells_of_at_most_512_values_equal_the_exact_path(client, step_s):
    ex, ro, _ = exact_and_rollup(client, START, END, step_s)
    whole = held(ex)
    assert whole.sum() >= 0.75 * len(ex), (whole.sum(), len(ex))
    assert_exact(ro, ex, whole, f"step {step_s}: cells of at most {HELD} values")
    assert_sketch_close(ro, ex, ~whole, f"step {step_s}: larger cells")


def test_larger_cells_come_from_the_sketches_and_the_rest_stay_exact(client):
    # 3-hour steps: the 3-hour tier's cells (about 560 values per series on
    # average) are past 512 in most series, the edges' minute cells are not.
    ex, ro, meta = exact_and_rollup(client, START, END, 10800)
    assert meta["tiers"] == ["hour", "hour3"], meta["reason"]
    whole = held(ex)
    assert 0 < whole.sum() < len(ex), (whole.sum(), len(ex))
    assert_exact(ro, ex, whole, "cells of at most 512 values")
    assert_sketch_close(ro, ex, ~whole, "larger cells")
    # The sketch answers a p50 only approximately: a cell answered from its
    # values would be exact, so this fails if the larger cells were (wrongly) whole.
    assert not np.allclose(ro.loc[~whole, "prefill_p50"], ex.loc[~whole, "prefill_p50"], rtol=1e-9)


def test_the_minute_tier_alone_answers_the_same_cells_exactly(client):
    ex, ro, meta = exact_and_rollup(client, START, END, 3600, tiers=False)
    assert meta["tiers"] == []
    assert_exact(ro, ex, held(ex), "minute tier, 1 h steps")


def test_a_cell_past_512_values_is_not_taken_for_whole_though_each_block_kept_all_its_own(client):
    # Two blocks of 300 values in one cell: each block holds all of its own
    # (held count = n per block), but the merged state keeps only 512 of 600.
    with in_database(client, "t_whole_split"):
        migrate(client)
        lo = T0 + 3600
        big = one_series(synthetic_rows(600, lo, 50, seed=41), 0)
        write(client, big, size=300)
        small = one_series(synthetic_rows(400, lo + 60, 50, seed=42), 1000)
        write(client, small, size=200)  # two blocks, 400 values: whole after the merge
        start = datetime.fromtimestamp(lo, timezone.utc)
        ex, ro, _ = exact_and_rollup(client, start, start + timedelta(minutes=2), 60)
        assert ex["n"].tolist() == [600, 400]
        assert_sketch_close(ro, ex, ex["n"].to_numpy() == 600, "600 values in two blocks")
        assert_exact(ro, ex, ex["n"].to_numpy() == 400, "400 values in two blocks")


def test_cells_written_before_the_values_migration_come_from_the_sketches(client):
    # A store upgraded in place: cells from before schema/0022 hold no values
    # (a held count of 0) and must be answered from their sketches, also when
    # rows written after the upgrade fall into the same cell.
    with in_database(client, "t_whole_upgrade"):
        migs = [m for m in discover() if m.version < 22]
        for mig in migs:
            for st in mig.statements():
                client.command(st)
        client.command("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, checksum String, "
                       "applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY version")
        client.insert("schema_migrations", [[m.version, m.name, m.checksum] for m in migs],
                      column_names=["version", "name", "checksum"])
        lo = T0 + 7200
        before = one_series(synthetic_rows(300, lo, 110, seed=51), 0)  # two minutes, ~150 values each
        write(client, before)
        assert [m.version for m in migrate(client)] == [22, 23]
        after = one_series(synthetic_rows(300, lo + 60, 110, seed=52), 1000)  # minutes 2 and 3
        write(client, after)
        start = datetime.fromtimestamp(lo, timezone.utc)
        ex, ro, _ = exact_and_rollup(client, start, start + timedelta(minutes=3), 60)
        assert len(ex) == 3
        old = np.array([True, True, False])  # minute 1: before only; 2: both; 3: after only
        assert_sketch_close(ro, ex, old, "cells with rows from before the migration")
        assert not np.allclose(ro.loc[old, "prefill_p50"], ex.loc[old, "prefill_p50"], rtol=1e-9)
        assert_exact(ro, ex, ~old, "a cell written after the migration only")

