-- A call that was not streamed (docs/metrics.md): the event said
-- `streamed: false` (an OTLP span with gen_ai.request.stream = false), so
-- the client got the whole answer at once and there is no first token to
-- time. Such a row has a null ttft_s and null phases (prefill_tps,
-- decode_tps, tpot_s), so the phase percentiles skip it, while its e2e_s
-- and the counts (n) keep it. 1 = streamed, 0 = not streamed, null = the
-- event did not say. AFTER kv_transfer_s keeps the table's column order equal to the
-- worker's ROW_COLUMNS (stream_jobs/derive.py). The rollups do not carry it.
ALTER TABLE generations
    ADD COLUMN IF NOT EXISTS streamed Nullable(UInt8) CODEC(ZSTD(1)) AFTER kv_transfer_s;
