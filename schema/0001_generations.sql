-- One row per finished generation, derived by the stream job (docs/metrics.md).
-- Key serves the main query shape: "percentiles of one model (× bucket) over
-- a time window" -> ORDER BY low-to-high cardinality, then time.
-- src_topic/src_partition/src_offset make every row traceable to the Kafka
-- record it came from; the worker resumes from them (exactly-once, see
-- docs/delivery.md), and the dedup window drops a retried identical batch.
CREATE TABLE IF NOT EXISTS generations
(
    ts                   DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    request_id           String CODEC(ZSTD(1)),
    model                LowCardinality(String) CODEC(ZSTD(1)),
    input_bucket         LowCardinality(String) CODEC(ZSTD(1)),
    status               LowCardinality(String) CODEC(ZSTD(1)),
    finish_reason        LowCardinality(String) CODEC(ZSTD(1)),
    gateway              LowCardinality(String) CODEC(ZSTD(1)),
    replica              LowCardinality(String) CODEC(ZSTD(1)),
    input_tokens         UInt32 CODEC(T64, ZSTD(1)),
    output_tokens        UInt32 CODEC(T64, ZSTD(1)),
    cached_input_tokens  Nullable(UInt32) CODEC(ZSTD(1)),
    queue_s              Nullable(Float64) CODEC(ZSTD(1)),
    ttft_s               Nullable(Float64) CODEC(ZSTD(1)),
    decode_s             Nullable(Float64) CODEC(ZSTD(1)),
    e2e_s                Float64 CODEC(ZSTD(1)),
    prefill_tps          Nullable(Float64) CODEC(ZSTD(1)),
    prefill_tps_uncached Nullable(Float64) CODEC(ZSTD(1)),
    decode_tps           Nullable(Float64) CODEC(ZSTD(1)),
    tpot_s               Nullable(Float64) CODEC(ZSTD(1)),
    schema_version       UInt8,
    src_topic            LowCardinality(String),
    src_partition        UInt16,
    src_offset           UInt64 CODEC(Delta, ZSTD(1)),
    ingested_at          DateTime64(3, 'UTC') DEFAULT now64(3) CODEC(Delta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (model, input_bucket, ts)
TTL toDateTime(ts) + INTERVAL 90 DAY
SETTINGS non_replicated_deduplication_window = 1000, index_granularity = 8192;
