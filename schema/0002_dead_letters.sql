-- Every rejected event, with its reason code, stored in the same batch as the
-- accepted rows of its offset range. The dead-letter *topic* is for people
-- and replays; this table makes `produced = stored + dead-lettered` exact,
-- because it shares the offset bookkeeping of `generations`.
-- Key serves "counts by reason over a window".
CREATE TABLE IF NOT EXISTS dead_letters
(
    ts            DateTime64(3, 'UTC') CODEC(Delta, ZSTD(1)),
    reason        LowCardinality(String),
    detail        String CODEC(ZSTD(1)),
    payload       String CODEC(ZSTD(3)),
    payload_size  UInt32,
    src_topic     LowCardinality(String),
    src_partition UInt16,
    src_offset    UInt64 CODEC(Delta, ZSTD(1))
)
ENGINE = MergeTree
PARTITION BY toDate(ts)
ORDER BY (reason, ts)
TTL toDateTime(ts) + INTERVAL 30 DAY
SETTINGS non_replicated_deduplication_window = 1000;
