"""What does one definition of the exact bands cost the stored-bucket read?

The exact bands and latencies are one parameterized view each
(schema/0028_bucket_views_and_slo_view.sql), for the stored input bucket (edges = []) and
for buckets recomputed from raw input_tokens (`--buckets`). Before, the
re-bucketing queries were twins of the stored-bucket ones, kept in step by a
test. This builds the stored-bucket views as they were (their bodies are in
schema/0024 and 0025, still applied as history), checks that the one view
returns the same frames, and times both, interleaved, on N synthetic rows:
the stored bucket, with a `--bucket` filter, and the latencies; and the
re-bucketing query with the default edges, which must equal the stored
bucket's answer (the synthetic rows were bucketed with them).

    python bench/bench_rebucket.py 1000000 --reps 9

Wall and CPU time of this process (chDB runs in it) per query, medians; on a
loaded machine the CPU time is the steadier of the two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import clickhouse_connect
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as R  # noqa: E402

from phasemeter.demo.rows import synthetic_rows  # noqa: E402
from phasemeter.store.migrate import migrate  # noqa: E402
from phasemeter.stream_jobs.buckets import PRESETS, labels  # noqa: E402
from phasemeter.stream_jobs.sink import Sink  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]


def view_body(file: str, view: str) -> str:
    text = (ROOT / "schema" / file).read_text()
    return text.split(f"CREATE VIEW IF NOT EXISTS {view} AS\n", 1)[1].split(";\n", 1)[0]


def before(name: str, view: str) -> str:
    """sql/<name>.sql as it read the stored-bucket view of its own (`view`, before 0028)."""
    text = (ROOT / "sql" / f"{name}.sql").read_text()
    out = text.replace(f"{name.replace('latency', 'latency_exact')}_buckets_view", view) \
        .replace("bands_exact_buckets_view", view)
    for tail in (",\n     edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)')",
                 ", edges = CAST([], 'Array(UInt32)'), labels = CAST([], 'Array(String)')"):
        out = out.replace(tail, "")
    assert view in out and "edges" not in out.split("ORDER BY")[0].split("\nSELECT")[-1], out
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("rows", type=int, nargs="?", default=1_000_000)
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    c = clickhouse_connect.get_client(dsn=f"chdb://{tempfile.mkdtemp(prefix='pm-bench-rebucket-')}/s")
    c.command("CREATE DATABASE pm")
    c.database = "pm"
    migrate(c)
    c.command("CREATE VIEW before_bands_view AS " + view_body("0024_bands_view.sql", "bands_exact_view"))
    c.command("CREATE VIEW before_latency_view AS " + view_body("0025_latency_view.sql", "latency_exact_view"))
    t0 = (time.time() // 86400 - 3) * 86400
    sink = Sink.over(c, "chdb://x")
    rows = synthetic_rows(args.rows, t0, 2 * 86400, seed=5)
    for i in range(0, args.rows, 200_000):
        sink.write(rows[i:i + 200_000], [])
    del rows
    utc = timezone.utc
    base = {"start": datetime.fromtimestamp(t0, utc).replace(tzinfo=None),
            "end": datetime.fromtimestamp(t0 + 2 * 86400, utc).replace(tzinfo=None),
            "step_s": 3600, "models": [], "buckets": [], "abandoned": "include"}
    bands = {**base, "prefill": "total"}
    default = {"edges": list(PRESETS["default"]), "labels": labels(PRESETS["default"])}
    sql = {n: (ROOT / "sql" / f"{n}.sql").read_text() for n in ("bands_exact", "latency", "bands_rebucket")}
    cases = {  # name: (before, after, params)
        "stored bucket": (before("bands_exact", "before_bands_view"), sql["bands_exact"], bands),
        "stored bucket, --bucket filter": (before("bands_exact", "before_bands_view"), sql["bands_exact"],
                                           {**bands, "buckets": ["2k-8k"]}),
        "latency, stored bucket": (before("latency", "before_latency_view"), sql["latency"], base),
    }
    wall: dict[str, list[float]] = {}
    cpu: dict[str, list[float]] = {}
    frames: dict[str, pd.DataFrame] = {}
    for _ in range(args.reps):
        for name, (old, new, params) in cases.items():
            for side, text in (("before", old), ("one view", new)):
                w, p = time.perf_counter(), time.process_time()
                frames[f"{name}: {side}"] = c.query_df(text, parameters=params)
                wall.setdefault(f"{name}: {side}", []).append(time.perf_counter() - w)
                cpu.setdefault(f"{name}: {side}", []).append(time.process_time() - p)
    for name in cases:
        pd.testing.assert_frame_equal(frames[f"{name}: before"], frames[f"{name}: one view"])
    again = c.query_df(sql["bands_rebucket"], parameters={**bands, **default})
    pd.testing.assert_frame_equal(again, frames["stored bucket: one view"])
    print("frames equal; the default edges re-bucketed equal the stored bucket")
    figures = []
    for name in cases:
        b, a = (f"{name}: before", f"{name}: one view")
        for kind, got in (("wall", wall), ("CPU", cpu)):
            mb, ma = statistics.median(got[b]), statistics.median(got[a])
            print(f"{name:32s} {kind:4s} before {mb * 1000:7.1f} ms  one view {ma * 1000:7.1f} ms  {ma / mb:.2f}x")
            goal = "rebucket-one-view-" + name.split(",")[0].replace(" ", "-") + ("-filter" if "filter" in name else "")
            figures.append(R.figure(f"{goal}-{kind.lower()}", f"{name}, {args.rows:,} rows, 2 days at 1 h steps, "
                                    f"{kind} median of {args.reps}", ma, "s",
                                    reference={"what": "the stored-bucket view before 0028, same rounds", "value": mb},
                                    target="≤ 1.05× before", met=ma <= 1.05 * mb))
    print("result:", R.record("rebucket-one-view", figures))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
