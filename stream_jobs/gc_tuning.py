"""The worker's settings for CPython's cyclic garbage collector.

Why: the worker allocates a few objects per Kafka record and per phase
(Faust's events, decoded fields, the join's dicts) on top of a large,
long-lived heap (Faust, aiokafka, the store's client, the join's table).
With CPython's defaults a young collection runs every 700 net allocations,
and the older generations are scanned in turn, heap and all. In a batch of
60,000 phases that cost 20-35 % of the batch's split (BENCHMARKS.md §20).

Reference counting frees nearly everything the worker allocates; the
collector is only needed for cycles, which it still finds, less often:

* `gc.freeze()` moves everything that exists once the app is built (modules,
  classes, Faust's services) to a permanent generation that collections
  skip;
* young collections run every 50,000 allocations, and each older
  generation after 20 of the one below.
"""

from __future__ import annotations

import gc

THRESHOLDS = (50_000, 20, 20)


def tune() -> None:
    """Call once, after the app is built and before it starts."""
    gc.collect()  # what start-up left as garbage is not frozen with the rest
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
