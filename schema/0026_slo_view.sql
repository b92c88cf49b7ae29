-- The SLO attainment counts by the path the CLI chooses, for Grafana: the rule
-- of schema/0023 and, as `phasemeter slo` also requires, the SLO counted per
-- minute since before the window (else the raw rows answer).
--
-- phasemeter_slo_covered_from_v1(registered_at): the first minute from which a
-- declared SLO's per-minute counts are complete: the first whole minute after
-- its registration, plus one minute for gateway clocks running ahead of the
-- store's (a row stamped after the registration but inserted before it would be
-- missing from its minute). Moved here from phasemeter/store/slo_defs.py, so
-- that the CLI (sql/slo_registered.sql) and slo_view decide alike.
CREATE FUNCTION IF NOT EXISTS phasemeter_slo_covered_from_v1 AS (registered_at) ->
    toStartOfMinute(registered_at) + toIntervalMinute(1 + (toStartOfMinute(registered_at) < registered_at));

-- slo_exact_view: the exact query of `phasemeter slo`, moved here from
-- sql/slo_exact.sql (which now selects from it) so that the CLI and slo_view
-- read one definition:
--   slo_exact_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...],
--       ttft_max = ..., prefill_min = ..., tpot_max = ..., decode_min = ..., e2e_max = ...,
--       count_failed = 0 | 1, slo_models = [...], slo_buckets = [...])
--
-- SLO attainment counts per model × input bucket × step, exact, from raw
-- rows (docs/slo.md): the judge (schema/0012) per generation, summed.
-- `counts` is SLO_COUNTS (phasemeter/alerts/slo_rules.py): n, met, failed,
-- then the misses of ttft_s, prefill_tps, tpot_s, decode_tps, e2e_s.
-- The SLO arrives as bound parameters (a NULL limit is no objective), so
-- ad-hoc thresholds work here; the rollup twin (slo_rollup.sql) only knows
-- declared SLOs. {slo_models}/{slo_buckets} are the SLO's scope,
-- {models}/{buckets} the reader's filter.
CREATE VIEW IF NOT EXISTS slo_exact_view AS
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
ORDER BY model, input_bucket, t;

-- slo_view(start = ..., end = ..., step_s = ..., slo = 'name', models = [...], buckets = [...]):
-- the counts `phasemeter slo --slo name --step step_s` reads without
-- --exact/--rollup, for the SLO of that name as the worker last declared it
-- (slo_definitions), on the path the CLI takes; `path` says which. The rule
-- (read_path_view) and the definition are scalar subqueries, constants once
-- evaluated (a WITH at the top applies to both halves of the UNION); the path
-- not taken gets an empty window, so its index reads no granule. On the
-- rollup path the window is whole minutes, [floor(start), ceil(end)), as the
-- CLI aligns it. counts: as slo_rollup_view's.
CREATE VIEW IF NOT EXISTS slo_view AS
WITH (SELECT tuple(slo_id, ttft_max, prefill_min, tpot_max, decode_min, e2e_max, count_failed, models, buckets)
      FROM slo_definitions WHERE name = {slo:String} ORDER BY registered_at DESC LIMIT 1) AS d,
     (SELECT phasemeter_slo_covered_from_v1(min(registered_at)) FROM slo_definitions WHERE slo_id = d.1) AS covered,
     toStartOfMinute({start:DateTime64(3)}) AS minute_from,
     (SELECT rollup FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)},
                                        step_s = {step_s:UInt32}, models = {models:Array(String)},
                                        buckets = {buckets:Array(String)})) AND covered <= minute_from AS rollup,
     if(rollup, toStartOfMinute({end:DateTime64(3)}) + toIntervalMinute(toStartOfMinute({end:DateTime64(3)}) < {end:DateTime64(3)}),
        minute_from) AS minute_to
SELECT *, 'exact' AS path
FROM slo_exact_view(start = {start:DateTime64(3)}, end = if(rollup, {start:DateTime64(3)}, {end:DateTime64(3)}),
     step_s = {step_s:UInt32}, models = {models:Array(String)}, buckets = {buckets:Array(String)},
     ttft_max = d.2, prefill_min = d.3, tpot_max = d.4, decode_min = d.5, e2e_max = d.6, count_failed = d.7,
     slo_models = d.8, slo_buckets = d.9)
UNION ALL
SELECT *, 'rollup' AS path
FROM slo_rollup_view(start = minute_from, end = minute_to, step_s = {step_s:UInt32}, slo_id = d.1,
     models = {models:Array(String)}, buckets = {buckets:Array(String)});
