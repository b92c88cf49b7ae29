-- The transfer alert family's frame (docs/alerts.md, prefill/decode
-- disaggregated serving) as a parameterized view, so that `phasemeter alerts
-- check/backtest` (sql/transfer_window.sql selects from it) and the Grafana
-- alert rule PhasemeterKvTransferSlow (dashboards/grafana/alerting/) compute
-- the same percentiles: one definition.
--
-- Per model × input bucket and window part (current, baseline), over
-- generations WITH a KV transfer time only (a unified server's rows say
-- nothing about a transfer, so a store without P/D traffic gives no rows):
-- the {q} percentile of kv_transfer_s and of ttft_s (their slow end is HIGH),
-- and the median prefill compute throughput, input_tokens over the TTFT left
-- after the queue and the transfer: did compute slow, or only the move
-- between the pools? quantileExactInclusive == numpy linear.
-- The window parts are assigned exactly as in alert_window_view
-- (schema/0009; tests/unit/test_sql_files.py holds the two to one text).
--   transfer_window_view(q = ..., cur_start = ..., cur_end = ..., lo = ...,
--       base_starts_ms = [...], base_span_ms = ..., models = [...])
CREATE VIEW IF NOT EXISTS transfer_window_view AS
SELECT
    model,
    input_bucket,
    part,
    count() AS kv_n,
    quantileExactInclusive({q:Float64})(kv_transfer_s) AS kv_q,
    count(ttft_s) AS ttft_n,
    quantileExactInclusive({q:Float64})(ttft_s) AS ttft_q,
    quantileExactInclusive(0.5)(compute_tps) AS compute_p50,
    toUnixTimestamp64Milli(max(ts)) - toUnixTimestamp64Milli(min(ts)) AS covered_ms
FROM
(
    SELECT
        model, input_bucket, ts, kv_transfer_s, ttft_s,
        if(ttft_s - ifNull(queue_s, 0) - kv_transfer_s > 0,
           input_tokens / (ttft_s - ifNull(queue_s, 0) - kv_transfer_s), NULL) AS compute_tps,
        multiIf(ts >= {cur_start:DateTime64(3)}, 'current',
                arrayExists(s -> toUnixTimestamp64Milli(ts) >= s
                                 AND toUnixTimestamp64Milli(ts) < s + {base_span_ms:Int64},
                            {base_starts_ms:Array(Int64)}), 'baseline',
                '') AS part
    FROM generations
    WHERE ts >= {lo:DateTime64(3)} AND ts < {cur_end:DateTime64(3)}
      AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
      AND kv_transfer_s IS NOT NULL
)
WHERE part != ''
GROUP BY model, input_bucket, part;
