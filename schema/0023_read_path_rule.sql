-- Raw rows (exact) or the per-minute rollup? The rule a read follows when it
-- forces neither: `phasemeter query bands`, `latency` and `slo` without
-- --exact/--rollup (phasemeter/analytics/core.py, slo.py ask read_path_view
-- below), and the Grafana panels (bands_view, latency_view: 0024, 0025). One
-- definition, so a panel takes the path the CLI takes for the same window,
-- step and filters, and shows the same number.
--
-- The rollup answers when the step is whole minutes (its grain) and the window
-- is long (> 6 h) or would read many raw rows (> 5M); else the raw rows do.
-- (grain_s, window_s, raw_rows): the limits, read by the rule and returned by
-- the view, so the CLI's explanation quotes them without a copy.
-- SQL functions are global to the server, hence the version in their names.
CREATE FUNCTION IF NOT EXISTS phasemeter_rollup_limits_v1 AS () -> tuple(60, 21600, 5000000);

-- 'step' (exact: the step is not whole minutes), 'window' (rollup: long
-- window), 'rows' (rollup: many raw rows) or 'short' (exact).
CREATE FUNCTION IF NOT EXISTS phasemeter_read_path_v1 AS (window_s, step_s, raw_rows) ->
    multiIf(step_s < phasemeter_rollup_limits_v1().1 OR step_s % phasemeter_rollup_limits_v1().1 != 0, 'step',
            window_s > phasemeter_rollup_limits_v1().2, 'window',
            raw_rows > phasemeter_rollup_limits_v1().3, 'rows',
            'short');

-- The rule over a window [start, end) with the read's filters. The raw rows
-- are counted only when their number can change the answer (a short window
-- at whole minutes): otherwise the count's WHERE is constant false, no part
-- is read, and raw_rows is NULL. rollup: 1 when the rollup answers.
--   SELECT * FROM read_path_view(start = ..., end = ..., step_s = ..., models = [...], buckets = [...])
CREATE VIEW IF NOT EXISTS read_path_view AS
SELECT
    rule, rule IN ('window', 'rows') AS rollup, window_s, step_s, if(counted, raw_rows, NULL) AS raw_rows,
    phasemeter_rollup_limits_v1().1 AS grain_s,
    phasemeter_rollup_limits_v1().2 AS rollup_window_s,
    phasemeter_rollup_limits_v1().3 AS rollup_raw_rows
FROM
(
    SELECT
        dateDiff('millisecond', {start:DateTime64(3)}, {end:DateTime64(3)}) / 1000 AS window_s,
        {step_s:UInt32} AS step_s,
        phasemeter_read_path_v1(window_s, step_s, 0) != phasemeter_read_path_v1(window_s, step_s, 18446744073709551615)
            AS counted,
        (SELECT count()
         FROM generations
         WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
           AND (empty({models:Array(String)}) OR has({models:Array(String)}, model))
           AND (empty({buckets:Array(String)}) OR has({buckets:Array(String)}, input_bucket))
           AND phasemeter_read_path_v1(dateDiff('millisecond', {start:DateTime64(3)}, {end:DateTime64(3)}) / 1000,
                                       {step_s:UInt32}, 0)
               != phasemeter_read_path_v1(dateDiff('millisecond', {start:DateTime64(3)}, {end:DateTime64(3)}) / 1000,
                                          {step_s:UInt32}, 18446744073709551615)) AS raw_rows,
        phasemeter_read_path_v1(window_s, step_s, raw_rows) AS rule
);
