"""Analytics against a real chDB store filled through migrate + Sink (no Kafka).

One store per module; the rows come from the real derivation path
(phasemeter.demo.rows.synthetic_rows -> stream_jobs.derive.process).
Expected percentiles are computed here with numpy from the stored raw rows.
"""

from __future__ import annotations

import json
from argparse import Namespace
from datetime import datetime, timedelta, timezone

import clickhouse_connect
import numpy as np
import pandas as pd
import pytest
from clock import days_ago

from stores import in_database

from phasemeter.analytics import backfill, fetch, render, run_query, write_chart
from phasemeter.demo.rows import synthetic_rows
from phasemeter.store.migrate import discover, migrate
from phasemeter.query.runner import DirectRunner
from phasemeter.settings import Settings
from phasemeter.stream_jobs.buckets import Bucketer, labels, parse_edges
from phasemeter.stream_jobs.derive import process
from phasemeter.stream_jobs.sink import Sink
from phasemeter.timeparse import ArgError

pytestmark = pytest.mark.integration


def make_sink(client) -> Sink:
    return Sink.over(client, "chdb://test")

N = 30_000
SPAN_S = 8 * 3600
T0 = days_ago(2)   # two days ago, midnight UTC (inside the 90 day raw TTL)
START = datetime.fromtimestamp(T0, timezone.utc)
END = START + timedelta(seconds=SPAN_S + 60)
QS = {"p1": 1, "p5": 5, "p50": 50, "p95": 95, "p99": 99}
LAT_QS = {"p50": 50, "p90": 90, "p99": 99}
# Rollup tolerance (measured, docs/analytics.md): cells whose tail ranks fall
# among the 16 lowest/highest values per minute are exact; the sketch answers
# the rest. Over this data: median rel. error <= 0.5 %, every cell <= 10 %.
ROLLUP_MEDIAN_TOL, ROLLUP_MAX_TOL = 0.005, 0.10


@pytest.fixture(scope="module")
def store_path(tmp_path_factory):
    return tmp_path_factory.mktemp("analytics") / "store"  # chDB: one path per process, databases apart


@pytest.fixture(scope="module")
def store(store_path):
    client = clickhouse_connect.get_client(dsn=f"chdb://{store_path}")
    client.command("CREATE DATABASE IF NOT EXISTS pm")
    client.database = "pm"
    migrate(client)
    rows = synthetic_rows(N, T0, SPAN_S, seed=11)
    sink = make_sink(client)
    batches = [rows[i:i + 4000] for i in range(0, len(rows), 4000)]
    for batch in batches:
        sink.write(batch, [])
    sink.write(batches[2], [])  # a retried identical batch (same token): must not count twice anywhere
    raw = client.query_df("SELECT ts, model, input_bucket, input_tokens, prefill_tps, decode_tps, ttft_s, tpot_s, "
                          "queue_s FROM generations")
    raw["ts"] = raw["ts"].dt.tz_convert("UTC").dt.tz_localize(None) if raw["ts"].dt.tz is not None else raw["ts"]
    yield client, raw, len(rows)
    client.close()


def expected(raw: pd.DataFrame, start, end, step_s: int, metrics: dict, qs: dict, bucket_col="input_bucket"):
    s, e = pd.Timestamp(start).tz_convert(None), pd.Timestamp(end).tz_convert(None)
    w = raw[(raw["ts"] >= s) & (raw["ts"] < e)].copy()
    epoch = (w["ts"] - pd.Timestamp(0)).dt.total_seconds() // step_s * step_s
    w["t"] = pd.to_datetime(epoch, unit="s")
    out = []
    for (t, model, bucket), g in w.groupby(["t", "model", bucket_col], sort=True):
        rec = {"t": t, "model": model, "input_bucket": bucket, "n": len(g)}
        for name, col in metrics.items():
            vals = g[col].dropna().to_numpy(dtype="float64")
            rec[f"{name}_n"] = len(vals)
            for p, q in qs.items():
                rec[f"{name}_{p}"] = float(np.percentile(vals, q, method="linear")) if len(vals) else np.nan
        out.append(rec)
    return pd.DataFrame(out)


def compare(got: pd.DataFrame, want: pd.DataFrame, rtol=1e-9):
    assert len(got) == len(want)
    key = ["t", "model", "input_bucket"]
    got = got.sort_values(key).reset_index(drop=True)
    want = want.sort_values(key).reset_index(drop=True)
    assert (got[key].astype(str).values == want[key].astype(str).values).all()
    for col in want.columns[3:]:
        np.testing.assert_allclose(got[col].to_numpy(dtype="float64"), want[col].to_numpy(dtype="float64"),
                                   rtol=rtol, equal_nan=True, err_msg=col)


BAND_METRICS = {"prefill": "prefill_tps", "decode": "decode_tps"}
LAT_METRICS = {"ttft": "ttft_s", "tpot": "tpot_s", "queue": "queue_s"}


