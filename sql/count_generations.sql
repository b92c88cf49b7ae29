-- Total stored generations and dead letters (tests, health checks).
SELECT (SELECT count() FROM generations) AS n, (SELECT count() FROM dead_letters) AS dead
