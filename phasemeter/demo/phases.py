"""Live traffic over the phase-event protocol, for `phasemeter demo`.

Alongside the historical one-event load, a second gateway sends start,
first_token and end as they happen (Meter's low-level phase API, as a gateway
whose phases land in different callbacks would). About 1 % of its requests
hang before the first token and 1 % hang in decode: they never send `end`.
The worker shows them in flight, then records them as `abandoned` once the
demo's short expiry passes -- the tail a one-event design never sees.
"""

from __future__ import annotations

import heapq
import random
import time
from collections import Counter

from phasemeter.demo.synthetic import SyntheticGateway

HANG_PREFILL, HANG_DECODE = 0.01, 0.01
# Healthy requests end well inside the demo's short expiry: outputs are capped.
MAX_OUTPUT = 150


def shapes(seconds: float):
    """(model, input_tokens, ttft_s, decode_s, output_tokens) from the one
    traffic model (synthetic.SyntheticGateway), without its regression;
    failed draws are skipped: this gateway's failures are its hangs."""
    gw = SyntheticGateway(start=time.time(), span_s=seconds, regress_at=2.0, seed=3)
    while True:
        g = gw.make(0.0)
        if g.ttft_s is None or g.output_tokens < 2:
            continue
        n_out = min(g.output_tokens, MAX_OUTPUT)
        decode = (g.e2e_s - g.ttft_s) * (n_out - 1) / (g.output_tokens - 1)
        yield g.model, g.input_tokens, g.ttft_s, decode, n_out


def run_phase_load(bootstrap: str, settings, seconds: float, rate: float, say) -> Counter:
    """Blocks for `seconds` (+ the longest decode); returns what it did."""
    from phasemeter.producers import Meter

    rng = random.Random(3)
    draw = shapes(seconds)
    meter = Meter(bootstrap_servers=bootstrap, topic=settings.topic, gateway="demo-phases",
                  phase_events=True, queue_size=20_000, producer_config=settings.kafka_client_config())
    counts: Counter = Counter()
    due: list = []  # (when, seq, kind, request_id, ttft_s, e2e_s, output_tokens)
    began, started, seq = time.monotonic(), 0, 0
    while True:
        now = time.monotonic()
        if now - began < seconds:
            for _ in range(int((now - began) * rate) - started):
                model, n_in, ttft, decode, n_out = next(draw)
                rid = meter.start(model=model, input_tokens=n_in, t0=time.time())
                started += 1
                fate = rng.random()
                if fate < HANG_PREFILL:
                    counts["hung_in_prefill"] += 1
                    continue
                seq += 1
                kind = "first_hang" if fate < HANG_PREFILL + HANG_DECODE else "first"
                heapq.heappush(due, (now + ttft, seq, kind, rid, ttft, ttft + decode, n_out))
        elif not due:
            break
        while due and due[0][0] <= now:
            _, s, kind, rid, ttft, e2e, n_out = heapq.heappop(due)
            meter.first_token(rid, ttft_s=ttft) if kind != "end" else meter.end(rid, output_tokens=n_out, e2e_s=e2e)
            if kind == "first":
                heapq.heappush(due, (now + (e2e - ttft), s, "end", rid, ttft, e2e, n_out))
            elif kind == "first_hang":
                counts["hung_in_decode"] += 1
            else:
                counts["ended"] += 1
        time.sleep(0.005)
    meter.close(timeout_s=30)
    counts["started"] = started
    counts.update({f"emitter_{k}": v for k, v in meter.stats().as_dict().items()})
    say(f"phase gateway: {started:,} started, {counts['ended']:,} ended, {counts['hung_in_prefill']} hung "
        f"before the first token, {counts['hung_in_decode']} hung in decode")
    return counts
