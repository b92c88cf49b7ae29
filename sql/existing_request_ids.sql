-- Which request_ids of a batch are already stored (a gateway sent the same
-- generation twice). Both copies share the key, hence the partition and the
-- worker, and the same t0: the ts range keeps the scan to a few granules,
-- and the bloom-filter index on request_id (schema/0004) skips the rest.
SELECT DISTINCT request_id
FROM generations
WHERE src_topic = {topic:String}
  AND ts BETWEEN {lo:DateTime64(3)} AND {hi:DateTime64(3)}
  AND request_id IN {ids:Array(String)}
