-- Per-minute SLO counts for the SLOs the worker declares (docs/slo.md), so
-- attainment over a month reads ~40k small rows per SLO instead of every raw
-- row. A count of "met" is only exact for thresholds fixed in advance, so:
--
-- * slo_definitions holds the declared SLOs (written by the worker at start
--   from its SLO file, phasemeter/store/slo_defs.py; data, not DDL), one row
--   per name. slo_id is a hash of what decides the counts (scope, thresholds,
--   count_failed): a changed SLO is a new id, so old counts never answer for
--   new thresholds; SLOs judging alike (other name or target) share one id.
--   The target is kept for readers that have no SLO file (Grafana).
-- * the view judges every inserted row against every definition in scope
--   with phasemeter_slo_judge_v1 (0012), the same function the exact query uses;
-- * a definition counts only rows inserted after it was registered, so the
--   rollup answers windows from the first whole minute after registered_at
--   (phasemeter/analytics/slo.py checks); earlier windows and ad-hoc
--   thresholds take the exact path.
--
-- LIMIT 1 BY slo_id: several names for one id, or two workers registering
-- one SLO at once, leave several rows; each generation is still counted once
-- per slo_id.
CREATE TABLE IF NOT EXISTS slo_definitions
(
    slo_id        UInt64,
    name          String,
    models        Array(String),
    buckets       Array(String),
    ttft_max      Nullable(Float64),
    prefill_min   Nullable(Float64),
    tpot_max      Nullable(Float64),
    decode_min    Nullable(Float64),
    e2e_max       Nullable(Float64),
    count_failed  UInt8,
    target        Float64,
    registered_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree
ORDER BY slo_id;

-- counts: sumForEach of the judge's flags (SLO_COUNTS order). Deduplicated
-- like generations_minute (non_replicated_deduplication_window with the
-- sink's deduplicate_blocks_in_dependent_materialized_views), and repaired
-- from raw like it after a crash (stream_jobs/ledger.py).
CREATE TABLE IF NOT EXISTS slo_minute
(
    slo_id       UInt64,
    model        LowCardinality(String),
    input_bucket LowCardinality(String),
    minute       DateTime('UTC') CODEC(Delta, ZSTD(1)),
    counts       AggregateFunction(sumForEach, Array(UInt8))
)
ENGINE = AggregatingMergeTree
PARTITION BY toYYYYMM(minute)
ORDER BY (slo_id, model, input_bucket, minute)
TTL minute + INTERVAL 400 DAY
SETTINGS non_replicated_deduplication_window = 1000;

CREATE MATERIALIZED VIEW IF NOT EXISTS slo_minute_mv TO slo_minute AS
SELECT
    d.slo_id AS slo_id,
    g.model AS model,
    g.input_bucket AS input_bucket,
    toStartOfMinute(toDateTime(g.ts, 'UTC')) AS minute,
    sumForEachState(phasemeter_slo_judge_v1(g.status, g.ttft_s, g.prefill_tps, g.tpot_s, g.decode_tps, g.e2e_s,
                                            d.ttft_max, d.prefill_min, d.tpot_max, d.decode_min, d.e2e_max,
                                            d.count_failed)) AS counts
FROM generations AS g
CROSS JOIN
(
    SELECT slo_id, models, buckets, ttft_max, prefill_min, tpot_max, decode_min, e2e_max, count_failed
    FROM slo_definitions
    ORDER BY registered_at
    LIMIT 1 BY slo_id
) AS d
WHERE (empty(d.models) OR has(d.models, g.model)) AND (empty(d.buckets) OR has(d.buckets, g.input_bucket))
GROUP BY slo_id, model, input_bucket, minute;
