-- Benchmark only (bench/bench_freshness.py): emit -> stored latency of one
-- gateway label's rows. The bench emits with t0 = wall clock at emit time and
-- durations of ~1 ms, so ts (t0 to the ms) is the emit time; ingested_at is
-- set by ClickHouse (DEFAULT now64(3)) when the row is inserted.
SELECT count() AS n,
       quantileExactInclusive(0.5)(lag_ms) AS p50_ms,
       quantileExactInclusive(0.99)(lag_ms) AS p99_ms,
       max(lag_ms) AS max_ms
FROM
(
    SELECT toUnixTimestamp64Milli(ingested_at) - toUnixTimestamp64Milli(ts) AS lag_ms
    FROM generations
    WHERE gateway = {gateway:String}
)
