-- Alert evaluation per model × input bucket and window part (current,
-- baseline): the definition is the parameterized view alert_window_view
-- (schema/0009_alert_window_view.sql), which the Grafana alert rules read too.
SELECT *
FROM alert_window_view(q = {q:Float64}, cur_start = {cur_start:DateTime64(3)}, cur_end = {cur_end:DateTime64(3)},
     lo = {lo:DateTime64(3)}, base_starts_ms = {base_starts_ms:Array(Int64)}, base_span_ms = {base_span_ms:Int64},
     models = {models:Array(String)})
ORDER BY model, input_bucket, part
