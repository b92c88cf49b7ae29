-- A partition's progress, appended after its batch is durable
-- (stream_jobs/ledger.py). A statement with bound values rather than the
-- client's row insert, which imports pandas for a DataFrame check. In the
-- worker this saves no time: pandas is loaded at start anyway, for pyarrow
-- (stream_jobs/preload.py).
INSERT INTO consumer_progress (src_topic, src_partition, next_offset, worker)
SELECT p.1, p.2, p.3, {worker:String}
FROM (SELECT arrayJoin({rows:Array(Tuple(String, UInt16, UInt64))}) AS p)
