"""Where the rollup's time goes on a bench_scale store (docs/performance/queries.md).

In-process on a store kept by `bench/bench_scale.py --rows N --keep DIR`, medians of 5:
* 1 day at 1-minute steps merged from `generations_minute` and from a copy of it
  with 1024-row granules (the minute tier's granule size is fixed at creation),
  and split into what each kind of state costs to read and to merge;
* 30 days at 3 h steps on the minute and on the hour tier, split into the counts,
  the two TDigest merges and the four 16-value array merges.

    python bench/bench_scale.py --rows 100000000 --keep /tmp/s100
    python bench/profile_tiers.py /tmp/s100

Writes to the store: it adds the table `minute_g1024` and runs OPTIMIZE FINAL on
the minute tier (delete the folder afterwards).
"""

from __future__ import annotations

import statistics
import sys
import time
from datetime import datetime, timedelta, timezone

from bench_scale import data_end_ts  # the script's own folder is on sys.path

MERGE_DAY = (
    "SELECT toStartOfInterval(minute, toIntervalSecond(60), 'UTC') AS t, model, input_bucket, sum(n), "
    "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_td), "
    "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(decode_td), groupArraySortedMerge(16)(prefill_lo), "
    "groupArraySortedMerge(16)(prefill_hi), groupArraySortedMerge(16)(decode_lo), groupArraySortedMerge(16)(decode_hi) "
    "FROM {table:Identifier} WHERE minute >= {s:DateTime} AND minute < {e:DateTime} GROUP BY t, model, input_bucket")
_BY_3H = ("FROM {table:Identifier} WHERE minute >= {s:DateTime} AND minute < {e:DateTime} "
          "GROUP BY toStartOfInterval(minute, toIntervalSecond(10800), 'UTC') AS t, model, input_bucket")
# The 1-day answer's cost per kind of state, each read once per cell: the
# counts alone, the two TDigest columns only deserialized (byteSize reads each
# state), and each family merged per cell as the view does.
_DAY = "FROM {table:Identifier} WHERE minute >= {s:DateTime} AND minute < {e:DateTime}"
_BY_MINUTE = _DAY + " GROUP BY minute, model, input_bucket"
DAY_PARTS = {
    "sum(n) only": "SELECT minute, model, input_bucket, sum(n) " + _BY_MINUTE,
    "2 TDigest columns read (byteSize), no merge": "SELECT sum(byteSize(prefill_td)), sum(byteSize(decode_td)) " + _DAY,
    "4 array columns read (byteSize), no merge": "SELECT sum(byteSize(prefill_lo)), sum(byteSize(prefill_hi)), "
                                                 "sum(byteSize(decode_lo)), sum(byteSize(decode_hi)) " + _DAY,
    "2 TDigest merges": "SELECT minute, model, input_bucket, "
                        "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_td), "
                        "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(decode_td) " + _BY_MINUTE,
    "4 groupArraySorted(16) merges": "SELECT minute, model, input_bucket, groupArraySortedMerge(16)(prefill_lo), "
                                     "groupArraySortedMerge(16)(prefill_hi), groupArraySortedMerge(16)(decode_lo), "
                                     "groupArraySortedMerge(16)(decode_hi) " + _BY_MINUTE,
}
PARTS = {
    "sum(n) only": "SELECT t, model, input_bucket, sum(n) " + _BY_3H,
    "2 TDigest merges": "SELECT t, model, input_bucket, quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_td), "
                        "quantilesTDigestMerge(0.01, 0.05, 0.5, 0.95, 0.99)(decode_td) " + _BY_3H,
    "4 groupArraySorted(16) merges": "SELECT t, model, input_bucket, groupArraySortedMerge(16)(prefill_lo), "
                                     "groupArraySortedMerge(16)(prefill_hi), groupArraySortedMerge(16)(decode_lo), "
                                     "groupArraySortedMerge(16)(decode_hi) " + _BY_3H,
}


def timed(client, label: str, sql: str, params: dict, n: int = 5) -> None:
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        rows = client.query(sql, parameters=params).result_rows
        ts.append(time.perf_counter() - t)
    print(f"| {label} | {statistics.median(ts):.3f} | {len(rows):,} |", flush=True)


def main() -> int:
    import clickhouse_connect

    client = clickhouse_connect.get_client(dsn=f"chdb://{sys.argv[1]}/store")
    client.database = "phasemeter"
    end = datetime.fromtimestamp(data_end_ts(client), timezone.utc).replace(tzinfo=None)
    if not client.command("EXISTS TABLE minute_g1024"):
        client.command("CREATE TABLE minute_g1024 AS generations_minute ENGINE = AggregatingMergeTree "
                       "PARTITION BY toYYYYMM(minute) ORDER BY (model, input_bucket, minute) "
                       "SETTINGS index_granularity = 1024")
        client.command("INSERT INTO minute_g1024 SELECT * FROM generations_minute")
        client.command("OPTIMIZE TABLE minute_g1024 FINAL")
        client.command("OPTIMIZE TABLE generations_minute FINAL")  # the same parts for both
    print("| query (in-process, median of 5) | s | rows |\n|---|---:|---:|")
    for table in ("generations_minute", "minute_g1024"):
        timed(client, f"1 d at 1 min from {table}", MERGE_DAY,
              {"table": table, "s": end - timedelta(days=1), "e": end})
    for label, sql in DAY_PARTS.items():
        timed(client, f"1 d at 1 min from generations_minute: {label}", sql,
              {"table": "generations_minute", "s": end - timedelta(days=1), "e": end})
    for table in ("generations_minute", "generations_hour"):
        for label, sql in PARTS.items():
            timed(client, f"30 d at 3 h from {table}: {label}", sql,
                  {"table": table, "s": end - timedelta(days=30), "e": end})
    for row in client.query("SELECT table, sum(rows), round(sum(data_uncompressed_bytes) / sum(rows)) "
                            "FROM system.parts WHERE active AND database = currentDatabase() "
                            "GROUP BY table ORDER BY table").result_rows:
        print(f"{row[0]}: {row[1]:,} rows, {row[2]:,.0f} bytes per row uncompressed")
    client.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
