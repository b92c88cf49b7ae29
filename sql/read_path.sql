-- The exact-or-rollup rule for a read that forces neither (schema/0023_read_path_rule.sql): one
-- definition for the CLI and the Grafana panels. raw_rows is counted only
-- when it can change the answer (NULL otherwise).
SELECT *
FROM read_path_view(start = {start:DateTime64(3)}, end = {end:DateTime64(3)}, step_s = {step_s:UInt32},
     models = {models:Array(String)}, buckets = {buckets:Array(String)})
