-- The request_ids stored from `topics` with ts in a batch's range, at most
-- {limit} of them: the duplicate check's first question (stream_jobs/ledger.py).
-- When the range holds no more stored rows than that (a backlog read in time
-- order, a quiet store), the batch's ids are matched against these in the
-- worker, and never sent: binding and matching the CRC32s of 90,000 ids
-- (sql/existing_request_ids.sql) took ~0.18 s of a batch of envelopes
-- (docs/performance/sink.md). The primary key's ts bounds the scan to the range.
SELECT request_id
FROM generations
WHERE src_topic IN {topics:Array(String)}
  AND ts BETWEEN {lo:DateTime64(3)} AND {hi:DateTime64(3)}
LIMIT {limit:UInt32}
