-- bands_exact_view: the exact bands query of `phasemeter query bands`, moved here from
-- sql/bands_exact.sql (which now selects from it) so that the CLI and bands_view
-- read one definition:
--   bands_exact_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = 'include' | 'exclude', prefill = 'total' | 'engine' | 'uncached')
--
-- Percentile bands per model × input bucket × time step, both phases, exact
-- (the analytics exact path, and phasemeter.query.queries.bands with 'include'/'total').
-- quantilesExactInclusive equals numpy.percentile(values, q, method="linear").
-- For a throughput the slow tail is the LOW end: p1/p5.
-- Nulls (no first token, output_tokens <= 1) are skipped, never counted as 0.
--
-- {abandoned:String}: 'include' (default: no survivorship bias) or 'exclude'
--   (abandoned generations leave n and every percentile; the abandoned*
--   columns still count them, so the reader sees what was left out).
-- {prefill:String}: which prefill throughput the prefill_* columns hold
--   'total'    prefill_tps = input_tokens / ttft_s (includes queue: what users feel)
--   'engine'   input_tokens / (ttft_s - queue_s), NULL when queue_s is NULL or ttft_s <= queue_s
--   'uncached' prefill_tps_uncached (docs/metrics.md)
--   anything else fails (throwIf) instead of silently meaning 'total'.
-- abandoned_prefill / abandoned_decode: abandoned before / after the first
-- token (ttft_s NULL / not NULL, i.e. finish_reason expired_in_prefill / _decode).
CREATE VIEW IF NOT EXISTS bands_exact_view AS
SELECT
    t, model, input_bucket, n,
    prefill_n,
    pq[1] AS prefill_p1, pq[2] AS prefill_p5, pq[3] AS prefill_p50, pq[4] AS prefill_p95, pq[5] AS prefill_p99,
    decode_n,
    dq[1] AS decode_p1, dq[2] AS decode_p5, dq[3] AS decode_p50, dq[4] AS decode_p95, dq[5] AS decode_p99,
    abandoned, abandoned_prefill, abandoned_decode,
    {prefill:String} AS prefill_variant
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        input_bucket,
        countIf(keep) AS n,
        countIf(keep AND prefill_value IS NOT NULL) AS prefill_n,
        quantilesExactInclusiveIf(0.01, 0.05, 0.5, 0.95, 0.99)(prefill_value, keep) AS pq,
        countIf(keep AND decode_tps IS NOT NULL) AS decode_n,
        quantilesExactInclusiveIf(0.01, 0.05, 0.5, 0.95, 0.99)(decode_tps, keep) AS dq,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT
            ts, model, input_bucket, status, ttft_s, decode_tps,
            -- nested if, 'total' first: measured ~10 % faster than multiIf (4M rows)
            if({prefill:String} = 'total', prefill_tps,
               if({prefill:String} = 'uncached', prefill_tps_uncached,
                  if(queue_s IS NULL OR ttft_s IS NULL OR ttft_s <= queue_s, NULL,
                     input_tokens / (ttft_s - queue_s)))) AS prefill_value,
            ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['total', 'engine', 'uncached'], {prefill:String}),
                      'prefill: expected total, engine or uncached') = 0
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, input_bucket
)
ORDER BY model, input_bucket, t;

-- bands_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...]):
-- what `phasemeter query bands` prints without --exact/--rollup for the same window,
-- step and filters (abandoned included, prefill total), by the path the CLI
-- chooses (schema/0023_read_path_rule.sql), with the path each row came from in
-- `path`. The Grafana panels read it, so a panel equals the CLI's default answer.
-- The rule (read_path_view) is a scalar subquery, a constant once evaluated (a
-- WITH at the top applies to both halves of the UNION); the path not taken
-- gets an empty window, so its index reads no granule. On the rollup path the
-- window is whole minutes, [floor(start), ceil(end)) as the CLI aligns it, and
-- the minute tier answers all of it: the CLI also reads the hour, 3-hour and
-- day tiers where the step is whole hours or days (the same counts and exact
-- tails; sketch percentiles equal up to their merge order, docs/analytics.md).
CREATE VIEW IF NOT EXISTS bands_view AS
WITH (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
                                        models = {models:Array(String)}, buckets = {buckets:Array(String)})) AS rollup,
     toStartOfMinute({start:DateTime64(3)}) AS minute_from,
     if(rollup, toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)}),
        minute_from) AS minute_to
SELECT *, 'exact' AS path
FROM bands_exact_view(start = {start:DateTime64(3)}, end = if(rollup, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = 'include', prefill = 'total')
UNION ALL
SELECT *, 'rollup' AS path
FROM bands_rollup_view(start = minute_from, end = minute_to, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = minute_to, hour_to = minute_to, hour3_from = minute_to, hour3_to = minute_to,
     day_from = minute_to, day_to = minute_to);
