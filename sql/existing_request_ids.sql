-- Which request_ids of a batch may already be stored (a gateway sent the
-- same generation twice). Both copies share the key, hence the partition and
-- the worker, and the same t0: the ts range keeps the scan to a few granules.
-- A joined generation is asked about on both topics it may be stored from
-- (the raw one when ingest joined it in its batch, the joined one).
-- The batch's ids come as their CRC32s (stream_jobs/ledger.py): a list of
-- numbers is a third of the text of the ids, which a server's 128 KiB limit on
-- a bound value and the client's formatting both price by the character.
-- A CRC can collide, so the caller keeps only the ids it asked about. The set
-- is a subquery: a literal list of more than ~20,000 strings made the scan
-- take 40-70 s (docs/performance/sink.md).
SELECT DISTINCT request_id
FROM generations
WHERE src_topic IN {topics:Array(String)}
  AND ts BETWEEN fromUnixTimestamp64Milli({lo_ms:Int64}) AND fromUnixTimestamp64Milli({hi_ms:Int64})
  AND CRC32(request_id) IN (SELECT arrayJoin({crcs:Array(UInt32)}))
