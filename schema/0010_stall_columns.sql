-- Decode stalls (docs/metrics.md): per-generation chunk data of a v2 event, derived
-- by the stream job (docs/metrics.md). All Nullable: a row without chunk
-- data says nothing about stalls, which is not the same as "no stall".
-- AFTER tpot_s keeps the table's column order equal to the worker's
-- ROW_COLUMNS (stream_jobs/derive.py). The rollup (0003) does not carry them.
ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS max_gap_s       Nullable(Float64) CODEC(ZSTD(1)) AFTER tpot_s,
    ADD COLUMN IF NOT EXISTS stalled         Nullable(UInt8) CODEC(ZSTD(1)) AFTER max_gap_s,
    ADD COLUMN IF NOT EXISTS chunks          Nullable(UInt32) CODEC(ZSTD(1)) AFTER stalled,
    ADD COLUMN IF NOT EXISTS gap_threshold_s Nullable(Float64) CODEC(ZSTD(1)) AFTER chunks;
