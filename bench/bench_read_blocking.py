"""Does a large read through a worker hold its agents up?

A worker serves reads on the event loop its agents run on (stream_jobs/
web.py). Whatever a read does on that loop, rather than in the executor,
delays every batch by as much. This bench fills (or reuses) a store the way
bench_scale.py does, starts a worker that owns it, and times `GET /health`
(answered on the loop, nothing else) every few milliseconds:

* alone: the reference, in the same run;
* during a day at 1-minute steps through the worker's ClickHouse HTTP
  interface (`sql/bands_rollup.sql` with clickhouse-connect, as Grafana and
  any client read): 28,800 rows from 100M generations;
* during the same day through the CLI (`query bands ... --format csv`,
  which reads the worker's ClickHouse HTTP interface).

The figure is the worst /health latency seen while each read runs (median
over --runs), and its ratio to the reference's worst.

    python bench/bench_read_blocking.py --keep /path/to/store --rows 100000000
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import bench_scale as S  # noqa: E402


def worst_health_latency(url: str, read) -> tuple[float, float]:
    """(worst /health latency in s while `read()` runs, the read's own time)."""
    stop, lat = threading.Event(), []

    def poll():
        while not stop.is_set():
            t = time.perf_counter()
            with urllib.request.urlopen(url + "/health", timeout=30) as resp:
                resp.read()
            lat.append(time.perf_counter() - t)
            time.sleep(0.005)

    poller = threading.Thread(target=poll)
    poller.start()
    time.sleep(0.2)
    t = time.perf_counter()
    read()
    took = time.perf_counter() - t
    time.sleep(0.1)
    stop.set()
    poller.join()
    return max(lat), took


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rows", type=int, default=10_000_000)
    ap.add_argument("--keep", help="store folder to reuse and keep (as bench_scale.py --keep)")
    ap.add_argument("--runs", type=int, default=6)
    args = ap.parse_args()

    from phasemeter.analytics.core import tier_params
    from phasemeter.analytics.paths import tier_plan
    from phasemeter.query.runner import worker_runner
    from phasemeter.settings import Settings

    env = {**os.environ, "PHASEMETER_DATABASE": S.DB}
    env.pop("CLICKHOUSE_URL", None)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pm-bench-block-"))
    store = S.make_store(root, args.rows, time.time() // 86400 * 86400 - S.DAYS * 86400, env)
    end = datetime.fromtimestamp(store["end_ts"], timezone.utc)
    start = end - timedelta(days=1)
    # The minute tier alone: what a 1-minute step reads (tier_plan; naive UTC, as run_query binds them).
    plan = tier_plan(int(start.timestamp()), int(end.timestamp()), 60, {}, use_tiers=False)
    params = {"start": start.replace(tzinfo=None), "end": end.replace(tzinfo=None), "step_s": 60,
              "models": [], "buckets": [], **tier_params(plan)}
    cli = [S.CLI, "query", "bands", "--from", S.iso(start), "--to", S.iso(end), "--step", "1m", "--rollup",
           "--format", "csv", "--data-dir", str(root)]
    print(f"machine: {U.machine_info()}", file=sys.stderr)
    try:
        with S.worker_owning(root, env) as worker:
            runner = worker_runner(Settings.from_env(worker.env))
            rows = len(runner.df("bands_rollup", params))  # warm: the first read is cold
            subprocess.run(cli, env=env, check=True, capture_output=True)
            reads = {
                "nothing (reference)": lambda: time.sleep(1.0),
                "SQL interface, 1 d at 1 min": lambda: runner.df("bands_rollup", params),
                "CLI query bands, 1 d at 1 min (CSV)": lambda: subprocess.run(cli, env=env, check=True,
                                                                             capture_output=True),
            }
            got: dict[str, list[tuple[float, float]]] = {name: [] for name in reads}
            for _ in range(args.runs):  # round-robin: noise hits every read alike
                for name, read in reads.items():
                    got[name].append(worst_health_latency(worker.url, read))
    finally:
        if not args.keep:
            import shutil

            shutil.rmtree(root, ignore_errors=True)
    ref = statistics.median(w for w, _ in got["nothing (reference)"])
    print(f"\n{args.rows:,} generations; a day at 1-minute steps is {rows:,} rows; {args.runs} runs, round-robin\n")
    print("| during | read s (median) | worst /health ms (median) | runs (ms) | × reference |")
    print("|---|---:|---:|---|---:|")
    for name, pairs in got.items():
        worst = statistics.median(w for w, _ in pairs)
        took = "" if name.startswith("nothing") else f"{statistics.median(t for _, t in pairs):.3f}"
        print(f"| {name} | {took} | {worst * 1000:.0f} | {' '.join(str(round(w * 1000)) for w, _ in pairs)} "
              f"| {worst / ref:.1f}× |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
