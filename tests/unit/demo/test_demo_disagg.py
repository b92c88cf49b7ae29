"""The demo's disaggregated deployment (demo/disagg.py): every generation the
synthetic gateway makes is routed through the pools, the worker accepts it
as sent, the slow decode pool decodes slower, and without a deployment the
traffic is what it was."""

from __future__ import annotations

import json
import random
import statistics

import pytest

from phasemeter.demo.disagg import DEPLOYMENT
from phasemeter.demo.synthetic import SyntheticGateway
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import Rejection
from phasemeter.stream_jobs.derive import process

N = 3000


def rows(gw) -> list:
    out = []
    for i in range(N):
        g = gw.make(i / N)
        ev = {"schema_version": 2, "kind": "generation", "request_id": f"r{i}", "model": g.model, "t0": g.t0,
              "e2e_s": g.e2e_s, "ttft_s": g.ttft_s, "queue_s": g.queue_s, "input_tokens": g.input_tokens,
              "output_tokens": g.output_tokens, "status": g.status, "chunks": g.chunks, "max_gap_s": g.max_gap_s,
              "prefill_replica": g.prefill_replica, "decode_replica": g.decode_replica,
              "kv_transfer_s": g.kv_transfer_s}
        out.append(process(json.dumps(ev).encode(), Bucketer(parse_edges("default")), 10**6, now=g.t0 + 60))
    return out


def test_every_routed_generation_is_accepted_and_names_its_pools():
    got = rows(SyntheticGateway(start=1_767_225_600.0, span_s=3600, deployment=DEPLOYMENT))
    assert len(got) == N and not [r for r in got if isinstance(r, Rejection)]
    assert {r["prefill_replica"] for r in got} == set(DEPLOYMENT.prefill_pools)
    assert {r["decode_replica"] for r in got} == set(DEPLOYMENT.decode_pools) | {""}  # "" failed before decode
    assert all((r["kv_transfer_s"] is None) == (r["ttft_s"] is None) for r in got)


def test_the_slow_pool_decodes_slower():
    got = rows(SyntheticGateway(start=1_767_225_600.0, span_s=3600, deployment=DEPLOYMENT))
    median = {pool: statistics.median(r["decode_tps"] for r in got
                                      if r["decode_replica"] == pool and r["decode_tps"] is not None)
              for pool in DEPLOYMENT.decode_pools}
    assert len(median) == 3
    fast = [median[p] for p in DEPLOYMENT.decode_pools if p != DEPLOYMENT.slow_pool]
    assert max(fast) / median[DEPLOYMENT.slow_pool] > 2.0 and max(fast) / min(fast) < 1.2


def test_the_transfer_is_inside_the_ttft_and_grows_with_the_prompt():
    g = SyntheticGateway(start=0.0, span_s=3600).make(0.1)
    short, long_ = (DEPLOYMENT.route(g.__class__(**{**g.__dict__, "input_tokens": n}), random.Random(1))
                    for n in (100, 50_000))
    assert short.kv_transfer_s < long_.kv_transfer_s <= long_.ttft_s
    assert long_.ttft_s - g.ttft_s == pytest.approx(long_.kv_transfer_s, abs=1e-6)  # stored floored to 1 us


def test_without_a_deployment_the_traffic_is_unchanged():
    plain = SyntheticGateway(start=0.0, span_s=3600, seed=5)
    routed = SyntheticGateway(start=0.0, span_s=3600, seed=5, deployment=DEPLOYMENT)
    a, b = plain.make(0.5), routed.make(0.5)
    assert (a.prefill_replica, a.decode_replica, a.kv_transfer_s) == (None, None, None)
    assert (a.model, a.input_tokens, a.output_tokens, a.queue_s) == (b.model, b.input_tokens, b.output_tokens,
                                                                      b.queue_s)
