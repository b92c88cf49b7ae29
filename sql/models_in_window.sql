-- Which models have generations in [start, end), for the error a mistyped
-- --model gets instead of an empty answer.
SELECT model, count() AS n
FROM generations
WHERE ts >= {start:DateTime64(3)} AND ts < {end:DateTime64(3)}
GROUP BY model
ORDER BY model
