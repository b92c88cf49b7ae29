"""Sink throughput against the same store's SQL-side insert rate, measured in one run.

    python bench/bench_sink.py [--n 400000] [--rounds 2] [--batch 5000 --batch 20000]
                               [--try parallel_view_processing=1 ...] [--path /abs/dir] [--json OUT]

The goal (docs/performance/sink.md): Sink.write >= 0.6x the rate of `INSERT INTO generations
SELECT ... FROM numbers(N)` into the same store, which fills every
materialized view as production does. One chDB path, one process, one schema
(the migrations); the rows come from the real pure pipeline (`derive.process`
on synthetic event-v1 JSON) with unique src_topic/src_partition/src_offset.

The rows are cut into --rounds rounds, and a round into slices of the largest
batch size. Each slice is written by every path in an order that rotates from
slice to slice, so the machine's noise and the background merges hit every
path alike; --refs times per round, spread over its slices, the reference
runs first: one SQL-side statement of the round's rows (bench_scale.FILL_SQL,
its rows spread over the same span of time as the sink's, so the views get
as many rows per minute). The paths:
* Sink.write(rows, []) at each --batch (rows -> Arrow -> token -> insert_arrow);
* Sink.write at the first batch size with the --try settings added;
* Sink.write of the same rows as columns (stream_jobs/columnar.py, decoded
  from envelopes of 100 of their events before the clock): what the worker
  hands the sink for a batch of envelopes;
* client.insert_arrow of the same batches, their Arrow tables built before
  the clock started, into a copy of `generations` without the views (with the
  sink's settings): what the insert costs without the views. Sink.write
  minus that minus building the Arrow tables (timed apart) is the views' share;
* the SQL-side statement again, cut to the first batch size: the engine's own
  cost per statement at the sink's insert size.
Each path writes distinct rows (its own src_topic, or its own time range for
the SQL side), so no block is dropped as a duplicate of another path's.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402
import bench_scale  # noqa: E402  (FILL_SQL: the SQL-side fill, defined once there)

GOAL = 0.6  # x the SQL-side rate (docs/performance/sink.md)


def derived_rows(n: int, topic: str = "bench.sink", seed: int = 11, events: list | None = None) -> list[dict]:
    """Rows derived from `n` synthetic events (from `events`, when given, which
    the caller keeps: each call of synthetic_events makes new request_ids)."""
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import process

    bucket = Bucketer(parse_edges("default"))
    now = time.time()
    rows = []
    for i, event in enumerate(events if events is not None else U.synthetic_events(n, seed=seed)):
        row = process(U.encode_event(event), bucket, 1_000_000, now)
        if isinstance(row, dict):
            row.update(src_topic=topic, src_partition=i % 4, src_offset=i)
            rows.append(row)
    return rows


def build_arrow(rows: list[dict]):
    """What Sink.write builds before inserting."""
    from phasemeter.stream_jobs.derive import ROW_COLUMNS
    from phasemeter.stream_jobs.sink import _arrow

    return _arrow(rows, ROW_COLUMNS)


def make_sink(client, dsn: str, extra_settings: dict | None = None):
    from phasemeter.stream_jobs.sink import Sink

    sink = Sink.over(client, dsn)
    if extra_settings:
        sink.insert_settings = {**Sink.insert_settings, **extra_settings}
    return sink


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


def parse_settings(text: str) -> dict:
    """`k=v,k=v` -> {k: v} (values as ClickHouse reads them in a SETTINGS clause)."""
    return dict(kv.split("=", 1) for kv in text.split(",") if kv)


def sql_fill(client, rows: int, start: float, span_s: float) -> None:
    """The SQL-side reference: bench_scale's fill of `rows` rows spread over [start, start + span_s)."""
    params = bench_scale.fill_params(rows, start)
    params["span"] = span_s
    client.command(bench_scale.FILL_SQL, parameters=params)


class Way:
    """One measured way of writing rows: a name, rows per insert, and a callable per slice."""

    def __init__(self, key: str, label: str, batch: int, write):
        self.key, self.label, self.batch, self.write = key, label, batch, write
        self.seconds = 0.0
        self.rows = self.inserts = 0


