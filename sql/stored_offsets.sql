-- Highest Kafka offset already stored per source partition, over accepted
-- rows and dead letters alike. The worker skips re-delivered records at or
-- below it (exactly-once after a crash or a rebalance).
SELECT src_partition, max(max_offset) AS max_offset
FROM
(
    SELECT src_partition, max(src_offset) AS max_offset
    FROM generations WHERE src_topic = {topic:String} GROUP BY src_partition
    UNION ALL
    SELECT src_partition, max(src_offset) AS max_offset
    FROM dead_letters WHERE src_topic = {topic:String} GROUP BY src_partition
)
GROUP BY src_partition
