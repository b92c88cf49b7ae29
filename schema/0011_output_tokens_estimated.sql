-- output_tokens was counted by the gateway (streamed chunks) instead of
-- reported by the server's usage. 0 for every row before this
-- column and for every event that does not say so.
ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS output_tokens_estimated UInt8 DEFAULT 0 CODEC(T64, ZSTD(1)) AFTER gap_threshold_s;
