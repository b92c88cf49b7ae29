-- The transfer alert family's frame per model × input bucket and window part
-- (current, baseline): the definition is the parameterized view
-- transfer_window_view (schema/0030_transfer_window_view.sql), which the
-- Grafana alert rule PhasemeterKvTransferSlow reads too.
SELECT *
FROM transfer_window_view(q = {q:Float64}, cur_start = {cur_start:DateTime64(3)}, cur_end = {cur_end:DateTime64(3)},
     lo = {lo:DateTime64(3)}, base_starts_ms = {base_starts_ms:Array(Int64)}, base_span_ms = {base_span_ms:Int64},
     models = {models:Array(String)})
ORDER BY model, input_bucket, part
