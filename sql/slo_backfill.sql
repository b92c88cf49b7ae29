-- Rebuild SLO counts from raw rows with the view's own SELECT (the marker;
-- phasemeter.store.rollup.wrapped): cells the table already holds are
-- skipped, so a re-run never double-counts. Run directly by the worker's
-- crash repair, never through the read-only web API.
INSERT INTO slo_minute
SELECT *
FROM (/* slo_minute_mv */) AS judged
WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)}
  AND (empty({cells:Array(Tuple(String, String, DateTime))})
           OR (model, input_bucket, minute) IN {cells:Array(Tuple(String, String, DateTime))})
  AND (slo_id, model, input_bucket, minute) NOT IN
      (SELECT slo_id, model, input_bucket, minute FROM slo_minute
       WHERE minute >= {start:DateTime64(3)} AND minute < {end:DateTime64(3)})
