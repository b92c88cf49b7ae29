-- The rollup's exact tail: numpy's "linear" percentile at level q of a cell
-- with n non-null values, computed from the cell's lowest values kept sorted
-- (`lo`, the merged groupArraySorted(16) states), or nan when the ranks it
-- needs, floor(q * (n - 1)) and the one above it, are not among them (then
-- the caller falls back to the t-digest sketch). For the high end the rollup
-- keeps negated values, so the fast side is -phasemeter_rank_pct_v1(hi, n, 1 - q).
-- One definition for every rollup query (bands, latency); a SQL function is
-- global to the server, hence the version in its name: a change ships as _v2.
CREATE FUNCTION IF NOT EXISTS phasemeter_rank_pct_v1 AS (lo, n, q) ->
    if(toUInt64(floor(q * (n - 1))) + 1 < length(lo) OR length(lo) = n,
       lo[toUInt64(floor(q * (n - 1))) + 1]
       + (q * (n - 1) - floor(q * (n - 1)))
         * (lo[least(toUInt64(floor(q * (n - 1))) + 2, length(lo))] - lo[toUInt64(floor(q * (n - 1))) + 1]),
       nan);
