"""A synthetic gateway: realistic-looking generations with a scripted regression.

Used by the demo and the benchmarks. Simulated time sweeps a window (default
the last hour) while the load runs, so a short run fills a whole chart. From
`regress_at` (fraction of the window) on, prefill of long prompts (>= 8k
tokens) gets slower while decode stays flat: the case phasemeter exists for.
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


class SyntheticGateway:
    def __init__(self, start: float, span_s: float, regress_at: float = 0.65,
                 slowdown: float = 2.5, seed: int = 7, models=MODELS):
        self.start, self.span_s = start, span_s
        self.regress_at, self.slowdown = regress_at, slowdown
        self.rng = random.Random(seed)
        self.models = models

    def input_tokens(self) -> int:
        # Log-uniform 40..60k: every default bucket (0-512 ... 32k+) gets traffic.
        return int(math.exp(self.rng.uniform(math.log(40), math.log(60_000))))

    def make(self, progress: float) -> Generated:
        """One generation at `progress` (0..1) through the simulated window."""
        rng = self.rng
        model = rng.choice(self.models)
        n_in = self.input_tokens()
        t0 = self.start + progress * self.span_s + rng.uniform(0, 1.0)
        queue = rng.lognormvariate(math.log(0.02), 0.8)
        prefill_rate = model.prefill_tps * rng.lognormvariate(0, 0.25)
        if progress >= self.regress_at and n_in >= 8192:
            # Long prompts now wait behind each other: slower and a fatter slow tail.
            prefill_rate /= self.slowdown * rng.lognormvariate(0, 0.35)
            queue *= self.slowdown
        replica = f"{model.name}-{rng.randrange(3)}"
        if rng.random() < 0.01:  # failed before the first token
            return Generated(model.name, n_in, 0, t0, None, queue + rng.uniform(0.01, 0.5), queue,
                             "error", replica)
        ttft = queue + n_in / prefill_rate
        n_out = max(1, int(rng.lognormvariate(math.log(180), 0.9)))
        decode_rate = model.decode_tps * rng.lognormvariate(0, 0.15)
        e2e = ttft + (n_out - 1) / decode_rate
        status = "cancelled" if rng.random() < 0.01 else "ok"
        return Generated(model.name, n_in, n_out, t0, ttft, e2e, queue, status, replica)
