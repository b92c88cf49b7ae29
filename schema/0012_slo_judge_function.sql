-- SLO attainment (docs/slo.md): how one generation is judged against one
-- SLO, as one SQL function used by every place that counts: the per-minute
-- view (0013), the exact query (sql/slo_exact.sql), the burn-rate windows
-- (sql/slo_windows.sql) and the crash repair. So "met" cannot mean two things.
--
-- It returns eight 0/1 flags, summed with sumForEach; their order is
-- SLO_COUNTS in phasemeter/alerts/slo_rules.py:
--   counted, met, failed, ttft_s miss, prefill_tps miss, tpot_s miss, decode_tps miss, e2e_s miss.
-- * failed = status error or abandoned (no answer the user could use). With
--   count_failed = 1 (the default) it is counted and never met; with 0 the
--   generation is left out (counted = 0, every flag 0).
-- * A latency objective is missed when the value is over its limit, a
--   throughput objective when it is under it. A NULL limit is no objective.
--   A NULL value is no miss: it was not measured (one output token has no
--   decode, a failure has no first token -- it is already a failure).
-- Versioned name: a SQL function is global to the server; a change ships as _v2.
CREATE FUNCTION IF NOT EXISTS phasemeter_slo_judge_v1 AS
    (status, ttft_s, prefill_tps, tpot_s, decode_tps, e2e_s,
     ttft_max, prefill_min, tpot_max, decode_min, e2e_max, count_failed) ->
    if(status IN ('error', 'abandoned') AND count_failed = 0,
       [toUInt8(0), 0, 0, 0, 0, 0, 0, 0],
       [toUInt8(1),
        toUInt8(status NOT IN ('error', 'abandoned')
                AND NOT ifNull(ttft_s > ttft_max, 0) AND NOT ifNull(prefill_tps < prefill_min, 0)
                AND NOT ifNull(tpot_s > tpot_max, 0) AND NOT ifNull(decode_tps < decode_min, 0)
                AND NOT ifNull(e2e_s > e2e_max, 0)),
        toUInt8(status IN ('error', 'abandoned')),
        toUInt8(ifNull(ttft_s > ttft_max, 0)), toUInt8(ifNull(prefill_tps < prefill_min, 0)),
        toUInt8(ifNull(tpot_s > tpot_max, 0)), toUInt8(ifNull(decode_tps < decode_min, 0)),
        toUInt8(ifNull(e2e_s > e2e_max, 0))]);
