"""A synthetic gateway: realistic-looking generations with a scripted regression.

Used by the demo and the benchmarks. Simulated time sweeps a window (default
the last hour) while the load runs, so a short run fills a whole chart. From
`regress_at` (fraction of the window) on, prefill of long prompts (>= 8k
tokens) gets slower while decode stays flat: the case phasemeter exists for.
Each streamed generation also carries its chunk timing (one token per
chunk); one model stalls now and then (a gap of about a second, as when a
request is preempted), which its per-request tpot hides. With a
`Deployment` (disagg.py), each generation is also routed through prefill and
decode pools, one of them slow.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ModelProfile:
    name: str
    prefill_tps: float   # median prompt tokens/s on a healthy replica
    decode_tps: float    # median output tokens/s per stream


MODELS = (
    ModelProfile("llama-4-maverick", prefill_tps=9000.0, decode_tps=55.0),
    ModelProfile("qwen3-32b", prefill_tps=14000.0, decode_tps=80.0),
)


@dataclass(frozen=True)
class Traffic:
    """The one synthetic traffic model: its distributions, read by the
    per-event gateway below, the vectorised frame of the benchmarks
    (analytics/synth.py) and the demo's phase-event gateway (demo_phases.py)."""
    input_min: int = 40                # log-uniform input_tokens: every default bucket gets traffic
    input_max: int = 60_000
    queue_median_s: float = 0.02       # log-normal queue time
    queue_sigma: float = 0.8
    prefill_sigma: float = 0.25        # replica-to-replica spread around a model's prefill_tps
    regress_at: float = 0.65           # from this fraction of the window on, prefill regresses:
    slowdown: float = 2.5              # long prompts' prefill this many times slower, queue longer
    regress_min_input: int = 8192      # the regression hits prompts this long ...
    slowdown_sigma: float = 0.35       # ... with a fatter slow tail
    output_median: float = 180.0       # log-normal output_tokens
    output_sigma: float = 0.9
    decode_sigma: float = 0.15
    fail_rate: float = 0.01            # failed before the first token
    cancel_rate: float = 0.01
    gap_jitter: tuple[float, float] = (1.5, 3.0)  # largest chunk gap / mean gap, when nothing stalls
    stall_model: str = "qwen3-32b"     # this model's streams stall now and then ...
    stall_rate: float = 0.04           # ... this share of them ...
    stall_s: tuple[float, float] = (0.6, 2.5)  # ... for this long (added to decode)


TRAFFIC = Traffic()


@dataclass
class Generated:
    model: str
    input_tokens: int
    output_tokens: int
    t0: float
    ttft_s: float | None
    e2e_s: float
    queue_s: float | None
    status: str
    replica: str
    chunks: int | None = None          # chunk timing (None: nothing streamed)
    max_gap_s: float | None = None
    gaps_over: int | None = None       # gaps over 0.5 s (the emitter's default threshold)
    prefill_replica: str | None = None  # prefill/decode disaggregated serving (disagg.py)
    decode_replica: str | None = None
    kv_transfer_s: float | None = None


class SyntheticGateway:
    def __init__(self, start: float, span_s: float, regress_at: float | None = None,
                 slowdown: float | None = None, seed: int = 7, models=MODELS, traffic: Traffic = TRAFFIC,
                 deployment=None):
        self.start, self.span_s = start, span_s
        self.regress_at = traffic.regress_at if regress_at is None else regress_at
        self.slowdown = traffic.slowdown if slowdown is None else slowdown
        self.rng = random.Random(seed)
        # Chunk timing draws from its own stream, so the rest of the traffic is
        # the same as before stalls existed (tests and benchmarks keep their rows).
        self.chunk_rng = random.Random(seed + 1)
        self.models = models
        self.traffic = traffic
        # A disagg.Deployment routes each generation through its pools, with
        # its own random stream (the rest of the traffic stays the same).
        self.deployment = deployment
        self.pd_rng = random.Random(seed + 2)

    def input_tokens(self) -> int:
        tr = self.traffic
        return int(math.exp(self.rng.uniform(math.log(tr.input_min), math.log(tr.input_max))))

    def make(self, progress: float) -> Generated:
        """One generation at `progress` (0..1) through the simulated window."""
        g = self._make(progress)
        return g if self.deployment is None else self.deployment.route(g, self.pd_rng)

    def _make(self, progress: float) -> Generated:
        rng, tr = self.rng, self.traffic
        model = rng.choice(self.models)
        n_in = self.input_tokens()
        t0 = self.start + progress * self.span_s + rng.uniform(0, 1.0)
        queue = rng.lognormvariate(math.log(tr.queue_median_s), tr.queue_sigma)
        prefill_rate = model.prefill_tps * rng.lognormvariate(0, tr.prefill_sigma)
        if progress >= self.regress_at and n_in >= tr.regress_min_input:
            # Long prompts now wait behind each other: slower and a fatter slow tail.
            prefill_rate /= self.slowdown * rng.lognormvariate(0, tr.slowdown_sigma)
            queue *= self.slowdown
        replica = f"{model.name}-{rng.randrange(3)}"
        if rng.random() < tr.fail_rate:  # failed before the first token
            return Generated(model.name, n_in, 0, t0, None, queue + rng.uniform(0.01, 0.5), queue,
                             "error", replica)
        ttft = queue + n_in / prefill_rate
        n_out = max(1, int(rng.lognormvariate(math.log(tr.output_median), tr.output_sigma)))
        decode_rate = model.decode_tps * rng.lognormvariate(0, tr.decode_sigma)
        e2e = ttft + (n_out - 1) / decode_rate
        status = "cancelled" if rng.random() < tr.cancel_rate else "ok"
        if n_out < 2:
            return Generated(model.name, n_in, n_out, t0, ttft, e2e, queue, status, replica)
        crng = self.chunk_rng
        max_gap, over = crng.uniform(*tr.gap_jitter) / decode_rate, 0
        if model.name == tr.stall_model and crng.random() < tr.stall_rate:
            max_gap, over = crng.uniform(*tr.stall_s), 1
            e2e += max_gap
        return Generated(model.name, n_in, n_out, t0, ttft, e2e, queue, status, replica, n_out, max_gap, over)