def test_retried_batch_counted_once_in_raw_and_rollup(store):
    client, raw, n = store
    assert len(raw) == n
    for tier in ("minute", "hour", "hour3", "day"):  # every tier's view dedups the retried block
        assert int(client.query(f"SELECT sum(n) FROM generations_{tier}").result_rows[0][0]) == n, tier


@pytest.mark.parametrize("offset_s,length_s,step_s", [
    (0, SPAN_S + 60, 3600), (1234, 5000, 600), (7 * 3600 + 17, 1800, 60), (3 * 3600 + 5, 2 * 3600, 900)])
def test_exact_path_equals_numpy(store, offset_s, length_s, step_s):
    _, raw, _ = store
    start = START + timedelta(seconds=offset_s)
    end = start + timedelta(seconds=length_s)
    df, meta = run_query(DirectRunner(store[0]), start, end, step_s, force="exact")
    assert meta["path"] == "exact"
    compare(df, expected(raw, start, end, step_s, BAND_METRICS, QS))


def test_empty_window(store):
    df, meta = run_query(DirectRunner(store[0]), START - timedelta(days=1), START - timedelta(hours=20), 60,
                         force="exact")
    assert df.empty and list(df.columns)[:4] == ["t", "model", "input_bucket", "n"]
    df, _ = run_query(DirectRunner(store[0]), START - timedelta(days=1), START - timedelta(hours=20), 60,
                      force="rollup")
    assert df.empty


