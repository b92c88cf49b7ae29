-- latency_exact_view: the exact latency query of `phasemeter latency`, moved here from
-- sql/latency.sql (which now selects from it) so that the CLI and latency_view
-- read one definition:
--   latency_exact_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       abandoned = 'include' | 'exclude')
--
-- Latency percentiles (exact) per model x input bucket x step, for people who
-- think in latency: for ttft_s / tpot_s / queue_s the slow tail is the HIGH end
-- (p90/p99). quantilesExactInclusive == numpy.percentile(method="linear").
-- {abandoned:String}: 'include' (default) or 'exclude' from n and every
-- percentile; abandoned / abandoned_prefill / abandoned_decode count them
-- either way (before / after the first token: ttft_s NULL / not NULL).
CREATE VIEW IF NOT EXISTS latency_exact_view AS
SELECT
    t, model, input_bucket, n,
    ttft_n, tq[1] AS ttft_p50, tq[2] AS ttft_p90, tq[3] AS ttft_p99,
    tpot_n, oq[1] AS tpot_p50, oq[2] AS tpot_p90, oq[3] AS tpot_p99,
    queue_n, qq[1] AS queue_p50, qq[2] AS queue_p90, qq[3] AS queue_p99,
    abandoned, abandoned_prefill, abandoned_decode
FROM
(
    SELECT
        toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
        model,
        input_bucket,
        countIf(keep) AS n,
        countIf(keep AND ttft_s IS NOT NULL) AS ttft_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(ttft_s, keep) AS tq,
        countIf(keep AND tpot_s IS NOT NULL) AS tpot_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(tpot_s, keep) AS oq,
        countIf(keep AND queue_s IS NOT NULL) AS queue_n,
        quantilesExactInclusiveIf(0.5, 0.9, 0.99)(queue_s, keep) AS qq,
        countIf(status = 'abandoned') AS abandoned,
        countIf(status = 'abandoned' AND ttft_s IS NULL) AS abandoned_prefill,
        countIf(status = 'abandoned' AND ttft_s IS NOT NULL) AS abandoned_decode
    FROM
    (
        SELECT ts, model, input_bucket, status, ttft_s, tpot_s, queue_s,
               ({abandoned:String} = 'include' OR status != 'abandoned') AS keep
        FROM generations
        WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
          AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
          AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
          AND throwIf(NOT has(['include', 'exclude'], {abandoned:String}),
                      'abandoned: expected include or exclude') = 0
    )
    GROUP BY t, model, input_bucket
)
ORDER BY model, input_bucket, t;

-- latency_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...]):
-- what `phasemeter latency` prints without --exact/--rollup for the same window,
-- step and filters (abandoned included), by the path the CLI
-- chooses (schema/0023_read_path_rule.sql), with the path each row came from in
-- `path`. The Grafana panels read it, so a panel equals the CLI's default answer.
-- The rule (read_path_view) is a scalar subquery, a constant once evaluated (a
-- WITH at the top applies to both halves of the UNION); the path not taken
-- gets an empty window, so its index reads no granule. On the rollup path the
-- window is whole minutes, [floor(start), ceil(end)) as the CLI aligns it, and
-- the minute tier answers all of it: the CLI also reads the hour, 3-hour and
-- day tiers where the step is whole hours or days (the same counts and exact
-- tails; sketch percentiles equal up to their merge order, docs/analytics.md).
CREATE VIEW IF NOT EXISTS latency_view AS
WITH (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
                                        models = {models:Array(String)}, buckets = {buckets:Array(String)})) AS rollup,
     toStartOfMinute({start:DateTime64(3)}) AS minute_from,
     if(rollup, toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)}),
        minute_from) AS minute_to
SELECT *, 'exact' AS path
FROM latency_exact_view(start = {start:DateTime64(3)}, end = if(rollup, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     abandoned = 'include')
UNION ALL
SELECT *, 'rollup' AS path
FROM latency_rollup_view(start = minute_from, end = minute_to, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     hour_from = minute_to, hour_to = minute_to, hour3_from = minute_to, hour3_to = minute_to,
     day_from = minute_to, day_to = minute_to);
