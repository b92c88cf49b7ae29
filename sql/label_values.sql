-- The values of the labels from outside that the store holds, per model:
-- the worker keeps them when it bounds each label to its top K per model
-- (stream_jobs/labels.py), so a restart does not admit K more.
SELECT 'replica' AS label, model, replica AS value
FROM generations WHERE replica != '' AND replica != {other:String}
GROUP BY model, replica
UNION ALL
SELECT 'gateway' AS label, model, gateway AS value
FROM generations WHERE gateway != '' AND gateway != {other:String}
GROUP BY model, gateway
UNION ALL
SELECT 'prefill_replica' AS label, model, prefill_replica AS value
FROM generations WHERE prefill_replica != '' AND prefill_replica != {other:String}
GROUP BY model, prefill_replica
UNION ALL
SELECT 'decode_replica' AS label, model, decode_replica AS value
FROM generations WHERE decode_replica != '' AND decode_replica != {other:String}
GROUP BY model, decode_replica
