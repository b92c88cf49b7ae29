"""Prefill/decode disaggregated traffic through the real broker and worker,
read back per pool: Meter.record() and Generation.finish() with their pools
and KV transfer, and a vLLM P/D pair exported by the real OpenTelemetry SDK
through `phasemeter otlp`'s receiver with TensorRT-LLM's transfer time, all
stored with prefill_replica, decode_replica and kv_transfer_s; then
`phasemeter query bands --by decode_replica` and `phasemeter latency --by
prefill_replica` (the CLI, on the store) give one row per pool, with the
slow pool's decode and the transfer's percentiles. Rows without a pool (a
unified server) come back under an empty pool, with no transfer."""

from __future__ import annotations

import json
import time

import pytest
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from conftest import wait_for
from test_otlp_pd_join import vllm_half
from phasemeter.integrations.otlp_receiver import Receiver
from phasemeter.producers import Meter

MODEL = "llama-pd"
PER_POOL = 40
# decode_s of 101 output tokens per decode pool: decode_tps = 100 / decode_s
DECODE_S = {"decode-0": 2.0, "decode-1": 2.0, "decode-2": 5.0}


def send_pools(meter: Meter, t0: float) -> int:
    """PER_POOL generations per decode pool through record(), prefill pools
    alternating; the transfer is 10 ms on decode-0/1 and 80 ms on decode-2."""
    sent = 0
    for pool, decode_s in DECODE_S.items():
        for i in range(PER_POOL):
            kv = 0.08 if pool == "decode-2" else 0.01
            meter.record(model=MODEL, input_tokens=2000, output_tokens=101, t0=t0 + sent * 0.01, ttft_s=0.3,
                         e2e_s=0.3 + decode_s, queue_s=0.01, prefill_replica=f"prefill-{i % 2}",
                         decode_replica=pool, kv_transfer_s=kv, request_id=f"{pool}-{i}")
            sent += 1
    for i in range(5):  # a unified server's rows: no pool, no transfer
        meter.record(model=MODEL, input_tokens=2000, output_tokens=101, t0=t0 + 1 + i * 0.01, ttft_s=0.3,
                     e2e_s=2.3, request_id=f"unified-{i}")
    return sent + 5


def cli_json(worker, *args: str) -> dict:
    out = worker.run(*args, "--from", "-1h", "--step", "1h", "--model", MODEL, "--format", "json").stdout
    return json.loads(out)


def test_pd_traffic_is_stored_with_its_pools_and_read_back_per_pool(worker, pm_env):
    bootstrap = pm_env["KAFKA_BOOTSTRAP_SERVERS"]
    worker.start()
    t0 = time.time() - 600
    meter = Meter(bootstrap, topic=pm_env["PHASEMETER_TOPIC"], flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=100, max_body_bytes=1 << 20, default_model=MODEL,
                  log=lambda line: None).start()
    try:
        total = send_pools(meter, t0)
        with meter.generation(model=MODEL, input_tokens=2000, request_id="live-1") as g:
            g.first_token()
            g.finish(output_tokens=1, prefill_replica="prefill-0", decode_replica="decode-1")
        # a vLLM P/D pair, the prefill half carrying TensorRT-LLM's transfer time
        exporter = OTLPSpanExporter(endpoint=rx.url, timeout=10)
        prefill = vllm_half("prefill", t0 + 5, 0.29, 0.3, 1)
        decode = vllm_half("decode", t0 + 5.3, 0.05, 2.0, 90)
        prefill[0]._attributes = {**prefill[0].attributes, "gen_ai.latency.kv_cache_transfer_time": 0.2}
        assert exporter.export(decode) == SpanExportResult.SUCCESS
        assert exporter.export(prefill) == SpanExportResult.SUCCESS
        exporter.shutdown()
        assert meter.flush(15)
    finally:
        rx.stop()
        meter.close()
    want = total + 2  # + the live generation and the joined pair
    h = wait_for(lambda: (worker.health() or {}).get("accepted", 0) >= want and worker.health(), 90,
                 f"{want} generations stored", worker.diagnose)
    assert (h["accepted"], h["rejected"]) == (want, 0), h
    worker.stop()

    bands = cli_json(worker, "query", "bands", "--by", "decode_replica")
    assert bands["by"] == "decode_replica" and bands["path"] == "exact"
    record_rows = [r for r in bands["rows"] if r["input_bucket"] == "512-2k" and r["n"] >= PER_POOL]
    assert len(record_rows) == 3
    per_pool = {r["decode_replica"]: r["decode_p50"] for r in record_rows}
    assert per_pool == pytest.approx({"decode-0": 50.0, "decode-1": 50.0, "decode-2": 20.0})  # the slow pool
    # + the live generation on decode-1, + the OTLP pair on decode-0 (a window may cross a step: summed)
    assert totals(bands["rows"], "decode_replica", "n") == {"": 5, "decode-0": PER_POOL + 1,
                                                            "decode-1": PER_POOL + 1, "decode-2": PER_POOL}

    latency = cli_json(worker, "latency", "--by", "decode_replica")
    assert latency["by"] == "decode_replica"
    # the OTLP pair's transfer (on its prefill half) counts for decode-0; the live generation sent none
    assert totals(latency["rows"], "decode_replica", "kv_transfer_n") == {
        "": 0, "decode-0": PER_POOL + 1, "decode-1": PER_POOL, "decode-2": PER_POOL}
    record_rows = [r for r in latency["rows"] if r["input_bucket"] == "512-2k" and r["n"] >= PER_POOL]
    assert len(record_rows) == 3
    kv = {r["decode_replica"]: (r["kv_transfer_p50"], r["kv_transfer_p99"]) for r in record_rows}
    assert kv == {"decode-0": (0.01, 0.01), "decode-1": (0.01, 0.01), "decode-2": (0.08, 0.08)}
    unified = [r for r in latency["rows"] if r["decode_replica"] == ""]
    assert len(unified) >= 1
    for r in unified:  # no transfer: an empty column, not an error or a 0
        assert (r["kv_transfer_n"], r["kv_transfer_p50"], r["kv_transfer_p99"]) == (0, None, None)

    by_prefill = cli_json(worker, "latency", "--by", "prefill_replica")
    # 60 record()s per prefill pool; the live generation and the OTLP pair's prefill instance on prefill-0
    assert totals(by_prefill["rows"], "prefill_replica", "n") == {"": 5, "prefill-0": 3 * PER_POOL // 2 + 2,
                                                                  "prefill-1": 3 * PER_POOL // 2}

    plain = cli_json(worker, "latency")  # without --by: the view of before, no pool and no transfer column
    assert sum(r["n"] for r in plain["rows"]) == want
    assert not {"decode_replica", "prefill_replica", "kv_transfer_n"} & set(plain["rows"][0])


def totals(rows: list[dict], key: str, value: str) -> dict:
    out: dict = {}
    for r in rows:
        out[r[key]] = out.get(r[key], 0) + r[value]
    return out
