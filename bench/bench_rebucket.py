"""Would one bands query with an optional edges parameter replace the two
(sql/bands_exact.sql for the stored bucket, sql/bands_rebucket.sql for
--buckets)? Builds that candidate from bands_exact.sql, checks it returns the
same frames, and times all three on N rows (interleaved runs, medians).

    python bench/bench_rebucket.py 2000000

Result (docs/analytics.md): same answers; 1.04-1.07x slower on the stored-bucket
path, so the two files stay.
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path

import clickhouse_connect
import pandas as pd

from phasemeter.demo.rows import synthetic_rows
from phasemeter.store.migrate import migrate
from phasemeter.stream_jobs.buckets import labels
from phasemeter.stream_jobs.sink import Sink

SQL = Path(__file__).resolve().parents[1] / "sql"


def candidate() -> str:
    """bands_exact.sql with the bucket chosen by an optional edges parameter."""
    s = (SQL / "bands_exact.sql").read_text()
    s = s.replace("""        model,
        input_bucket,""", """        model,
        if(empty({edges:Array(UInt32)}), stored_bucket,
           arrayElement({labels:Array(String)}, arrayCount(e -> e <= input_tokens, {edges:Array(UInt32)})))
           AS input_bucket,""")
    s = s.replace("ts, model, input_bucket, status, ttft_s, decode_tps,",
                  "ts, model, input_bucket AS stored_bucket, input_tokens, status, ttft_s, decode_tps,")
    s = s.replace("AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))",
                  "AND (NOT empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)})\n"
                  "               OR has({buckets:Array(String)}, input_bucket))")
    s = s.replace("""    GROUP BY t, model, input_bucket
)""", """    GROUP BY t, model, input_bucket
    HAVING empty({edges:Array(UInt32)}) OR empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket)
)""")
    assert s.count("{edges:Array(UInt32)}") == 4, "bands_exact.sql changed: update the candidate"
    return s


def main(n: int) -> None:
    c = clickhouse_connect.get_client(dsn=f"chdb://{tempfile.mkdtemp()}/s")
    c.command("CREATE DATABASE pm"); c.database = "pm"; migrate(c)
    T0 = (time.time() // 86400 - 3) * 86400
    N = n
    sink = Sink.over(c, "chdb://x")
    rows = synthetic_rows(N, T0, 2 * 86400, seed=5)
    for i in range(0, N, 200_000):
        sink.write(rows[i:i+200_000], [])
    del rows
    base = {"start": datetime.fromtimestamp(T0, timezone.utc).replace(tzinfo=None), "end": datetime.fromtimestamp(T0 + 2*86400, timezone.utc).replace(tzinfo=None),
            "step_s": 3600, "models": [], "buckets": [], "abandoned": "include", "prefill": "total"}
    q = {"exact": (SQL / "bands_exact.sql").read_text(), "rebucket": (SQL / "bands_rebucket.sql").read_text(),
         "merged": candidate()}
    E = [0, 1024, 8192]
    cases = {
      "stored: bands_exact": (q["exact"], base),
      "stored: merged": (q["merged"], {**base, "edges": [], "labels": []}),
      "stored+filter: bands_exact": (q["exact"], {**base, "buckets": ["2k-8k"]}),
      "stored+filter: merged": (q["merged"], {**base, "buckets": ["2k-8k"], "edges": [], "labels": []}),
      "rebucket: bands_rebucket": (q["rebucket"], {**base, "edges": E, "labels": labels(tuple(E))}),
      "rebucket: merged": (q["merged"], {**base, "edges": E, "labels": labels(tuple(E))}),
    }
    res = {k: [] for k in cases}
    outs = {}
    for rep in range(7):
        for k, (sql, p) in cases.items():
            t = time.perf_counter(); df = c.query_df(sql, parameters=p); res[k].append(time.perf_counter() - t); outs[k] = df
    for k, v in res.items():
        print(f"{k:32s} median {statistics.median(v)*1000:8.1f} ms  rows {len(outs[k])}")
    pd.testing.assert_frame_equal(outs["stored: bands_exact"], outs["stored: merged"])
    pd.testing.assert_frame_equal(outs["rebucket: bands_rebucket"], outs["rebucket: merged"])
    pd.testing.assert_frame_equal(outs["stored+filter: bands_exact"], outs["stored+filter: merged"])
    print("results equal")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 2_000_000)
