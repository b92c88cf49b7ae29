"""Synthetic rows for analytics tests and benchmarks.

`synthetic_rows` goes through the real pipeline (SyntheticGateway -> event JSON
-> the worker's batch decode, stream_jobs.batch_decode), so rows are exactly
what the worker stores.
`synthetic_frame` is a vectorised look-alike (same distributions, numpy) for
10M-100M row benchmarks, where per-event Python would dominate.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd

from phasemeter.stream_jobs.buckets import Bucketer, labels, parse_edges
from phasemeter.stream_jobs.batch_decode import decode
from phasemeter.stream_jobs.derive import ROW_COLUMNS
from phasemeter.demo.synthetic import MODELS, TRAFFIC, SyntheticGateway


def synthetic_rows(n: int, start: float, span_s: float, seed: int = 7, edges="default",
                   topic: str = "synthetic", partition: int = 0, first_offset: int = 0,
                   deployment=None) -> list[dict]:
    """Worker rows of the synthetic traffic; with a disagg.Deployment, its
    prefill/decode pools and KV transfers (the demo's `--pd` traffic)."""
    gw = SyntheticGateway(start=start, span_s=span_s, seed=seed, deployment=deployment)
    records = []
    for i in range(n):
        g = gw.make(i / n)
        event = {"schema_version": 1, "kind": "generation", "request_id": f"{seed}-{i}", "model": g.model,
                 "t0": g.t0, "e2e_s": g.e2e_s, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens,
                 "ttft_s": g.ttft_s, "queue_s": g.queue_s, "status": g.status, "replica": g.replica}
        pd_fields = {"prefill_replica": g.prefill_replica, "decode_replica": g.decode_replica,
                     "kv_transfer_s": g.kv_transfer_s}
        if deployment is not None:  # the P/D fields are v2's
            event.update({k: v for k, v in pd_fields.items() if v is not None}, schema_version=2)
        records.append(SimpleNamespace(value=json.dumps(event).encode(),
                                       message=SimpleNamespace(topic=topic, partition=partition,
                                                               offset=first_offset + i)))
    # One batch of one-event records, as a worker reads them: its columns, then
    # a dict per row (row by row, derive.process, took 1.7x the CPU).
    gens = decode(records, Bucketer(parse_edges(edges)), 1_000_000, now=start + span_s + 86_400).gens
    return [gens[i] for i in range(len(gens))]


def synthetic_frame(n: int, start: float, span_s: float, seed: int = 7, edges="default",
                    first_offset: int = 0) -> pd.DataFrame:
    """ROW_COLUMNS frame (ts as UTC datetime) ready for client.insert_df('generations', ...)."""
    rng, tr = np.random.default_rng(seed), TRAFFIC  # the same model as SyntheticGateway, vectorised
    edges_t = parse_edges(edges)
    names = labels(edges_t)
    m = rng.integers(0, len(MODELS), n)
    prefill_med = np.array([p.prefill_tps for p in MODELS])[m]
    decode_med = np.array([p.decode_tps for p in MODELS])[m]
    progress = np.sort(rng.random(n))
    n_in = np.exp(rng.uniform(np.log(tr.input_min), np.log(tr.input_max), n)).astype(np.int64)
    queue = rng.lognormal(np.log(tr.queue_median_s), tr.queue_sigma, n)
    rate = prefill_med * rng.lognormal(0, tr.prefill_sigma, n)
    slow = (progress >= tr.regress_at) & (n_in >= tr.regress_min_input)
    rate = np.where(slow, rate / (tr.slowdown * rng.lognormal(0, tr.slowdown_sigma, n)), rate)
    queue = np.where(slow, queue * tr.slowdown, queue)
    ttft = queue + n_in / rate
    n_out = np.maximum(1, rng.lognormal(np.log(tr.output_median), tr.output_sigma, n).astype(np.int64))
    decode_s = (n_out - 1) / (decode_med * rng.lognormal(0, tr.decode_sigma, n))
    failed = rng.random(n) < tr.fail_rate
    status = np.where(failed, "error", np.where(rng.random(n) < tr.cancel_rate, "cancelled", "ok"))
    n_out = np.where(failed, 0, n_out)
    has_dec = (n_out > 1) & ~failed & (decode_s > 0)
    ts_ms = np.round((start + progress * span_s) * 1000).astype(np.int64)
    df = pd.DataFrame({
        "ts": pd.to_datetime(ts_ms, unit="ms", utc=True),
        "request_id": "", "model": np.array([p.name for p in MODELS])[m],
        "input_bucket": np.array(names)[np.searchsorted(np.array(edges_t), n_in, side="right") - 1],
        "status": status, "finish_reason": "", "gateway": "bench", "replica": "",
        "input_tokens": n_in.astype(np.uint32), "output_tokens": n_out.astype(np.uint32),
        "cached_input_tokens": pd.array([None] * n, dtype="UInt32"),
        "queue_s": queue, "ttft_s": np.where(failed, np.nan, ttft),
        "decode_s": np.where(failed, np.nan, decode_s), "e2e_s": np.where(failed, queue + 0.1, ttft + decode_s),
        "prefill_tps": np.where(failed, np.nan, n_in / ttft), "prefill_tps_uncached": np.nan,
        "decode_tps": np.where(has_dec, (n_out - 1) / np.where(decode_s > 0, decode_s, 1), np.nan),
        "tpot_s": np.where(has_dec, decode_s / np.maximum(n_out - 1, 1), np.nan),
        "schema_version": np.uint8(1), "src_topic": "bench", "src_partition": np.uint16(0),
        "src_offset": np.arange(first_offset, first_offset + n, dtype=np.uint64),
    })
    # No chunk data (schema/0010, 0011): unknown, as derive writes for an event without it.
    for col, dtype in (("max_gap_s", "Float64"), ("stalled", "UInt8"), ("chunks", "UInt32"),
                       ("gap_threshold_s", "Float64")):
        df[col] = pd.array([None] * n, dtype=dtype)
    df["output_tokens_estimated"] = np.uint8(0)
    # No prefill/decode split (schema/0027): empty pools, no transfer, as derive writes.
    df["prefill_replica"] = df["decode_replica"] = ""
    df["kv_transfer_s"] = pd.array([None] * n, dtype="Float64")
    for col in ("ttft_s", "decode_s", "prefill_tps", "prefill_tps_uncached", "decode_tps", "tpot_s"):
        df[col] = df[col].astype("Float64")  # NaN -> NULL (nullable columns)
        df.loc[df[col].isna(), col] = pd.NA
    return df[list(ROW_COLUMNS)]
