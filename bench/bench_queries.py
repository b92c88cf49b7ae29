"""Band query latency: exact (raw rows) vs rollup (per-minute states).

Fills a fresh chDB store with N synthetic generations spread over 30 days
(vectorised look-alike of phasemeter.demo.synthetic, inserted into `generations`
so the materialized view maintains the rollup exactly as in production),
then times `phasemeter.analytics.run_query` for a 30-day window at 1-minute
steps and at the auto step, on both paths, and reports peak memory.

chDB has no system.query_log, so memory is the process's peak RSS during the
query (Linux VmHWM, reset before each run via /proc/self/clear_refs); chDB
runs in-process, so that is the query's working set plus Python's frame.

    python bench/bench_queries.py                 # 1M and 10M rows
    python bench/bench_queries.py --rows 100000000 # the 100M target (slow to fill: ~2-4 min)
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import clickhouse_connect

from phasemeter.analytics import run_query
from phasemeter.demo.rows import synthetic_frame
from phasemeter.store.migrate import migrate
from phasemeter.query.runner import DirectRunner

DAYS = 30
CHUNK = 2_000_000


def _peak_reset() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _peak_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def fill(client, rows: int, start: float) -> float:
    t = time.perf_counter()
    done = 0
    while done < rows:
        n = min(CHUNK, rows - done)
        # Each chunk covers the whole 30 days (rows sorted by time inside a chunk).
        df = synthetic_frame(n, start, DAYS * 86400, seed=done + 1, first_offset=done)
        client.insert_df("generations", df)
        done += n
    client.command("OPTIMIZE TABLE generations_minute FINAL")
    return time.perf_counter() - t


def timed(runner, start, end, step_s, force, repeat=3):
    times, peaks, out = [], [], None
    for _ in range(repeat):
        _peak_reset()
        t = time.perf_counter()
        out, meta = run_query(runner, start, end, step_s, force=force)
        times.append(time.perf_counter() - t)
        peaks.append(_peak_mb())
    return statistics.median(times), max(peaks), len(out)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, action="append", help="row counts (repeatable); default 1M and 10M")
    ap.add_argument("--keep", help="store path to reuse/keep (default: temp dir, deleted)")
    args = ap.parse_args()
    sizes = args.rows or [1_000_000, 10_000_000]
    now_day = time.time() // 86400 * 86400
    start_ts = now_day - DAYS * 86400
    start = datetime.fromtimestamp(start_ts, timezone.utc)
    end = start + timedelta(days=DAYS)
    print("| rows | fill s | query | step | path | median s | peak RSS MB | result rows |")
    print("|---:|---:|---|---:|---|---:|---:|---:|")
    for rows in sizes:
        path = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pm-bench-q-"))
        client = clickhouse_connect.get_client(dsn=f"chdb://{path / 'store'}")
        client.command("CREATE DATABASE IF NOT EXISTS bench")
        client.database = "bench"
        migrate(client)
        have = int(client.query("SELECT count() FROM generations").result_rows[0][0])
        fill_s = fill(client, rows - have, start_ts) if have < rows else 0.0
        runner = DirectRunner(client)
        for label, step in (("30 d, 1-min steps", 60), ("30 d, auto step", 10800)):
            for force in ("exact", "rollup"):
                med, peak, n_out = timed(runner, start, end, step, force)
                print(f"| {rows:,} | {fill_s:.0f} | {label} | {step} | {force} | {med:.3f} | {peak:,.0f} | {n_out:,} |",
                      flush=True)
        client.close()
        if not args.keep:
            shutil.rmtree(path, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
