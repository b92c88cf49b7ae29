-- Raw rows a band query over this window would read (the query layer's
-- raw-vs-rollup choice). Asked only for short windows, where it is cheap:
-- partitions are per day and the filter is on the sort key's columns.
SELECT count() AS n
FROM generations
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
  AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
  AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
