"""Sink throughput: `Sink.write(rows, [])` vs `client.insert_df` of the same prebuilt frame, into chDB.

    python bench/bench_sink.py [--n 200000] [--batch 5000] [--path /abs/dir] [--json OUT]

Rows come from the real pure pipeline (`derive.process` on synthetic event-v1
JSON) with unique src_topic/src_partition/src_offset. Batches alternate:
Sink.write(batch i) into `generations` (Arrow table + dedup token +
insert_arrow), then a plain insert_df of batch i's DataFrame, built before the
clock started, into the same table (same materialized views) as distinct rows. Both run in this process
on one chDB path (a tmp dir unless --path).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402


DIRECT_TOPIC = "bench.direct"


def _timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def derived_rows(n: int, topic: str = "bench.sink", seed: int = 11) -> list[dict]:
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import process

    bucket = Bucketer(parse_edges("default"))
    now = time.time()
    rows = []
    for i, event in enumerate(U.synthetic_events(n, seed=seed)):
        row = process(U.encode_event(event), bucket, 1_000_000, now)
        if isinstance(row, dict):
            row.update(src_topic=topic, src_partition=i % 4, src_offset=i)
            rows.append(row)
    return rows


def build_frame(rows: list[dict]):
    """The reference: the same rows as a pandas DataFrame for `insert_df`."""
    import numpy as np
    import pandas as pd

    from phasemeter.stream_jobs.derive import ROW_COLUMNS

    df = pd.DataFrame.from_records(rows, columns=list(ROW_COLUMNS))
    ms = np.round(df["ts"].to_numpy(dtype="float64") * 1000.0).astype("int64")
    df["ts"] = pd.to_datetime(ms, unit="ms", utc=True)
    return df


def build_arrow(rows: list[dict]):
    """What Sink.write builds before inserting."""
    from phasemeter.stream_jobs.derive import ROW_COLUMNS
    from phasemeter.stream_jobs.sink import _arrow

    return _arrow(rows, ROW_COLUMNS)


def make_sink(client, dsn: str):
    from phasemeter.stream_jobs.sink import Sink

    return Sink.over(client, dsn)


def bounded_write(sink, rows: list[dict], timeout_s: float = 120.0) -> None:
    """Sink.write retries forever while the store refuses; a benchmark must not."""
    import threading

    errors: list[BaseException] = []

    def target():
        try:
            sink.write(rows, [])
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    t.join(timeout_s)
    if t.is_alive():
        raise RuntimeError(f"Sink.write still retrying after {timeout_s:.0f}s: {sink.paused_reason}")
    if errors:
        raise errors[0]


def run(n: int, batch: int, path: Path) -> dict:
    from phasemeter.store.migrate import migrate
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect

    settings = Settings(clickhouse_url=f"chdb://{path}", database="bench_sink", data_dir=str(path))
    client = connect(settings)
    try:
        migrate(client)
        t = time.perf_counter()
        rows = derived_rows(n)
        prep_s = time.perf_counter() - t
        batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
        t = time.perf_counter()
        frame_s = sum(_timed(build_arrow, b) for b in batches)
        # The reference goes into the same table (same materialized views), as
        # distinct rows: another src_topic, so no block is deduplicated away.
        frames = [build_frame([dict(r, src_topic=DIRECT_TOPIC) for r in b]) for b in batches]
        # A second reference: the same frames into a copy of the table without
        # the materialized views that hang off `generations` (what the views cost).
        client.command("CREATE TABLE IF NOT EXISTS generations_plain AS generations")
        views = client.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                             "AND engine = 'MaterializedView'").result_rows
        sink = make_sink(client, settings.store_dsn)
        # Warm-up outside the clock (first inserts pay for setup), on rows counted apart.
        warm = [dict(r, src_topic="warm") for r in rows[:min(100, len(rows))]]
        bounded_write(sink, warm)
        client.insert_df("generations", build_frame([dict(r, src_topic="warm2") for r in warm]))
        client.insert_df("generations_plain", build_frame(warm))
        sink_s = direct_s = plain_s = 0.0
        clock = time.perf_counter
        for b, f in zip(batches, frames):  # alternate, so machine noise hits both alike
            t = clock()
            bounded_write(sink, b)
            sink_s += clock() - t
            t = clock()
            client.insert_df("generations", f)
            direct_s += clock() - t
            t = clock()
            client.insert_df("generations_plain", f)
            plain_s += clock() - t
        stored = int(client.command("SELECT count() FROM generations WHERE src_topic = 'bench.sink'"))
        direct = int(client.command(f"SELECT count() FROM generations WHERE src_topic = '{DIRECT_TOPIC}'"))
    finally:
        client.close()
    m = len(rows)
    return {"rows": m, "batch": batch, "batches": len(batches), "stored": stored, "stored_direct": direct,
            "prep_s": round(prep_s, 3), "frame_s": frame_s,
            "frame_rows_per_s": m / frame_s if frame_s else None,
            "sink_s": sink_s, "sink_rows_per_s": m / sink_s if sink_s else None,
            "views": [v[0] for v in views],
            "plain_s": plain_s, "plain_rows_per_s": m / plain_s if plain_s else None,
            "direct_s": direct_s, "direct_rows_per_s": m / direct_s if direct_s else None,
            "sink_vs_direct": U.ratio(m / sink_s if sink_s else None, m / direct_s if direct_s else None),
            "target_rows_per_s": 200_000,
            "meets_target": bool(sink_s) and m / sink_s >= 200_000}


def render(r: dict) -> str:
    table = U.md_table(
        ["path", "rows", "batch", "seconds", "rows/s", "ratio vs direct insert_df"],
        [["Sink.write(rows, []) (Arrow table + token + insert_arrow)", r["rows"], r["batch"], r["sink_s"],
          r["sink_rows_per_s"], r["sink_vs_direct"] or 0.0],
         ["client.insert_df(prebuilt DataFrame)", r["rows"], r["batch"], r["direct_s"], r["direct_rows_per_s"], 1.0],
         [f"client.insert_df(prebuilt) into a copy without the {len(r['views'])} materialized view(s)",
          r["rows"], r["batch"], r["plain_s"], r["plain_rows_per_s"],
          U.ratio(r["plain_rows_per_s"], r["direct_rows_per_s"]) or 0.0],
         ["(inside Sink.write) building the Arrow table only", r["rows"], r["batch"], r["frame_s"],
          r["frame_rows_per_s"], "-"]])
    verdict = "meets" if r["meets_target"] else "MISSES"
    return (table + f"\n\n**Sink.write: {r['sink_rows_per_s']:,.0f} rows/s** ({verdict} the ≥ 200k rows/s target); "
            f"stored {r['stored']:,} / direct {r['stored_direct']:,} rows; materialized views on "
            f"`generations`: {', '.join(r['views']) or 'none'}.")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000, help="rows")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--path", default="", help="chDB directory (default: a fresh tmp dir, removed after)")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    tmp = None
    path = Path(args.path).resolve() if args.path else Path(tempfile.mkdtemp(prefix="pm-bench-sink-")) / "store"
    if not args.path:
        tmp = path.parent
    try:
        result = run(args.n, args.batch, path)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result["params"] = vars(args)
    print(render(result))
    U.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
