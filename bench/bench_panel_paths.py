"""How far a Grafana throughput panel is from what `phasemeter query bands`
prints by default, before and after the panels chose their path by the CLI's
rule (bands_view, schema/0024), and what the rule costs.

A fresh chDB store gets `--rows` synthetic generations over 3 hours (the
demo's traffic model, `phasemeter.demo.rows.synthetic_rows`). In 5-minute
cells (a 3-hour range in Grafana: the CLI's exact path), per cell and
percentile the relative difference to the exact answer:
* the panels before: bands_rollup_view over the minute tier, always;
* the panels now: bands_view.
And the median time (of --runs) of each of the three, interleaved in the same
run: the rule's cost (read_path_view's count, and planning both paths of the
UNION: the path not taken reads no granule but is still planned).

    python bench/bench_panel_paths.py                    # 75,000 rows
    python bench/bench_panel_paths.py --rows 300000 --json out.json
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402

STEP_S = 300
SPAN_S = 3 * 3600
COLS = ("prefill_p1", "prefill_p5", "decode_p1", "decode_p5")


def window(t0: int) -> str:
    return f"start = toDateTime({t0}), end = toDateTime({t0 + SPAN_S}), step_s = {STEP_S}, models = [], buckets = []"


def queries(t0: int) -> dict[str, str]:
    end = f"toDateTime({t0 + SPAN_S})"
    minute_only = ", ".join(f"{tier}_{e} = {end}" for tier in ("hour", "hour3", "day") for e in ("from", "to"))
    cols = "t, model, input_bucket, " + ", ".join(COLS)
    return {"exact": f"SELECT {cols} FROM bands_exact_view({window(t0)}, abandoned = 'include', prefill = 'total')",
            "panel before": f"SELECT {cols} FROM bands_rollup_view({window(t0)}, {minute_only})",
            "panel now": f"SELECT {cols} FROM bands_view({window(t0)})"}


def max_rel_diff(got, exact) -> dict[str, float]:
    m = got.merge(exact, on=["t", "model", "input_bucket"], suffixes=("", "_x"))
    assert len(m) == len(exact), (len(m), len(exact))
    return {c: round(float(np.nanmax(np.abs(m[c] / m[c + "_x"] - 1))) * 100, 4) for c in COLS}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=75_000)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()

    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    import clickhouse_connect

    folder = Path(tempfile.mkdtemp(prefix="pm-bench-panels-"))
    t0 = int(time.time() // 86400 - 1) * 86400
    try:
        client = clickhouse_connect.get_client(dsn=f"chdb://{folder / 'store'}")
        client.command("CREATE DATABASE IF NOT EXISTS pm")
        client.database = "pm"
        migrate(client)
        Sink.over(client, "chdb://bench").write(synthetic_rows(args.rows, t0, SPAN_S, seed=3), [])
        q = queries(t0)
        frames = {name: client.query_df(sql) for name, sql in q.items()}
        diffs = {name: max_rel_diff(frames[name], frames["exact"]) for name in ("panel before", "panel now")}
        times = {name: [] for name in q}
        for _ in range(args.runs):
            for name in times:  # interleaved: the machine's noise hits both
                t = time.perf_counter()
                client.query_df(q[name])
                times[name].append(time.perf_counter() - t)
        client.close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    med = {name: statistics.median(v) for name, v in times.items()}
    result = {"rows": args.rows, "cells": len(frames["exact"]), "step_s": STEP_S,
              "max_rel_diff_percent": diffs, "median_s": med,
              "now_vs_exact": U.ratio(med["panel now"], med["exact"]),
              "now_vs_before": U.ratio(med["panel now"], med["panel before"]), "machine": U.machine_info()}
    print(U.md_table(["panel", *COLS], [[name, *d.values()] for name, d in diffs.items()]))
    print(f"\nmedian s: bands_view {med['panel now']:.3f}, bands_exact_view {med['exact']:.3f}, the panel before "
          f"{med['panel before']:.3f}; {result['cells']} cells, {args.rows:,} rows")
    U.write_json(args.json, result)
    return 0


if __name__ == "__main__":
    sys.exit(main())
