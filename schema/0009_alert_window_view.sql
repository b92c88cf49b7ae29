-- The alert evaluation query as a parameterized view, so that `phasemeter
-- alerts check/backtest` (sql/alert_window.sql selects from it) and the Grafana
-- alert rules (dashboards/grafana/alerting/) compute the same percentiles.
--
-- Alert evaluation: per model × input bucket, the current window and the
-- baseline window(s), both phases at once (the other phase's change and the
-- queue are the evidence of a firing alert, so they come for free: the queue's
-- p95, its share of TTFT, and engine prefill = input_tokens / (ttft_s - queue_s)).
-- Exact percentiles: quantileExactInclusive == numpy.percentile(method="linear").
-- The level {q} is a bound Float64 (p5 -> 0.05): the slow tail of a throughput.
-- Nulls (errors: no first token; output_tokens <= 1: no decode) are skipped,
-- so every status is kept: a failed request has no throughput to count.
-- Baseline spans are [s, s + base_span_ms) for s in base_starts_ms (epoch ms):
-- one span for "previous", one per day for "same_hour". {lo} is the earliest
-- baseline start and only bounds the scan (primary key: model, bucket, ts).
CREATE VIEW IF NOT EXISTS alert_window_view AS
SELECT
    model,
    input_bucket,
    part,
    count() AS n,
    count(prefill_tps) AS prefill_n,
    quantileExactInclusive({q:Float64})(prefill_tps) AS prefill_q,
    count(decode_tps) AS decode_n,
    quantileExactInclusive({q:Float64})(decode_tps) AS decode_q,
    count(queue_s) AS queue_n,
    quantileExactInclusive(0.95)(queue_s) AS queue_p95,
    -- The queue's share of TTFT (over generations that report both): a queue
    -- that grows 4x but stays 2 % of TTFT is not why prefill got slow.
    -- Summed as integer microseconds: a float sum depends on the order the
    -- threads merge in, so the same data gave shares differing in the last
    -- digits between two runs; an integer sum is exact in any order.
    sumIf(toUInt64(round(queue_s * 1e6)), isNotNull(queue_s) AND isNotNull(ttft_s))
        / nullIf(sumIf(toUInt64(round(ttft_s * 1e6)), isNotNull(queue_s) AND isNotNull(ttft_s)), 0) AS queue_share,
    -- Engine prefill (queue excluded) at the same level: did compute slow down?
    quantileExactInclusive({q:Float64})(engine_tps) AS engine_q,
    -- The span the data really covers: a "previous 24h" baseline with 40
    -- minutes of history must say so.
    toUnixTimestamp64Milli(max(ts)) - toUnixTimestamp64Milli(min(ts)) AS covered_ms
FROM
(
    SELECT
        model, input_bucket, ts, prefill_tps, decode_tps, queue_s, ttft_s,
        if(ttft_s > queue_s, input_tokens / (ttft_s - queue_s), NULL) AS engine_tps,
        multiIf(ts >= {cur_start:DateTime64(3)}, 'current',
                arrayExists(s -> toUnixTimestamp64Milli(ts) >= s
                                 AND toUnixTimestamp64Milli(ts) < s + {base_span_ms:Int64},
                            {base_starts_ms:Array(Int64)}), 'baseline',
                '') AS part
    FROM generations
    WHERE ts >= {lo:DateTime64(3)} AND ts < {cur_end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
)
WHERE part != ''
GROUP BY model, input_bucket, part
ORDER BY model, input_bucket, part;
