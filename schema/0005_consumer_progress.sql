-- The worker's own record of how far it has processed each source partition
-- (docs/delivery.md). The store, not the consumer group's committed offset,
-- is the source of truth for progress: a worker resumes every partition it is
-- assigned at max(next_offset) here, and processes records strictly in offset
-- order from it. A row is appended after a batch's rows, dead letters and
-- forwarded phases are durable, so everything below next_offset is done.
-- Append-only and tiny (one row per partition per batch); ReplacingMergeTree
-- keeps the highest next_offset per partition once parts merge, and readers
-- take max(), so unmerged parts never matter.
CREATE TABLE IF NOT EXISTS consumer_progress
(
    src_topic     LowCardinality(String),
    src_partition UInt16,
    next_offset   UInt64 CODEC(Delta, ZSTD(1)),
    worker        LowCardinality(String),
    written_at    DateTime64(3, 'UTC') DEFAULT now64(3) CODEC(Delta, ZSTD(1))
)
ENGINE = ReplacingMergeTree(next_offset)
ORDER BY (src_topic, src_partition);
