-- Exact stored offsets of one partition in [lo, hi]: used once per partition
-- after (re)assignment, so a batch that was only partly stored before a
-- crash is completed record by record instead of skipped by its maximum.
SELECT DISTINCT src_offset
FROM
(
    SELECT src_offset FROM generations
    WHERE src_topic = {topic:String} AND src_partition = {partition:UInt16}
      AND src_offset BETWEEN {lo:UInt64} AND {hi:UInt64}
    UNION ALL
    SELECT src_offset FROM dead_letters
    WHERE src_topic = {topic:String} AND src_partition = {partition:UInt16}
      AND src_offset BETWEEN {lo:UInt64} AND {hi:UInt64}
)
