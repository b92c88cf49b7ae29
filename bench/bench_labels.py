"""Store size and per-replica query time with 10,000 distinct replica values
against 10, and with the 10,000 bounded to the top K per model
(stream_jobs/labels.py, docs/labels.md).

Three fresh chDB stores get the same synthetic generations
(phasemeter.demo.rows.synthetic_frame, inserted into `generations` so the
materialized views run as in production); only the replica column differs:
10 values, 10,000 values, or the 10,000 through LabelBound(K). Reported per
store: bytes on disk of the database's active parts, and the median time of
a per-model, per-replica TTFT percentile query over the whole window.

    python bench/bench_labels.py                # 500,000 rows, K = 100
    python bench/bench_labels.py --rows 2000000
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import clickhouse_connect
import numpy as np

from phasemeter.demo.rows import synthetic_frame
from phasemeter.store.migrate import migrate
from phasemeter.stream_jobs.labels import LabelBound

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import figure, record  # noqa: E402

SPAN_S = 7 * 86400
PER_REPLICA = ("SELECT model, replica, count(), quantilesExact(0.5, 0.9, 0.99)(ttft_s) FROM generations "
               "WHERE ts >= {lo:DateTime64(3)} AND ts < {hi:DateTime64(3)} GROUP BY model, replica")
DISK = ("SELECT sum(bytes_on_disk) FROM system.parts WHERE database = {db:String} AND active")


def replicas(n_rows: int, distinct: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return np.array([f"vllm-{i:05d}" for i in range(distinct)])[rng.integers(0, distinct, n_rows)]


def bounded(df, k: int) -> np.ndarray:
    bound = LabelBound(k)
    return np.array([bound.value("replica", m, r) for m, r in zip(df["model"], df["replica"])])


def measure(df, repeat: int) -> tuple[int, float, int]:
    path = Path(tempfile.mkdtemp(prefix="pm-bench-labels-"))
    try:
        client = clickhouse_connect.get_client(dsn=f"chdb://{path / 'store'}")
        client.command("CREATE DATABASE IF NOT EXISTS bench")
        client.database = "bench"
        migrate(client)
        client.insert_df("generations", df)
        client.command("OPTIMIZE TABLE generations FINAL")
        size = int(client.query(DISK, parameters={"db": "bench"}).result_rows[0][0])
        params = {"lo": df["ts"].min().to_pydatetime(), "hi": df["ts"].max().to_pydatetime()}
        client.query(PER_REPLICA, parameters=params)  # warm-up, not timed
        times, groups = [], 0
        for _ in range(repeat):
            t = time.perf_counter()
            groups = len(client.query(PER_REPLICA, parameters=params).result_rows)
            times.append(time.perf_counter() - t)
        client.close()
        return size, statistics.median(times), groups
    finally:
        shutil.rmtree(path, ignore_errors=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=500_000)
    ap.add_argument("--k", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    base = synthetic_frame(args.rows, time.time() - SPAN_S - 3600, SPAN_S, seed=11)
    runs = {}
    for name, values in (("10 values", replicas(args.rows, 10, 1)),
                         ("10,000 values", replicas(args.rows, 10_000, 2))):
        runs[name] = measure(base.assign(replica=values), args.repeat)
    flood = base.assign(replica=replicas(args.rows, 10_000, 2))
    runs[f"10,000 values bounded to K={args.k}"] = measure(flood.assign(replica=bounded(flood, args.k)), args.repeat)
    print("| replicas | bytes on disk | per-replica query, s (median) | groups |")
    print("|---|---:|---:|---:|")
    for name, (size, q, groups) in runs.items():
        print(f"| {name} | {size:,} | {q:.4f} | {groups:,} |")
    ten, flood_run, kept = runs["10 values"], runs["10,000 values"], runs[f"10,000 values bounded to K={args.k}"]
    figures = [
        figure("labels-store-size", f"store bytes, {args.rows:,} rows, 10,000 replica values bounded to K={args.k}",
               kept[0], "B", reference={"what": "10 replica values", "value": ten[0]}, target="<= 1.1x",
               met=kept[0] <= 1.1 * ten[0]),
        figure("labels-store-size-unbounded", f"store bytes, {args.rows:,} rows, 10,000 replica values unbounded",
               flood_run[0], "B", reference={"what": "10 replica values", "value": ten[0]},
               target="none: the case the bound prevents"),
        figure("labels-query", f"per-replica TTFT percentiles, s, 10,000 values bounded to K={args.k}",
               round(kept[1], 4), "s", reference={"what": "10 replica values, s", "value": round(ten[1], 4)},
               target="<= 2x", met=kept[1] <= 2 * ten[1]),
        figure("labels-query-unbounded", "per-replica TTFT percentiles, s, 10,000 values unbounded",
               round(flood_run[1], 4), "s", reference={"what": "10 replica values, s", "value": round(ten[1], 4)},
               target="none: the case the bound prevents"),
    ]
    print(record("labels", figures, notes=f"{args.rows:,} synthetic rows over 7 days per store, median of "
                                          f"{args.repeat} queries; groups: 10 values {ten[2]:,}, unbounded "
                                          f"{flood_run[2]:,}, bounded {kept[2]:,}"))


if __name__ == "__main__":
    main()
