-- Duplicate detection looks up a batch's request_ids within its time range
-- (sql/existing_request_ids.sql); a bloom filter lets it skip granules.
ALTER TABLE generations ADD INDEX IF NOT EXISTS idx_request_id request_id TYPE bloom_filter(0.01) GRANULARITY 4;
