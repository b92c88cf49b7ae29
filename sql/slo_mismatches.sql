-- Cells (slo_id × model × bucket × minute) where the SLO counts
-- (schema/0013) do not hold exactly the raw rows they judge: the view is not
-- atomic with its source insert, so a crash can leave a cell short (or a
-- retry past the dedup window double it). The raw side is the view's own
-- SELECT (phasemeter.store.rollup.wrapped puts it at the marker), so it
-- judges and scopes exactly as the view does. Only registered SLOs: a
-- retired SLO's history is not raw's to judge. Not a read for the web API:
-- the worker runs it directly after a re-read batch. {cells} is bound once
-- (`listed`): each use of a bound list is parsed again.
WITH {cells:Array(Tuple(String, String, DateTime))} AS listed
SELECT slo_id, model, input_bucket, minute, sum(raw_n) AS raw_n, sum(rollup_n) AS rollup_n
FROM
(
    SELECT slo_id, model, input_bucket, minute, sumForEachMerge(counts)[1] AS raw_n, toUInt64(0) AS rollup_n
    FROM (/* slo_minute_mv */) AS judged
    WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
      AND (empty(listed) OR (model, input_bucket, minute) IN listed)
    GROUP BY slo_id, model, input_bucket, minute
    UNION ALL
    SELECT slo_id, model, input_bucket, minute, toUInt64(0) AS raw_n, sumForEachMerge(counts)[1] AS rollup_n
    FROM slo_minute
    WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
      AND (empty(listed) OR (model, input_bucket, minute) IN listed)
      AND slo_id IN (SELECT slo_id FROM slo_definitions)
    GROUP BY slo_id, model, input_bucket, minute
)
GROUP BY slo_id, model, input_bucket, minute
HAVING raw_n != rollup_n
ORDER BY slo_id, model, input_bucket, minute
