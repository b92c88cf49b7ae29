-- SLO attainment counts per model x input bucket x step, exact, from raw
-- rows: the definition is the parameterized view slo_exact_view
-- (schema/0026_slo_view.sql), which slo_view (the Grafana panel) reads too.
-- The SLO arrives as bound parameters (a NULL limit is no objective), so
-- ad-hoc thresholds work here; the rollup twin (slo_rollup.sql) only knows
-- declared SLOs. {slo_models}/{slo_buckets} are the SLO's scope,
-- {models}/{buckets} the reader's filter.
SELECT *
FROM slo_exact_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)},
     ttft_max = {ttft_max:Nullable(Float64)}, prefill_min = {prefill_min:Nullable(Float64)},
     tpot_max = {tpot_max:Nullable(Float64)}, decode_min = {decode_min:Nullable(Float64)},
     e2e_max = {e2e_max:Nullable(Float64)}, count_failed = {count_failed:UInt8},
     slo_models = {slo_models:Array(String)}, slo_buckets = {slo_buckets:Array(String)})
ORDER BY model, input_bucket, t
