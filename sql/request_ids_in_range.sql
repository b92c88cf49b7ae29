-- The request_ids stored from `topics` with ts in a batch's range, at most
-- {limit} of them: the duplicate check's first question (stream_jobs/ledger.py).
-- Each with its topic and ts (ms): one read serves every scope of the batch,
-- each matched to its own topics and range in the worker.
-- When the range holds no more stored rows than that (a backlog read in time
-- order, a quiet store), the batch's ids are matched against these in the
-- worker, and never sent: binding and matching the CRC32s of 90,000 ids
-- (sql/existing_request_ids.sql) took ~0.18 s of a batch of envelopes
-- (docs/performance/sink.md). The primary key's ts bounds the scan to the range.
SELECT src_topic, request_id, toUnixTimestamp64Milli(ts)
FROM generations
WHERE src_topic IN {topics:Array(String)}
  AND ts BETWEEN fromUnixTimestamp64Milli({lo_ms:Int64}) AND fromUnixTimestamp64Milli({hi_ms:Int64})
LIMIT {limit:UInt32}
