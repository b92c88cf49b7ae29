-- SLO attainment counts per model × input bucket × step, exact, from raw
-- rows (docs/slo.md): the judge (schema/0012) per generation, summed.
-- `counts` is SLO_COUNTS (phasemeter/alerts/slo_rules.py): n, met, failed,
-- then the misses of ttft_s, prefill_tps, tpot_s, decode_tps, e2e_s.
-- The SLO arrives as bound parameters (a NULL limit is no objective), so
-- ad-hoc thresholds work here; the rollup twin (slo_rollup.sql) only knows
-- declared SLOs. {slo_models}/{slo_buckets} are the SLO's scope,
-- {models}/{buckets} the reader's filter.
SELECT
    toStartOfInterval(ts, toIntervalSecond({step_s:UInt32}), 'UTC') AS t,
    model,
    input_bucket,
    sumForEach(phasemeter_slo_judge_v1(status, ttft_s, prefill_tps, tpot_s, decode_tps, e2e_s,
               {ttft_max:Nullable(Float64)}, {prefill_min:Nullable(Float64)}, {tpot_max:Nullable(Float64)},
               {decode_min:Nullable(Float64)}, {e2e_max:Nullable(Float64)}, {count_failed:UInt8})) AS counts
FROM generations
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
  AND (empty({slo_models:Array(String)}) OR has({slo_models:Array(String)}, model))
  AND (empty({slo_buckets:Array(String)}) OR has({slo_buckets:Array(String)}, input_bucket))
GROUP BY t, model, input_bucket
ORDER BY model, input_bucket, t
