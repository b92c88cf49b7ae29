"""The SQL interface's overhead against the same query run in-process.

The query reads a 1M-row table of generation-like columns, built alike in
both stores (1M rows, 7 columns, ~50 MB of Native).

A subprocess serves the interface (stream_jobs/sql_http.py, as the worker
runs it: its own thread pool, a readonly handle per query, the guard's
EXPLAIN AST) over a chDB store; this process runs the same query on its own
chDB handle (one engine per process, so on another folder holding the same
table). Both sides' times are medians of alternating
runs. The 1M-row answer is read to its end by curl (its own time_total), the
one-row answers over a kept-alive http.client connection. Native is streamed
block by block as the engine makes them (sql_engine.STREAMED).

Goals: <= 1.2x on a 1M-row Native result, <= 5 ms added to a one-row answer.

    .venv/bin/python bench/bench_sql_http.py [--runs 9] [--small-runs 200]
"""

from __future__ import annotations

import argparse
import http.client
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from results import figure, record  # noqa: E402

# A table of generation-like rows, made alike in both stores.
TABLE = ("CREATE TABLE IF NOT EXISTS phasemeter.t (request_id String, model LowCardinality(String), "
         "t0 DateTime64(3, 'UTC'), input_tokens UInt32, output_tokens UInt32, ttft_s Float64, e2e_s Float64) "
         "ENGINE = MergeTree ORDER BY t0")
FILL = ("INSERT INTO phasemeter.t SELECT toString(number), ['a', 'b', 'c'][number % 3 + 1], "
        "toDateTime64(1700000000 + number / 100, 3, 'UTC'), number % 30000, number % 900, "
        "(number % 1000) / 1000, (number % 7000) / 1000 FROM numbers(1000000)")
BIG = "SELECT * FROM phasemeter.t ORDER BY t0"
SMALL = "SELECT 1"


def make_store(path: str):
    import chdb

    handle = chdb.connect(path)
    handle.query("CREATE DATABASE IF NOT EXISTS phasemeter")  # the bench's own store, not phasemeter's schema
    handle.query(TABLE)
    if handle.query("SELECT count() FROM phasemeter.t", "TabSeparated").bytes() == b"0\n":
        handle.query(FILL)
    return handle


def serve(data_dir: str, port: int) -> None:
    import asyncio

    from phasemeter.settings import Settings
    from phasemeter.stream_jobs.sql_http import SqlListener, reserve

    settings = Settings.from_env(data_dir=data_dir, sql_port=port)
    (settings.data_path / "store").mkdir(parents=True, exist_ok=True)
    handle = make_store(str(settings.data_path / "store"))  # noqa: F841 (held: the engine stays open)

    async def main():
        sock = reserve(settings)  # bound first, as the worker binds it
        if sock is None:
            raise SystemExit(f"the SQL port {port} could not be bound (logged above)")
        await SqlListener(settings).start(sock)
        print("up", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def curl_seconds(port: int, sql: str) -> float:
    """curl's own time_total for one answer read to the end: a C client, so
    the figure is the interface's, not the reading library's (Python's
    http.client reads a 40 MB chunked answer in 80-180 ms, curl in 40-65)."""
    out = subprocess.run(["curl", "-sS", "-o", "/dev/null", "-w", "%{time_total}", "--data-binary", sql,
                          f"http://127.0.0.1:{port}/?default_format=Native"], capture_output=True, text=True,
                         check=True, timeout=300)
    return float(out.stdout)


def timed(fn, runs: int) -> list[float]:
    out = []
    for _ in range(runs):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--small-runs", type=int, default=200)
    ap.add_argument("--serve", nargs=2, metavar=("DATA_DIR", "PORT"))
    args = ap.parse_args()
    if args.serve:
        serve(args.serve[0], int(args.serve[1]))
        return
    from phasemeter.kafka_local import free_port

    tmp = Path(tempfile.mkdtemp(prefix="bench-sql-"))
    port = free_port()
    server = subprocess.Popen([sys.executable, __file__, "--serve", str(tmp / "served"), str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "up"
        conn = http.client.HTTPConnection("127.0.0.1", port)

        def over_http(sql: str) -> bytes:
            conn.request("POST", "/?" + urllib.parse.urlencode({"default_format": "Native"}), body=sql.encode())
            resp = conn.getresponse()
            body = resp.read()
            assert resp.status == 200, body[:300]
            return body

        local = make_store(str(tmp / "local"))

        def in_process(sql: str) -> bytes:
            return local.query(sql, "Native").bytes()

        assert over_http(BIG) == in_process(BIG)  # the same bytes both ways
        client = "curl" if shutil.which("curl") else "http.client"
        fetch = (lambda sql: curl_seconds(port, sql)) if client == "curl" else (
            lambda sql: timed(lambda: over_http(sql), 1)[0])
        for _ in range(2):
            fetch(BIG), in_process(BIG)
        big_http, big_local = [], []
        for _ in range(args.runs):  # alternating, so drift hits both sides
            big_http.append(fetch(BIG))
            big_local += timed(lambda: in_process(BIG), 1)
        small_http = timed(lambda: over_http(SMALL), args.small_runs)
        small_local = timed(lambda: in_process(SMALL), args.small_runs)
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(tmp, ignore_errors=True)
    bh, bl = statistics.median(big_http), statistics.median(big_local)
    sh, sl = statistics.median(small_http), statistics.median(small_local)
    added_ms = (sh - sl) * 1000
    figures = [
        figure("sql-interface-big", "1M-row Native result through the SQL interface, s (median)", round(bh, 4), "s",
               reference={"what": "the same query in-process on a chDB handle, s", "value": round(bl, 4)},
               target="<= 1.2x", met=bh / bl <= 1.2),
        figure("sql-interface-small", "time added to a one-row answer by the SQL interface, ms (median)",
               round(added_ms, 3), "ms", reference={"what": "SELECT 1 in-process, ms", "value": round(sl * 1000, 3)},
               target="<= 5 ms", met=added_ms <= 5.0),
    ]
    for f in figures:
        print(f"{f['what']}: {f['value']} {f['unit']} (reference {f['reference']['value']}, ratio {f['ratio']}, "
              f"target {f['target']}, met {f['met']})")
    print(record("sql-interface", figures, notes=f"{len(big_http)} runs of the 1M-row answer read by {client}, "
                                                   f"{len(small_http)} one-row answers over a kept-alive "
                                                   "http.client connection; Native, no compression"))


if __name__ == "__main__":
    main()
