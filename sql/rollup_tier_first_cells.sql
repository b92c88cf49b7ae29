-- The earliest cell of each coarser rollup tier (schema/0014, 0019, 0015), NULL when
-- the tier is empty. The query path answers from a tier only after its first
-- cell, which may be partial: a tier's view sees only rows inserted after it
-- was created (phasemeter.analytics.paths.tier_plan). Small tables: one row
-- per model x bucket x hour (3 hours, day).
SELECT
    (SELECT minOrNull(minute) FROM generations_hour) AS hour,
    (SELECT minOrNull(minute) FROM generations_hour3) AS hour3,
    (SELECT minOrNull(minute) FROM generations_day) AS day
