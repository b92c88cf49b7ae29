-- SLOs new to the store, one row per declared name, written by the worker at
-- start (store/slo_defs.py builds each tuple, objectives in OBJECTIVES order;
-- a test checks this column list against the table). A statement with bound
-- values rather than the client's row insert: that one imports pandas on
-- first use (0.4-0.5 s of the start that registers new SLOs, before the
-- worker joins Kafka; stream_jobs/preload.py imports it while the worker
-- waits for Kafka instead).
-- registered_at is bound as epoch milliseconds, which means the same instant
-- on chDB and on a server whatever the client's datetime binding setting
-- (naive or aware, legacy or not): coverage starts from it (docs/slo.md).
INSERT INTO slo_definitions (slo_id, name, models, buckets, ttft_max, prefill_min, tpot_max, decode_min,
                             e2e_max, count_failed, target, registered_at)
SELECT r.1, r.2, r.3, r.4, r.5, r.6, r.7, r.8, r.9, r.10, r.11, fromUnixTimestamp64Milli(r.12, 'UTC')
FROM (SELECT arrayJoin({rows:Array(Tuple(UInt64, String, Array(String), Array(String), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), Nullable(Float64), UInt8, Float64, Int64))}) AS r)