def test_single_row_and_half_open_boundaries(store):
    client, raw, _ = store
    row = raw.sort_values("ts").iloc[len(raw) // 2]
    ts = pd.Timestamp(row["ts"]).tz_localize("UTC").to_pydatetime()
    ms = timedelta(milliseconds=1)
    same_ts = int((raw["ts"] == row["ts"]).sum())
    df, _ = run_query(DirectRunner(client), ts, ts + ms, 60, force="exact")   # [ts, ts+1ms): includes ts
    assert int(df["n"].sum()) == same_ts
    if same_ts == 1:
        assert df["prefill_p1"].iloc[0] == pytest.approx(row["prefill_tps"], rel=1e-12, nan_ok=True)
        assert df["prefill_p99"].iloc[0] == pytest.approx(row["prefill_tps"], rel=1e-12, nan_ok=True)
    df, _ = run_query(DirectRunner(client), ts - timedelta(seconds=5), ts, 60, force="exact")  # end excluded
    before = int(((raw["ts"] >= row["ts"] - pd.Timedelta(seconds=5)) & (raw["ts"] < row["ts"])).sum())
    assert int(df["n"].sum()) == before


def test_rollup_matches_exact_within_measured_tolerance(store):
    client, raw, _ = store
    for step_s in (60, 600, 3600):
        ex, _ = run_query(DirectRunner(client), START, END, step_s, force="exact")
        ro, meta = run_query(DirectRunner(client), START, END, step_s, force="rollup")
        assert meta["path"] == "rollup" and "rollup" in meta["method"]
        assert list(ro.columns) == list(ex.columns)
        assert (ro[["n", "prefill_n", "decode_n"]].values == ex[["n", "prefill_n", "decode_n"]].values).all()
        pcols = [c for c in ex.columns if c[-3:] in ("_p1", "_p5", "p50", "p95", "p99")]
        rel = np.abs(ro[pcols].to_numpy(float) / ex[pcols].to_numpy(float) - 1)
        assert np.nanmedian(rel) <= ROLLUP_MEDIAN_TOL, (step_s, np.nanmedian(rel))
        assert np.nanmax(rel) <= ROLLUP_MAX_TOL, (step_s, np.nanmax(rel))
        # Tail ranks inside the kept 16 lowest/highest -> exact to float precision.
        small = ex["prefill_n"] <= 16
        np.testing.assert_allclose(ro.loc[small, pcols].to_numpy(float), ex.loc[small, pcols].to_numpy(float),
                                   rtol=1e-9)
        np.testing.assert_allclose(ro["prefill_p1"].to_numpy(float)[ex["prefill_n"] <= 1500],
                                   ex["prefill_p1"].to_numpy(float)[ex["prefill_n"] <= 1500], rtol=1e-9)


def test_tiers_answer_as_the_minute_tier_does(store):
    # The hour tier answers whole hours when the step is whole hours, the
    # 3-hour tier whole 3-hour blocks when the step is a multiple of them; the
    # counts and kept extremes are those of the minute tier's merge, only a
    # sketch percentile may differ by the TDigest's merge order.
    client, _, _ = store
    for step_s, kind, tiers in ((3600, "bands", ["hour"]), (7200, "bands", ["hour"]), (3600, "latency", ["hour"]),
                                (10800, "bands", ["hour", "hour3"]), (10800, "latency", ["hour", "hour3"]),
                                (21600, "bands", ["hour", "hour3"])):
        tiered, meta = run_query(DirectRunner(client), START, END, step_s, force="rollup", kind=kind)
        minute, meta_m = run_query(DirectRunner(client), START, END, step_s, force="rollup", kind=kind, tiers=False)
        assert meta["tiers"] == tiers and f"{' + '.join(tiers[::-1])} + minute tiers" in meta["reason"]
        assert meta_m["tiers"] == []
        assert_tier_equal(tiered, minute)


def assert_tier_equal(tiered, minute):
    assert list(tiered.columns) == list(minute.columns) and len(tiered) == len(minute) > 0
    counts = [c for c in minute.columns if c == "n" or c.endswith("_n") or c == "abandoned"]
    assert (tiered[counts].values == minute[counts].values).all()
    pcols = [c for c in minute.columns if c[-3:] in ("_p1", "_p5", "p50", "p90", "p95", "p99")]
    got, want = tiered[pcols].to_numpy(float), minute[pcols].to_numpy(float)
    assert (np.isnan(got) == np.isnan(want)).all()
    rel = np.abs(got / want - 1)
    assert np.nanmax(rel) <= ROLLUP_MAX_TOL and np.nanmedian(rel) <= 1e-3, (np.nanmax(rel), np.nanmedian(rel))
    if "prefill_p1" in pcols:  # exact tails (the kept 16 lowest) are the same numbers
        keep = minute["prefill_n"].to_numpy() <= 1500
        np.testing.assert_allclose(got[keep, pcols.index("prefill_p1")], want[keep, pcols.index("prefill_p1")],
                                   rtol=1e-12)


def test_day_tier_over_days_matches_minutes_and_exact_counts(store):
    client, _, _ = store
    with in_database(client, "pm_days"):
        migrate(client)
        make_sink(client).write(synthetic_rows(8000, T0 - 2 * 86400, 4 * 86400, seed=13), [])
        lo, hi = START - timedelta(days=2, minutes=-7), START + timedelta(days=2)
        for step_s in (86400, 2 * 86400):
            tiered, meta = run_query(DirectRunner(client), lo, hi, step_s, force="rollup")
            minute, _ = run_query(DirectRunner(client), lo, hi, step_s, force="rollup", tiers=False)
            exact, _ = run_query(DirectRunner(client), lo, hi, step_s, force="exact")
            # the first day cell may be partial (skipped), so days from the second on
            assert meta["tiers"] == ["hour", "hour3", "day"], meta["reason"]
            assert_tier_equal(tiered, minute)
            assert (tiered["n"].values == exact["n"].values).all()


def test_backfill_rebuilds_tier_cells_left_partial_by_their_migration(store):
    # Upgrading a store: the hour, 3-hour and day views start mid-hour, so the cell
    # they start in holds only the rows after that. The backfill widens its
    # window to whole hours / days and rebuilds every cell unequal to raw.
    from phasemeter.stream_jobs.ledger import all_tier_mismatches
    client, _, _ = store
    with in_database(client, "pm_upgrade"):
        migrate(client)
        before, after = synthetic_rows(3000, T0 + 600, 1800, seed=15), synthetic_rows(2000, T0 + 2400, 7200, seed=16)
        for i, r in enumerate(after):
            r["src_offset"] = 10_000 + i
        for tier in ("hour", "hour3", "day"):
            client.command(f"DETACH TABLE generations_{tier}_mv")
        make_sink(client).write(before, [])
        for tier in ("hour", "hour3", "day"):
            client.command(f"ATTACH TABLE generations_{tier}_mv")
        make_sink(client).write(after, [])
        days = (START - timedelta(days=1), START + timedelta(days=2))
        assert {b[0] for b in all_tier_mismatches(client, *days)} == {"hour", "hour3", "day"}
        res = backfill(client, START + timedelta(minutes=20), START + timedelta(minutes=50))
        assert res["generations_added"] == 0 and res["tier_cells_rebuilt"]["hour"] > 0
        assert res["tier_cells_rebuilt"]["hour3"] > 0 and res["tier_cells_rebuilt"]["day"] > 0
        assert all_tier_mismatches(client, *days) == []
        assert backfill(client, START, START + timedelta(hours=3))["tier_cells_rebuilt"] == {"hour": 0, "hour3": 0, "day": 0}


def test_auto_path_long_window_uses_rollup(store):
    df, meta = run_query(DirectRunner(store[0]), START, END, 600)
    assert meta["path"] == "rollup" and "window" in meta["reason"]
    df, meta = run_query(DirectRunner(store[0]), START, START + timedelta(hours=2), 60)
    assert meta["path"] == "exact" and "raw rows" in meta["reason"]


@pytest.mark.parametrize("spec", ["0,1024,4096,16384,65536", "litellm"])
def test_rebucketing_equals_python_reference(store, spec):
    client, raw, _ = store
    bucketer = Bucketer(parse_edges(spec))
    ref = raw.assign(new_bucket=[bucketer(int(x)) for x in raw["input_tokens"]])
    df, meta = run_query(DirectRunner(client), START, END, 3600, edges=spec)
    assert meta["path"] == "exact" and meta["rebucketed"]
    assert set(df["input_bucket"]) <= set(labels(parse_edges(spec)))
    compare(df, expected(ref, START, END, 3600, BAND_METRICS, QS, bucket_col="new_bucket"))
    # the bucket filter applies to the NEW labels
    one = labels(parse_edges(spec))[1]
    df1, _ = run_query(DirectRunner(client), START, END, 3600, buckets=[one], edges=spec)
    assert set(df1["input_bucket"]) == {one}
    lat, _ = run_query(DirectRunner(client), START, END, 3600, kind="latency", edges=spec)
    compare(lat, expected(ref, START, END, 3600, LAT_METRICS, LAT_QS, bucket_col="new_bucket"))


def test_latency_exact_and_rollup(store):
    client, raw, _ = store
    ex, meta = run_query(DirectRunner(client), START, END, 1800, kind="latency", force="exact")
    compare(ex, expected(raw, START, END, 1800, LAT_METRICS, LAT_QS))
    ro, meta = run_query(DirectRunner(client), START, END, 1800, kind="latency", force="rollup")
    assert list(ro.columns) == list(ex.columns)
    tcols = [c for c in ex.columns if c.startswith(("ttft_p", "tpot_p"))]
    rel = np.abs(ro[tcols].to_numpy(float) / ex[tcols].to_numpy(float) - 1)
    assert np.nanmedian(rel) <= ROLLUP_MEDIAN_TOL and np.nanmax(rel) <= ROLLUP_MAX_TOL
    np.testing.assert_allclose(ro["ttft_p99"], ex["ttft_p99"], rtol=1e-9)  # top-16 covers p99 up to n~1600


def test_fetch_from_argparse_namespace_and_html(store, tmp_path):
    client, _, _ = store
    args = Namespace(start=START.isoformat(), end=END.isoformat(), step="auto", model=[], bucket=[], via=None,
                     exact=False, rollup=False, buckets=None, latency=False)
    df, meta = fetch(args, Settings(), runner=DirectRunner(client))
    # The auto step by samples: most cells of the answer hold the 100 that p1/p99 need (docs/live.md).
    assert meta["path"] == "rollup" and meta["step_s"] >= 60 and "most cells hold ≥ 100" in meta["step_rule"]
    assert len(df) >= 12 and (df["n"] >= 100).mean() >= 0.5
    finer = fetch(Namespace(**{**vars(args), "step": f"{meta['step_s'] // 2}s"}), Settings(),
                  runner=DirectRunner(client))[0]
    assert (finer["n"] >= 100).mean() < 0.5  # and the next finer step would not give them
    out = write_chart(df, meta, tmp_path / "bands.html")
    text = out.read_text()
    assert "llama-4-maverick" in text and "slow tail p1" in text and "<svg" in text


def test_migration_0003_on_top_of_0001_0002_and_backfill(store):
    client, _, _ = store
    with in_database(client, "pm_old"):
        migs = discover()
        assert [m.version for m in migs][:3] == [1, 2, 3]
        for mig in migs[:2]:  # a store as shipped before this change
            for st in mig.statements():
                client.command(st)
        client.command("CREATE TABLE IF NOT EXISTS schema_migrations (version UInt32, name String, checksum String, "
                       "applied_at DateTime64(3, 'UTC') DEFAULT now64(3)) ENGINE = MergeTree ORDER BY version")
        client.insert("schema_migrations", [[m.version, m.name, m.checksum] for m in migs[:2]],
                      column_names=["version", "name", "checksum"])
        rows = synthetic_rows(3000, T0, 3600, seed=5)
        # Rows as a worker of that time wrote them: only the columns its table
        # had (today's sink writes columns later migrations add, and would wait
        # for them, paused, as a worker does before `phasemeter migrate`).
        old_cols = [r[0] for r in client.query(
            "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = 'generations' "
            "AND default_kind = '' ORDER BY position").result_rows]
        as_db = {"ts": lambda v: datetime.fromtimestamp(v, timezone.utc)}
        client.insert("generations", [[as_db.get(c, lambda v: v)(r.get(c)) for c in old_cols] for r in rows],
                      column_names=old_cols)
        applied = migrate(client)
        assert [m.version for m in applied][0] == 3 and 1 not in [m.version for m in applied]
        assert int(client.query("SELECT count() FROM generations_minute").result_rows[0][0]) == 0  # MV: new rows only
        res = backfill(client, START, START + timedelta(hours=2))
        assert res["generations_added"] == len(rows)
        assert backfill(client, START, START + timedelta(hours=2))["generations_added"] == 0  # idempotent
        more = synthetic_rows(500, T0 + 3600, 600, seed=6)
        for i, r in enumerate(more):
            r["src_offset"] = 10_000 + i
        make_sink(client).write(more, [])  # the MV now sees new inserts
        total = int(client.query("SELECT sum(n) FROM generations_minute").result_rows[0][0])
        assert total == len(rows) + len(more)
        ex, _ = run_query(DirectRunner(client), START, START + timedelta(hours=2), 600, force="exact")
        ro, _ = run_query(DirectRunner(client), START, START + timedelta(hours=2), 600, force="rollup")
        assert (ex["n"].values == ro["n"].values).all()


# Every state column of a rollup tier, finalized, per cell: what the view wrote
# must be what the backfill rebuilds from the same raw rows.
_CELL_STATES = ("SELECT model, input_bucket, minute, sum(n), sum(ok_n), sum(abandoned_n), sum(prefill_n), "
                "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_td), "
                "quantilesTDigestMerge(0.5, 0.9, 0.99)(queue_td), groupArraySortedMerge(16)(decode_lo), "
                "groupArraySortedMerge(16)(decode_hi), groupArraySortedMerge(16)(tpot_hi) "
                "FROM {table:Identifier} GROUP BY model, input_bucket, minute ORDER BY model, input_bucket, minute")


def states(client, table: str = "generations_minute") -> list[tuple]:
    # repr: an empty cell's quantiles are nan, and nan != nan
    return [tuple(repr(v) if isinstance(v, list) else v for v in r)
            for r in client.query(_CELL_STATES, parameters={"table": table}).result_rows]


@pytest.mark.parametrize("tier", ["minute", "hour", "hour3", "day"])
def test_backfill_rebuilds_exactly_the_states_the_view_wrote_and_reads_only_the_window(store, tier):
    from phasemeter.store import rollup
    tier = {t.name: t for t in rollup.TIERS}[tier]
    client, _, _ = store
    db = f"pm_bf{tier.grain_s}"  # not the tier's name: the plan is searched for it below
    with in_database(client, db):
        migrate(client)
        rows = synthetic_rows(6000, T0 - 86400, 3 * 86400, seed=9)  # three daily raw partitions
        make_sink(client).write(rows, [])
        by_view = states(client, tier.table)
        assert sum(r[3] for r in by_view) == len(rows)  # three days of cells
        client.command("TRUNCATE TABLE {table:Identifier}", parameters={"table": tier.table})
        day = datetime.fromtimestamp(T0, timezone.utc).replace(tzinfo=None)
        rollup.backfill(client, day, day + timedelta(days=1), tier=tier)
        one_day = states(client, tier.table)
        assert one_day == [r for r in by_view if day <= r[2] < day + timedelta(days=1)] and one_day
        rollup.backfill(client, day - timedelta(days=2), day + timedelta(days=3), tier=tier)
        rollup.backfill(client, day - timedelta(days=2), day + timedelta(days=3), tier=tier)  # idempotent
        assert states(client, tier.table) == by_view
        # The window filter on `minute` reaches the raw scan: one of three parts.
        select = rollup.backfill_sql(client, tier).split("INSERT INTO {table:Identifier}", 1)[1]
        plan = [r[0].strip() for r in client.query("EXPLAIN indexes = 1 " + select, parameters={
            "table": tier.table, "start": day, "end": day + timedelta(days=1)}).result_rows]
        raw = plan[[i for i, ln in enumerate(plan) if "generations" in ln and tier.name not in ln][0]:]
        assert "Parts: 1/3" in raw, "\n".join(plan)


# --- abandoned generations and prefill variants (database pm_mix, same chDB path) ---

MIX_SPAN_S = 2 * 3600
BUCKETER = Bucketer(parse_edges("default"))


def with_cache(row: dict) -> dict:
    """The same generation sent again with cached_input_tokens, through the real derivation."""
    event = {"schema_version": 1, "kind": "generation", "request_id": row["request_id"], "model": row["model"],
             "t0": row["ts"], "e2e_s": row["e2e_s"], "input_tokens": row["input_tokens"],
             "output_tokens": row["output_tokens"], "ttft_s": row["ttft_s"], "queue_s": row["queue_s"],
             "status": row["status"], "replica": row["replica"], "cached_input_tokens": row["input_tokens"] // 3}
    out = process(json.dumps(event).encode(), BUCKETER, 1_000_000, now=row["ts"] + 86_400)
    assert isinstance(out, dict), out
    return {**out, **{k: row[k] for k in ("src_topic", "src_partition", "src_offset")}}


def abandon(row: dict, phase: str) -> dict:
    """A row as the worker writes it for a generation that never ended (docs/phases.md)."""
    row = {**row, "status": "abandoned", "finish_reason": f"expired_in_{phase}", "output_tokens": 0,
           "decode_tps": None, "tpot_s": None}
    if phase == "prefill":
        row.update(ttft_s=None, prefill_tps=None, prefill_tps_uncached=None, decode_s=None)
    return row


@pytest.fixture(scope="module")
def mixed(store, store_path):
    """Synthetic rows plus: abandoned in prefill / in decode, cached tokens, unknown queue,
    queue == ttft (engine undefined), and the synthetic errors (ttft NULL, not abandoned)."""
    client = clickhouse_connect.get_client(dsn=f"chdb://{store_path}")
    client.command("CREATE DATABASE IF NOT EXISTS pm_mix")
    client.database = "pm_mix"
    migrate(client)
    rows = []
    for i, r in enumerate(synthetic_rows(6000, T0, MIX_SPAN_S, seed=21)):
        if i % 20 == 0:
            r = with_cache(r)
        if i % 25 == 1:
            r["queue_s"] = None
        elif i % 25 == 2 and r["ttft_s"] is not None:
            r["queue_s"] = r["ttft_s"]
        if i % 30 == 3:
            r = abandon(r, "prefill")
        elif i % 30 == 4 and r["ttft_s"] is not None:
            r = abandon(r, "decode")
        rows.append(r)
    make_sink(client).write(rows, [])
    raw = client.query_df("SELECT ts, model, input_bucket, status, finish_reason, input_tokens, queue_s, ttft_s, "
                          "tpot_s, prefill_tps, prefill_tps_uncached, decode_tps FROM generations")
    raw["ts"] = raw["ts"].dt.tz_convert("UTC").dt.tz_localize(None) if raw["ts"].dt.tz is not None else raw["ts"]
    for col in ("queue_s", "ttft_s", "tpot_s", "prefill_tps", "prefill_tps_uncached", "decode_tps"):
        raw[col] = raw[col].astype("float64")
    engine_ok = raw["queue_s"].notna() & raw["ttft_s"].notna() & (raw["ttft_s"] > raw["queue_s"])
    raw["engine"] = np.where(engine_ok, raw["input_tokens"] / (raw["ttft_s"] - raw["queue_s"]), np.nan)
    raw["total"], raw["uncached"] = raw["prefill_tps"], raw["prefill_tps_uncached"]
    yield DirectRunner(client), raw
    client.close()


MIX_END = START + timedelta(seconds=MIX_SPAN_S + 60)


def expected_mixed(raw, start, end, step_s, metrics, qs, exclude=False, bucket_col="input_bucket"):
    """numpy reference: percentiles over kept rows, abandoned counts over all rows of the cell."""
    s, e = pd.Timestamp(start).tz_convert(None), pd.Timestamp(end).tz_convert(None)
    w = raw[(raw["ts"] >= s) & (raw["ts"] < e)].copy()
    w["t"] = pd.to_datetime((w["ts"] - pd.Timestamp(0)).dt.total_seconds() // step_s * step_s, unit="s")
    out = []
    for (t, model, bucket), g in w.groupby(["t", "model", bucket_col], sort=True):
        ab = g[g["status"] == "abandoned"]
        keep = g[g["status"] != "abandoned"] if exclude else g
        rec = {"t": t, "model": model, "input_bucket": bucket, "n": len(keep)}
        for name, col in metrics.items():
            vals = keep[col].dropna().to_numpy(dtype="float64")
            rec[f"{name}_n"] = len(vals)
            for p, q in qs.items():
                rec[f"{name}_{p}"] = float(np.percentile(vals, q, method="linear")) if len(vals) else np.nan
        rec.update(abandoned=len(ab), abandoned_prefill=int(ab["ttft_s"].isna().sum()),
                   abandoned_decode=int(ab["ttft_s"].notna().sum()))
        out.append(rec)
    return pd.DataFrame(out)


def test_mixed_store_has_what_the_tests_need(mixed):
    _, raw = mixed
    ab = raw[raw["status"] == "abandoned"]
    assert (ab["finish_reason"] == "expired_in_prefill").sum() == ab["ttft_s"].isna().sum() > 50
    assert (ab["finish_reason"] == "expired_in_decode").sum() == ab["ttft_s"].notna().sum() > 50
    assert ((raw["status"] == "error") & raw["ttft_s"].isna()).sum() > 10  # NULL ttft but not abandoned
    assert raw["uncached"].notna().sum() > 200 and raw["engine"].isna().sum() > raw["ttft_s"].isna().sum() + 300


@pytest.mark.parametrize("step_s", [600, 3600])
def test_abandoned_included_by_default_and_counted_per_cell(mixed, step_s):
    runner, raw = mixed
    df, meta = run_query(runner, START, MIX_END, step_s, force="exact")
    assert meta["abandoned"] == "include" and meta["abandoned_split"] and (df["prefill_variant"] == "total").all()
    compare(df, expected_mixed(raw, START, MIX_END, step_s, BAND_METRICS, QS))
    assert int(df["n"].sum()) == len(raw)  # no survivorship bias: every generation counted
    assert int(df["abandoned"].sum()) == int((raw["status"] == "abandoned").sum())
    assert (df["abandoned"] == df["abandoned_prefill"] + df["abandoned_decode"]).all()


@pytest.mark.parametrize("step_s", [600, 3600])
def test_abandoned_excluded_with_the_flag(mixed, step_s):
    runner, raw = mixed
    inc, _ = run_query(runner, START, MIX_END, step_s, force="exact")
    exc, meta = run_query(runner, START, MIX_END, step_s, force="exact", abandoned="exclude")
    assert meta["abandoned"] == "exclude"
    compare(exc, expected_mixed(raw, START, MIX_END, step_s, BAND_METRICS, QS, exclude=True))
    # the counts stay; n and the prefill samples lose exactly the abandoned rows
    assert (exc[["abandoned", "abandoned_prefill", "abandoned_decode"]].values
            == inc[["abandoned", "abandoned_prefill", "abandoned_decode"]].values).all()
    assert (inc["n"] - exc["n"] == inc["abandoned"]).all()
    assert (inc["prefill_n"] - exc["prefill_n"] == inc["abandoned_decode"]).all()
    assert (inc["decode_n"] == exc["decode_n"]).all()  # abandoned rows have no decode_tps
    assert not np.allclose(inc["prefill_p50"], exc["prefill_p50"])  # the choice changes the answer


@pytest.mark.parametrize("variant", ["engine", "uncached"])
@pytest.mark.parametrize("abandoned", ["include", "exclude"])
def test_prefill_variants_equal_numpy(mixed, variant, abandoned):
    runner, raw = mixed
    df, meta = run_query(runner, START, MIX_END, 1800, prefill=variant, abandoned=abandoned)
    assert meta["path"] == "exact" and meta["prefill"] == variant and (df["prefill_variant"] == variant).all()
    metrics = {"prefill": variant, "decode": "decode_tps"}
    compare(df, expected_mixed(raw, START, MIX_END, 1800, metrics, QS, exclude=abandoned == "exclude"))
    total, _ = run_query(runner, START, MIX_END, 1800, abandoned=abandoned)
    assert (df["prefill_n"] < total["prefill_n"]).all()  # NULL where the variant is undefined, never 0
    assert np.allclose(df["decode_p1"], total["decode_p1"], equal_nan=True)


def test_rebucketed_variants_equal_numpy(mixed):
    runner, raw = mixed
    ref = raw.assign(new_bucket=[Bucketer(parse_edges("litellm"))(int(x)) for x in raw["input_tokens"]])
    df, meta = run_query(runner, START, MIX_END, 3600, edges="litellm", prefill="engine", abandoned="exclude")
    assert meta["rebucketed"] and (df["prefill_variant"] == "engine").all()
    compare(df, expected_mixed(ref, START, MIX_END, 3600, {"prefill": "engine", "decode": "decode_tps"}, QS,
                               exclude=True, bucket_col="new_bucket"))
    lat, _ = run_query(runner, START, MIX_END, 3600, kind="latency", edges="litellm")
    compare(lat, expected_mixed(ref, START, MIX_END, 3600, LAT_METRICS, LAT_QS, bucket_col="new_bucket"))


@pytest.mark.parametrize("abandoned", ["include", "exclude"])
def test_latency_include_and_exclude(mixed, abandoned):
    runner, raw = mixed
    df, _ = run_query(runner, START, MIX_END, 1800, kind="latency", abandoned=abandoned)
    compare(df, expected_mixed(raw, START, MIX_END, 1800, LAT_METRICS, LAT_QS, exclude=abandoned == "exclude"))


def test_rollup_counts_abandoned_without_phase_split(mixed):
    runner, _ = mixed
    for kind in ("bands", "latency"):
        ex, _ = run_query(runner, START, MIX_END, 3600, kind=kind, force="exact")
        ro, meta = run_query(runner, START, MIX_END, 3600, kind=kind, force="rollup")
        assert meta["path"] == "rollup" and meta["abandoned_split"] is False
        assert list(ro.columns) == list(ex.columns)
        assert (ro[["n", "abandoned"]].values == ex[["n", "abandoned"]].values).all() and ro["abandoned"].sum() > 0
        assert ro["abandoned_prefill"].isna().all() and ro["abandoned_decode"].isna().all()


def test_routing_and_rollup_errors_on_a_real_store(mixed):
    runner, _ = mixed
    long_end = START + timedelta(hours=12)  # > 6 h: the rollup unless a choice needs raw rows
    _, meta = run_query(runner, START, long_end, 3600)
    assert meta["path"] == "rollup"
    for kw, flag in (({"abandoned": "exclude"}, "--abandoned exclude"), ({"prefill": "engine"}, "--prefill engine"),
                     ({"prefill": "uncached"}, "--prefill uncached")):
        df, meta = run_query(runner, START, long_end, 3600, **kw)
        assert meta["path"] == "exact" and flag in meta["reason"] and len(df)
        with pytest.raises(ArgError, match=f"{flag}.*--rollup"):
            run_query(runner, START, long_end, 3600, force="rollup", **kw)
    _, meta = run_query(runner, START, long_end, 3600, kind="latency", abandoned="exclude")
    assert meta["path"] == "exact"


def test_summary_counts_abandoned_by_phase(mixed):
    runner, raw = mixed
    got = runner.df("summary", {"start": START, "end": MIX_END}).set_index(["model", "input_bucket"])
    cells = raw.groupby(["model", "input_bucket"])
    assert len(got) == len(cells) > 1  # a row per cell, no more
    for (model, bucket), g in cells:
        ab = g[g["status"] == "abandoned"]
        row = got.loc[(model, bucket)]
        ok = int((g["status"] == "ok").sum())
        assert (row["n"], row["ok"], row["not_ok"]) == (len(g), ok, len(g) - ok)
        assert (row["abandoned"], row["abandoned_prefill"], row["abandoned_decode"]) == (
            len(ab), ab["ttft_s"].isna().sum(), ab["ttft_s"].notna().sum())
    assert got["abandoned"].sum() == (raw["status"] == "abandoned").sum() > 0


def test_demo_bands_equal_the_exact_path_defaults(mixed):
    from phasemeter.query import queries

    runner, _ = mixed
    params = {"start": START, "end": MIX_END, "step_s": 900, "models": [], "buckets": []}
    old = queries.bands(runner, START, MIX_END, 900)
    new = runner.df("bands_exact", {**params, "abandoned": "include", "prefill": "total"})
    if getattr(new["t"].dt, "tz", None) is not None:  # queries.bands gives naive UTC
        new["t"] = new["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    assert len(old) == len(new) > 0
    pd.testing.assert_frame_equal(old, new[list(old.columns)], check_dtype=False)


@pytest.mark.parametrize("name,extra", [("bands_exact", {"abandoned": "include", "prefill": "fast"}),
                                        ("bands_exact", {"abandoned": "maybe", "prefill": "total"}),
                                        ("latency", {"abandoned": "Exclude"})])
def test_sql_refuses_unknown_variant_values(mixed, name, extra):
    runner, _ = mixed
    params = {"start": START, "end": MIX_END, "step_s": 900, "models": [], "buckets": [], **extra}
    with pytest.raises(Exception, match="expected"):
        runner.df(name, params)


def test_fetch_and_render_with_variant_flags(mixed, tmp_path):
    runner, _ = mixed
    args = Namespace(start=START.isoformat(), end=MIX_END.isoformat(), step="30m", model=[], bucket=[], via=None,
                     exact=False, rollup=False, buckets=None, latency=False, abandoned="exclude", prefill="uncached")
    df, meta = fetch(args, Settings(), runner=runner)
    assert (meta["path"], meta["abandoned"], meta["prefill"]) == ("exact", "exclude", "uncached")
    payload = json.loads(render(df, "json", meta))
    assert payload["prefill"] == "uncached" and payload["rows"][0]["prefill_variant"] == "uncached"
    assert sum(r["abandoned"] for r in payload["rows"]) > 0
    assert "prefill (uncached) tokens/s" in render(df, "table", meta)  # the phase line over "slow p1"
    assert "prefill (uncached) slow p1" in render(df, "table", meta, wide=True)
    text = write_chart(df, meta, tmp_path / "v.html").read_text()
    assert "prefill = uncached" in text and "excluded from (--abandoned exclude)" in text


@pytest.mark.parametrize("path", ["exact", "rollup"])
def test_filters_that_cannot_match_are_errors_that_list_what_exists(store, path):
    client, raw, _ = store
    runner = DirectRunner(client)
    models = sorted(raw["model"].unique())
    with pytest.raises(ArgError) as err:
        run_query(runner, START, END, 3600, models=["llama-4"], force=path)
    assert "--model llama-4: no generations of it in this window" in str(err.value)
    assert all(m in str(err.value) for m in models)
    with pytest.raises(ArgError, match=r"--bucket '8k': not an input bucket; the buckets are 0-512, 512-2k"):
        run_query(runner, START, END, 3600, buckets=["8k"], force=path)
    with pytest.raises(ArgError, match="--model '': a model name cannot be empty"):
        run_query(runner, START, END, 3600, models=[""], force=path)
    # A model that exists, in a window with no data at all: an honest empty answer.
    empty_start = END + timedelta(days=1)
    df, _ = run_query(runner, empty_start, empty_start + timedelta(hours=8), 3600, models=["llama-4"], force=path)
    assert df.empty
