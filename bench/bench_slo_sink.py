"""What declared SLOs cost the sink: Sink.write into a store with no SLO
declared vs the same store's schema with SLOs declared, batches alternated.

    python bench/bench_slo_sink.py [--n 200000] [--batch 5000] [--slos 1 2 4] [--json OUT]

One chDB path, one database per case (the same migrations), so both cases
share the process, the machine's noise and the engine. With k SLOs declared
the per-minute SLO view judges each inserted row k times (schema/0013).
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
from bench_sink import bounded_write, derived_rows, make_sink  # noqa: E402

OBJECTIVES = ({"ttft_s": 2.0, "decode_tps": 20.0}, {"ttft_s": 5.0}, {"prefill_tps": 3000.0, "tpot_s": 0.05},
              {"e2e_s": 30.0, "decode_tps": 30.0})


def sloset(k: int):
    from phasemeter.alerts.slo_rules import parse_slos

    return parse_slos({"slo": [{"name": f"s{i}", "objectives": OBJECTIVES[i % len(OBJECTIVES)],
                                "target": 0.95} for i in range(k)]})


def run(n: int, batch: int, counts: list[int], path: Path) -> dict:
    import clickhouse_connect

    from phasemeter.store.migrate import migrate
    from phasemeter.store.slo_defs import register

    client = clickhouse_connect.get_client(dsn=f"chdb://{path}")
    cases = [0] + [k for k in counts if k]
    sinks = {}
    for k in cases:
        client.command(f"CREATE DATABASE IF NOT EXISTS slo{k}")
        c = clickhouse_connect.get_client(dsn=f"chdb://{path}")
        c.database = f"slo{k}"
        migrate(c)
        if k:
            register(c, sloset(k))
        sinks[k] = make_sink(c, f"chdb://{path}")
    rows = derived_rows(n)
    batches = [rows[i:i + batch] for i in range(0, len(rows), batch)]
    for k in cases:  # warm-up outside the clock, on rows counted apart
        bounded_write(sinks[k], [dict(r, src_topic="warm") for r in rows[:100]])
    seconds = {k: 0.0 for k in cases}
    for b in batches:  # alternate: machine noise hits every case alike
        for k in cases:
            t = time.perf_counter()
            bounded_write(sinks[k], b)
            seconds[k] += time.perf_counter() - t
    out = []
    for k in cases:
        c = sinks[k].client
        stored = int(c.command("SELECT count() FROM generations WHERE src_topic = 'bench.sink'"))
        counted = int(c.command("SELECT count() FROM (SELECT slo_id FROM slo_minute GROUP BY slo_id)"))
        out.append({"slos": k, "rows": stored, "seconds": seconds[k], "rows_per_s": stored / seconds[k],
                    "ratio": seconds[0] / seconds[k], "slo_series": counted})
    return {"n": n, "batch": batch, "cases": out}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=200_000)
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--slos", type=int, nargs="+", default=[1, 2, 4])
    ap.add_argument("--json")
    args = ap.parse_args()
    path = Path(tempfile.mkdtemp(prefix="bench-slo-sink-"))
    try:
        t = time.perf_counter()
        result = run(args.n, args.batch, args.slos, path)
    finally:
        shutil.rmtree(path, ignore_errors=True)
    result["machine"] = U.machine_info()
    print(U.md_table(["SLOs declared", "rows", "seconds", "rows/s", "ratio vs none"],
                     [[c["slos"], c["rows"], round(c["seconds"], 3), round(c["rows_per_s"]), round(c["ratio"], 3)]
                      for c in result["cases"]]))
    print(f"\n_({time.perf_counter() - t:.1f} s)_")
    U.write_json(args.json, result)


if __name__ == "__main__":
    main()
