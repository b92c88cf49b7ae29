-- Burn-rate windows of one SLO ending at {at} (docs/slo.md), exact, per
-- model: every generation is judged once and counted in the SMALLEST window
-- holding it (ring = 1-based index into the ascending {windows_s}); the
-- caller sums the rings into windows (alerts/burn.py windows_from_rings).
-- The largest window bounds the scan (primary key: model, bucket, ts).
SELECT
    model,
    arrayFirstIndex(w -> ts >= {at:DateTime64(3)} - toIntervalMillisecond(w * 1000), {windows_s:Array(Int64)}) AS ring,
    sumForEach(phasemeter_slo_judge_v1(status, ttft_s, prefill_tps, tpot_s, decode_tps, e2e_s,
               {ttft_max:Nullable(Float64)}, {prefill_min:Nullable(Float64)}, {tpot_max:Nullable(Float64)},
               {decode_min:Nullable(Float64)}, {e2e_max:Nullable(Float64)}, {count_failed:UInt8})) AS counts
FROM generations
WHERE ts >= {at:DateTime64(3)} - toIntervalMillisecond(arrayMax({windows_s:Array(Int64)}) * 1000)
  AND ts < {at:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({slo_models:Array(String)}) OR has({slo_models:Array(String)}, model))
  AND (empty({slo_buckets:Array(String)}) OR has({slo_buckets:Array(String)}, input_bucket))
GROUP BY model, ring
ORDER BY model, ring
