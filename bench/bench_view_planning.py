"""The Grafana views' fixed cost: bands_view, latency_view and slo_view on an
empty chDB store, before schema/0028 and with it, interleaved in one process.

An empty store isolates what each query costs before it reads a row: parsing,
expanding the parameterized views and planning. schema/0028 bounds the rollup
half's window by constants, so the rule's scalar subquery (read_path_view) is
no longer expanded into every tier bound. Two databases in one store (chDB
opens one path per process): one migrated up to 0026, one fully.

    python bench/bench_view_planning.py --reps 11
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

import clickhouse_connect

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as R  # noqa: E402

import phasemeter.store.migrate as M  # noqa: E402

WINDOW = ("start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32}, "
          "models = {models:Array(String)}, buckets = {buckets:Array(String)}")
VIEWS = {"bands_view": f"SELECT * FROM bands_view({WINDOW})",
         "latency_view": f"SELECT * FROM latency_view({WINDOW})",
         "slo_view": f"SELECT * FROM slo_view({WINDOW}, slo = 'chat')"}


def database(client, name: str, upto: int | None) -> None:
    """`name` migrated up to version `upto` (None: every migration), with one SLO declared."""
    everything = M.discover
    if upto is not None:
        M.discover = lambda: [m for m in everything() if m.version <= upto]
    try:
        client.command(f"CREATE DATABASE {name}")
        client.database = name
        M.migrate(client)
    finally:
        M.discover = everything
    client.command("INSERT INTO slo_definitions (name, slo_id, registered_at, count_failed, target) "
                   "VALUES ('chat', 1, now64(3) - 86400, 1, 0.99)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=11)
    args = ap.parse_args()
    client = clickhouse_connect.get_client(dsn=f"chdb://{tempfile.mkdtemp(prefix='pm-bench-plan-')}/s")
    sides = {"before 0028": ("pm_before", 26), "with 0028": ("pm_now", None)}
    for name, upto in sides.values():
        database(client, name, upto)
    t = datetime(2026, 1, 1)
    params = {"start": t, "end": t, "step_s": 3600, "models": [], "buckets": []}
    times: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.reps):
        for view, sql in VIEWS.items():
            for side, (name, _) in sides.items():
                client.database = name
                s = time.perf_counter()
                client.query(sql, parameters=params)
                times.setdefault((view, side), []).append(time.perf_counter() - s)
    figures = []
    for view in VIEWS:
        before, now = (statistics.median(times[(view, side)]) for side in sides)
        print(f"{view:14s} before {before * 1000:7.1f} ms  with 0028 {now * 1000:7.1f} ms  {now / before:.2f}x")
        figures.append(R.figure(f"view-planning-{view.replace('_', '-')}",
                                f"`{view}` on an empty store (fixed cost: parse, expand, plan), median of "
                                f"{args.reps}", now, "s",
                                reference={"what": "the same view before schema/0028, same rounds", "value": before},
                                target="≤ 1.0× before", met=now <= before))
    print("result:", R.record("view-planning", figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
