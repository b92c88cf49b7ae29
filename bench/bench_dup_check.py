"""The duplicate check per batch: today's CRC32 slices against the literal id list it replaced.

    python bench/bench_dup_check.py [--rows 300000] [--ids 2000 20000 30000 40000] [--old-up-to 30000]

Fills a chDB store with `--rows` generations over one hour through the real
pipeline and sink, then asks `ledger.existing_request_ids` about batches of
`--ids` ids (100 of them stored, the rest new, ~40 characters each, as the
emitter's ids are), with the time range of the whole store (the widest scan)
and of 20,000 stored rows. The reference is the statement the check used
before (a literal Array(String) list with IN), run in the same process on the
same store, up to `--old-up-to` ids: past ~20,000 ids it takes tens of seconds.
Medians of `--runs`.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
import uuid
from datetime import datetime, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402

# The statement before this change, kept here only as the reference.
OLD_SQL = """SELECT DISTINCT request_id FROM generations
WHERE src_topic = {topic:String} AND ts BETWEEN {lo:DateTime64(3)} AND {hi:DateTime64(3)}
  AND request_id IN {ids:Array(String)}"""


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--ids", type=int, nargs="+", default=[2_000, 20_000, 30_000, 40_000])
    ap.add_argument("--old-up-to", type=int, default=30_000)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)

    from profile_worker import make_events

    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs import ledger
    from phasemeter.stream_jobs.pipeline import Pipeline
    from phasemeter.stream_jobs.sink import Sink

    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-dup-"))
    settings = Settings(topic="bench.profile", clickhouse_url=f"chdb://{tmp / 'store'}", database="bench_dup",
                        data_dir=str(tmp))
    client = connect(settings)
    migrate(client)
    pipeline = Pipeline(settings, Sink.over(client, settings.store_dsn))
    events = make_events(args.rows, 100)
    t = time.perf_counter()
    for i in range(0, len(events), 200):  # 20,000 generations per write; new ids, so no duplicates
        rows, dead, _, _ = pipeline.split(events[i:i + 200])
        pipeline.sink.write(rows, dead)
    fill_s = time.perf_counter() - t
    lo, hi = client.query("SELECT min(ts), max(ts) FROM generations").result_rows[0]
    nlo, nhi = client.query("SELECT min(ts), max(ts) FROM (SELECT ts FROM generations ORDER BY ts "
                            "LIMIT 20000 OFFSET {o:UInt64})", parameters={"o": args.rows // 3}).result_rows[0]
    stored = [r[0] for r in client.query("SELECT request_id FROM generations LIMIT 100").result_rows]

    def epoch(t: datetime) -> float:
        return t.replace(tzinfo=timezone.utc).timestamp() if t.tzinfo is None else t.timestamp()

    out = []
    for n in args.ids:
        ids = [f"gw-{uuid.uuid4()}-{i}" for i in range(n - len(stored))] + stored
        for span, (a, b) in (("whole store", (lo, hi)), ("20,000 rows", (nlo, nhi))):
            row = {"ids": n, "range": span}
            times = []
            for _ in range(args.runs):
                t = time.perf_counter()
                found, = ledger.existing_request_ids(client, [ledger.Ask(("bench.profile",), ids, epoch(a), epoch(b))])
                times.append(time.perf_counter() - t)
            row["new_s"] = statistics.median(times)
            row["new_found"] = len(found)
            if n <= args.old_up_to:
                times = []
                for _ in range(args.runs if n < 20_000 else 1):
                    t = time.perf_counter()
                    old = {r[0] for r in client.query(OLD_SQL, parameters={
                        "topic": "bench.profile", "ids": ids, "lo": a, "hi": b}).result_rows}
                    times.append(time.perf_counter() - t)
                row["old_s"] = statistics.median(times)
                assert old == found, (len(old), len(found))
            out.append(row)
            print(row, flush=True)
    client.close()
    result = {"rows": args.rows, "fill_s": fill_s, "results": out}
    print(U.md_table(["ids", "time range", "literal list (before) s", "CRC32 slices s", "before ÷ now"],
                     [[r["ids"], r["range"], r.get("old_s"), r["new_s"],
                       U.ratio(r.get("old_s"), r["new_s"])] for r in out]))
    U.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
