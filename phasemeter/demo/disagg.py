"""A prefill/decode disaggregated deployment for the synthetic traffic
(`phasemeter demo --pd`): each generation's prefill runs on one of the
prefill pools, its KV cache moves, and one of the decode pools streams the
answer. One decode pool is slow (fewer GPUs behind it, or a degraded node),
which per-model bands average away and `--by decode_replica` shows.
Pure: a Generated in, a Generated out, from a random stream of its own.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, replace

from phasemeter.demo.synthetic import Generated


@dataclass(frozen=True)
class Deployment:
    prefill_pools: tuple[str, ...] = ("prefill-0", "prefill-1")
    decode_pools: tuple[str, ...] = ("decode-0", "decode-1", "decode-2")
    slow_pool: str = "decode-2"        # this pool decodes ...
    slow_factor: float = 2.5           # ... this many times slower
    kv_base_s: float = 0.012           # the transfer: a fixed cost ...
    kv_per_token_s: float = 4e-7       # ... plus the cache's size, which grows with the prompt
    kv_sigma: float = 0.3

    def route(self, g: Generated, rng: random.Random) -> Generated:
        """`g` as the deployment serves it: the transfer is part of the TTFT
        (the decode pool streams the first token after it), the slow pool's
        decode takes longer. A request that failed before its first token
        never left its prefill pool: no decode pool, no transfer."""
        prefill = rng.choice(self.prefill_pools)
        if g.ttft_s is None:
            return replace(g, prefill_replica=prefill)
        decode = rng.choice(self.decode_pools)
        kv = (self.kv_base_s + self.kv_per_token_s * g.input_tokens) * rng.lognormvariate(0, self.kv_sigma)
        factor = self.slow_factor if decode == self.slow_pool else 1.0
        ttft = g.ttft_s + kv
        e2e = ttft + (g.e2e_s - g.ttft_s) * factor
        gap = None if g.max_gap_s is None else min(g.max_gap_s * factor, e2e)
        return replace(g, ttft_s=ttft, e2e_s=e2e, max_gap_s=gap, prefill_replica=prefill, decode_replica=decode,
                       kv_transfer_s=math.floor(kv * 1e6) / 1e6)


DEPLOYMENT = Deployment()
