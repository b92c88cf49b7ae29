-- Where the worker resumes each partition of these topics: everything below
-- next_offset is stored (rows, dead letters) or forwarded (phases).
SELECT src_topic, src_partition, max(next_offset) AS next_offset
FROM consumer_progress
WHERE src_topic IN {topics:Array(String)}
GROUP BY src_topic, src_partition
