-- Prefill/decode disaggregated serving (docs/phases.md): the instance that ran
-- the prefill, the one that streamed the answer, and the seconds the KV cache
-- took to move between them. The replicas are labels like `replica`
-- (LowCardinality, '' when the event did not say: a unified server); the
-- transfer is Nullable: a row without it says nothing about a transfer.
-- AFTER output_tokens_estimated keeps the table's column order equal to the
-- worker's ROW_COLUMNS (stream_jobs/derive.py). The rollups do not carry
-- them: per-pool bands and the transfer's percentiles read raw rows.
ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS prefill_replica LowCardinality(String) DEFAULT '' CODEC(ZSTD(1)) AFTER output_tokens_estimated,
    ADD COLUMN IF NOT EXISTS decode_replica  LowCardinality(String) DEFAULT '' CODEC(ZSTD(1)) AFTER prefill_replica,
    ADD COLUMN IF NOT EXISTS kv_transfer_s   Nullable(Float64) CODEC(ZSTD(1)) AFTER decode_replica;