def run(n: int, batches: list[int], path: Path, rounds: int = 1, tries: list[str] | None = None,
        refs: int = 2) -> dict:
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    tries = tries or []
    settings = Settings(clickhouse_url=f"chdb://{path}", database="bench_sink", data_dir=str(path))
    client = connect(settings)
    try:
        migrate(client)
        client.command("CREATE TABLE IF NOT EXISTS generations_plain AS generations")
        views = [v[0] for v in client.query("SELECT name FROM system.tables WHERE database = currentDatabase() "
                                            "AND engine = 'MaterializedView' ORDER BY name").result_rows]
        t = time.perf_counter()
        events = U.synthetic_events(n, seed=11)
        rows = derived_rows(n, events=events)
        prep_s = time.perf_counter() - t
        # The run holds every row for its whole length, which a worker (one batch
        # in hand) does not: keep the collector from rescanning them on each pass.
        gc.freeze()
        m = len(rows)
        t0, t1 = min(r["ts"] for r in rows), max(r["ts"] for r in rows)
        per_row_s = (t1 - t0) / max(1, m - 1)  # the sink's rows per second of event time
        first = batches[0]
        slice_rows = max(batches)  # every path writes whole batches of each slice
        clock = time.perf_counter

        def sink_path(key, label, batch, sink):
            def write(rs, topic):
                for i in range(0, len(rs), batch):
                    bounded_write(sink, [dict(r, src_topic=topic) for r in rs[i:i + batch]])
            return Way(key, label, batch, write)

        paths = [sink_path(f"sink.{b}", f"Sink.write, batches of {b:,}", b, make_sink(client, settings.store_dsn))
                 for b in batches]
        for text in tries:
            paths.append(sink_path(f"try.{len(paths)}", f"Sink.write, batches of {first:,}, + {text}", first,
                                   make_sink(client, settings.store_dsn, parse_settings(text))))
        # The Arrow tables of the plain inserts are built before the clock starts,
        # and that building is timed apart: the sink's Python share.
        arrow_s = {b: 0.0 for b in batches}

        def plain_path(batch):
            def write(rs, topic):
                from phasemeter.stream_jobs.sink import batch_token

                prepared = []
                for i in range(0, len(rs), batch):
                    part = [dict(r, src_topic=topic) for r in rs[i:i + batch]]
                    t = clock()
                    table = build_arrow(part)
                    arrow_s[batch] += clock() - t
                    token = batch_token("generations", [(r["src_topic"], r["src_partition"], r["src_offset"])
                                                        for r in part])
                    prepared.append((table, token))
                t = clock()
                for table, token in prepared:
                    client.insert_arrow("generations_plain", table,
                                        settings={**Sink.insert_settings, "insert_deduplication_token": token})
                return clock() - t
            return Way(f"plain.{batch}", f"insert_arrow of prebuilt Arrow into a copy without the "
                                           f"{len(views)} views, batches of {batch:,}", batch, write)

        paths += [plain_path(b) for b in batches]

        # The same rows as the worker's envelope path hands them to the sink:
        # columns (stream_jobs/batch_decode.py) decoded from envelopes of 100 of the
        # events they were derived from, built before the clock, as the rows are.
        from types import SimpleNamespace

        from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
        from phasemeter.stream_jobs.batch_decode import decode

        by_rid = {e["request_id"]: e for e in events}
        bucket = Bucketer(parse_edges("default"))

        def columns_path(batch, sink):
            offsets = itertools.count()

            def write(rs, topic):
                prepared = []
                for i in range(0, len(rs), batch):
                    evs = [by_rid[r["request_id"]] for r in rs[i:i + batch]]
                    records = [SimpleNamespace(message=SimpleNamespace(topic=topic, partition=0, offset=next(offsets)),
                                               value=U.envelope(evs[j:j + 100])) for j in range(0, len(evs), 100)]
                    gens = decode(records, bucket, 1 << 30, time.time()).gens
                    assert gens is not None and len(gens) == len(evs), "the events must decode to columns"
                    prepared.append(gens)
                t = clock()
                for gens in prepared:
                    bounded_write(sink, gens)
                return clock() - t
            return Way(f"columns.{batch}", f"Sink.write, batches of {batch:,} as columns (the envelope path)",
                       batch, write)

        paths += [columns_path(b, make_sink(client, settings.store_dsn)) for b in batches]

        # The SQL side at the sink's insert size, over each batch's own span of
        # time (shifted by a fraction of a millisecond: other rows than the reference's).
        def sql_small(rs, topic):
            for i in range(0, len(rs), first):
                k = len(rs[i:i + first])
                sql_fill(client, k, rs[i]["ts"] + 0.0007, k * per_row_s)
        paths.append(Way("sql.small", f"SQL-side INSERT … SELECT FROM numbers({first:,}), one per batch",
                           first, sql_small))
        reference = Way("sql", "SQL-side INSERT … SELECT FROM numbers(rows of the round), the reference", 0, None)

        # Warm-up outside the clock (first inserts pay for setup), on rows counted apart.
        warm = rows[:min(100, m)]
        for p in paths:
            if p.key != "sql.small":
                p.write(warm, f"warm.{p.key}")
        sql_fill(client, len(warm), t0 - 0.0003, len(warm) * per_row_s)

        per_round = -(-m // rounds)
        rotation = itertools.count()
        for r0 in range(0, m, per_round):
            chunk = rows[r0:r0 + per_round]
            starts = list(range(0, len(chunk), slice_rows))
            ref_at = [starts[i * len(starts) // refs] for i in range(refs)]
            for s0 in starts:
                for _ in range(ref_at.count(s0)):
                    # The reference: one statement of the round's rows, over the rows'
                    # own span of time, each statement shifted by its own milliseconds.
                    t = clock()
                    sql_fill(client, len(chunk), chunk[0]["ts"] + 0.001 * (reference.inserts + 1),
                             len(chunk) * per_row_s)
                    reference.seconds += clock() - t
                    reference.rows += len(chunk)
                    reference.inserts += 1
                piece = chunk[s0:s0 + slice_rows]
                k = next(rotation) % len(paths)
                for p in paths[k:] + paths[:k]:
                    t = clock()
                    inside = p.write(piece, p.key)
                    p.seconds += inside if inside is not None else clock() - t
                    p.rows += len(piece)
                    p.inserts += -(-len(piece) // p.batch)
        stored = dict(client.query("SELECT src_topic, count() FROM generations GROUP BY src_topic").result_rows)
        sql_expected = reference.rows + next(p.rows for p in paths if p.key == "sql.small") + len(warm)
        stored_plain = dict(client.query("SELECT src_topic, count() FROM generations_plain "
                                         "GROUP BY src_topic").result_rows)
    finally:
        client.close()

    ref_rate = reference.rows / reference.seconds if reference.seconds else None
    out = []
    for p in [reference] + paths:
        rate = p.rows / p.seconds if p.seconds else None
        have = stored.get(p.key, stored_plain.get(p.key)) if p.key != "sql" and not p.key.startswith("sql.") else None
        out.append({"key": p.key, "path": p.label, "batch": p.batch or per_round, "rows": p.rows,
                    "inserts": p.inserts, "seconds": p.seconds, "rows_per_s": rate,
                    "vs_sql": U.ratio(rate, ref_rate), "stored": have})
    by = {x["key"]: x for x in out}
    split = {}
    for b in batches:
        s, pl, a = by[f"sink.{b}"]["seconds"], by[f"plain.{b}"]["seconds"], arrow_s[b]
        split[b] = {"sink_s": s, "arrow_s": a, "insert_s": pl, "views_s": max(0.0, s - a - pl),
                    "arrow_share": a / s if s else None, "insert_share": pl / s if s else None,
                    "views_share": max(0.0, s - a - pl) / s if s else None}
    return {"rows": m, "rounds": rounds, "rows_per_round": per_round, "batches": batches, "tries": tries,
            "views": views, "prep_s": round(prep_s, 3), "paths": out, "split": split,
            "sql_rows_per_s": ref_rate, "goal": GOAL, "refs_per_round": refs,
            "sql_stored": stored.get("bench", 0), "sql_expected": sql_expected,
            "meets": {b: bool(by[f"sink.{b}"]["vs_sql"] and by[f"sink.{b}"]["vs_sql"] >= GOAL) for b in batches},
            "meets_columns": {b: bool(by[f"columns.{b}"]["vs_sql"] and by[f"columns.{b}"]["vs_sql"] >= GOAL)
                              for b in batches}}


def render(r: dict) -> str:
    table = U.md_table(
        ["path", "rows", "rows per insert", "inserts", "seconds", "rows/s", "× SQL-side", "rows stored"],
        [[p["path"], p["rows"], p["batch"], p["inserts"], p["seconds"], p["rows_per_s"] or 0.0,
          p["vs_sql"] or 0.0, "-" if p["stored"] is None else f"{p['stored']:,}"] for p in r["paths"]])
    split = U.md_table(
        ["Sink.write, batches of", "seconds", "building Arrow", "insert without views", "views (the rest)"],
        [[f"{b:,}", s["sink_s"], f"{s['arrow_s']:.2f} s ({s['arrow_share']:.0%})",
          f"{s['insert_s']:.2f} s ({s['insert_share']:.0%})", f"{s['views_s']:.2f} s ({s['views_share']:.0%})"]
         for b, s in r["split"].items()])
    verdicts = "; ".join(f"batches of {b:,}: {next(p['vs_sql'] for p in r['paths'] if p['key'] == f'sink.{b}')}× "
                         f"({'meets' if ok else 'MISSES'})" for b, ok in r["meets"].items())
    as_columns = "; ".join(
        f"batches of {b:,}: {next(p['vs_sql'] for p in r['paths'] if p['key'] == f'columns.{b}')}× "
        f"({'meets' if ok else 'MISSES'})" for b, ok in r.get("meets_columns", {}).items())
    return (table + "\n\n" + split +
            f"\n\n**Sink.write ÷ SQL-side ({r['sql_rows_per_s']:,.0f} rows/s) in the same run: {verdicts}; "
            f"as columns, {as_columns}** "
            f"against the goal ≥ {r['goal']}×. {r['rounds']} round(s) of {r['rows_per_round']:,} rows, "
            f"{r['refs_per_round']} SQL-side statement(s) per round; SQL-side rows stored "
            f"{r['sql_stored']:,} of {r['sql_expected']:,}; "
            f"materialized views on `generations`: {', '.join(r['views']) or 'none'}.")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400_000, help="rows written by each path")
    ap.add_argument("--rounds", type=int, default=2, help="rounds of n / rounds rows each")
    ap.add_argument("--refs", type=int, default=2, help="SQL-side statements per round (each of the round's rows)")
    ap.add_argument("--batch", type=int, action="append", help="Sink.write batch sizes (default 5000 and 20000)")
    ap.add_argument("--try", dest="tries", action="append", default=[], metavar="K=V[,K=V]",
                    help="insert settings to add to the sink's, compared at the first batch size (repeatable)")
    ap.add_argument("--path", default="", help="chDB directory (default: a fresh tmp dir, removed after)")
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    batches = args.batch or [5000, 20000]
    tmp = None
    path = Path(args.path).resolve() if args.path else Path(tempfile.mkdtemp(prefix="pm-bench-sink-")) / "store"
    if not args.path:
        tmp = path.parent
    try:
        result = run(args.n, batches, path, args.rounds, args.tries, args.refs)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    result["params"] = vars(args)
    print(render(result))
    U.write_json(args.json, result)
    print(f"result: {R.record('sink', figures(result))}")
    return result


def figures(result: dict) -> list[dict]:
    """Sink.write fed columns (the worker's path), per insert size, beside the SQL-side rate of the same run."""
    by = {p["key"]: p for p in result["paths"]}
    return [R.figure(f"sink-{b}", f"Sink.write of columns, inserts of {b:,} rows", by[f"columns.{b}"]["rows_per_s"],
                     "rows/s", reference={"what": "the store's SQL-side insert rate, same run",
                                          "value": result["sql_rows_per_s"]},
                     target=f"≥ {GOAL}× the SQL-side insert rate", met=result["meets_columns"][b])
            for b in result["batches"] if f"columns.{b}" in by]


if __name__ == "__main__":
    main()
