"""A generation's checks across fields and its metrics (docs/metrics.md), written once, on columns.

The worker evaluates them on whole batches (columnar.py, numpy as `xp`), the row path (`derive.validate`,
`derive.derive`) on one row's Python numbers (`ONE`). A null is NaN, so comparisons with it are false and
formulas over it NaN, stored as null: never zero or inf. Free of numpy, for the gateway install (contract.py's).
"""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import NamedTuple

from . import reasons as R
from .contract import MAX_DURATION_S, MAX_TOKENS, MIN_T0, Rejection

NULL = math.nan


class Fields(NamedTuple):
    """A generation's numbers, a value or a column each: times in seconds (floats), counts (ints), NaN
    for a null ttft_s, queue_s, cached_input_tokens, kv_transfer_s or streamed."""
    t0: object
    e2e: object
    ttft: object
    queue: object
    n_in: object
    n_out: object
    cached: object
    kv: object  # kv_transfer_s (contract.PD_FIELDS)
    streamed: object  # contract.STREAMED: 1 streamed, 0 not, NaN where the event did not say


# numpy's `where` and `isfinite` for one row of Python numbers.
ONE = SimpleNamespace(where=lambda cond, a, b: a if cond else b, isfinite=math.isfinite)

# The checks across fields, each (reason, the rows it refuses, its detail); a row's reason is the first that holds.
CHECKS = (
    (R.ABSURD, lambda f, latest, oldest: (f.t0 != f.t0) | (f.t0 < MIN_T0) | (f.t0 > latest),
     lambda f, oldest: f"t0={f.t0} is not epoch seconds between 2000 and now+1d"),
    (R.OUTSIDE_RETENTION, lambda f, latest, oldest: f.t0 < oldest,
     lambda f, oldest: f"t0={f.t0} is older than the raw retention (PHASEMETER_RAW_TTL_DAYS, before {oldest:.0f}): "
                       "the store would delete it unseen"),
    (R.IMPOSSIBLE_ORDER, lambda f, latest, oldest: f.e2e < f.ttft,
     lambda f, oldest: f"t_end before t_first (e2e_s={f.e2e} < ttft_s={f.ttft})"),
    (R.IMPOSSIBLE_ORDER, lambda f, latest, oldest: (f.queue > f.ttft) | ((f.ttft != f.ttft) & (f.queue > f.e2e)),
     lambda f, oldest: f"t_scheduled after t_first/t_end (queue_s={f.queue})"),
    # A call not streamed (0) has no first token: kept, with null phases. NaN != 0 holds a row that did not say.
    (R.INCONSISTENT, lambda f, latest, oldest: (f.ttft != f.ttft) & (f.n_out > 0) & (f.streamed != 0),
     lambda f, oldest: "output_tokens > 0 but no first token (ttft_s null; a call not streamed says "
                       "streamed: false)"),
    (R.INCONSISTENT, lambda f, latest, oldest: f.cached > f.n_in,
     lambda f, oldest: f"cached_input_tokens={int(f.cached)} > input_tokens"),
    # The KV cache moves before the first token: inside ttft_s, or inside e2e_s when there was none.
    (R.INCONSISTENT, lambda f, latest, oldest: _transfer_late(f.kv, f.ttft, f.e2e),
     lambda f, oldest: _transfer_detail(f.kv, f.ttft, f.e2e)),
)


def _transfer_late(kv, ttft, e2e):
    return (kv > ttft) | ((ttft != ttft) & (kv > e2e))


def _transfer_detail(kv, ttft, e2e) -> str:
    if ttft == ttft:
        return f"kv_transfer_s={kv} > ttft_s={ttft} (the transfer happens before the first token)"
    return f"kv_transfer_s={kv} > e2e_s={e2e}"


def check_transfer_within(kv_transfer_s: float | None, ttft_s: float | None, e2e_s: float | None):
    """The transfer check of CHECKS alone, for a producer or OTLP span that knows only these three (None: null)."""
    kv, ttft, e2e = (NULL if v is None else v for v in (kv_transfer_s, ttft_s, e2e_s))
    return Rejection(R.INCONSISTENT, _transfer_detail(kv, ttft, e2e)) if _transfer_late(kv, ttft, e2e) else None


def out_of_range(f: Fields):
    """The rows (a bool, or a bool column) with a duration or count outside the contract's range (contract's
    check_duration, check_gap, check_count). The C decoder takes any number of the right type, so an envelope
    holding one still decodes whole; the full path names these rows, before CHECKS. A null (NaN) is in range."""
    bad = False
    for seconds in (f.e2e, f.ttft, f.queue, f.kv):
        bad = bad | (seconds < 0) | (seconds > MAX_DURATION_S)
    for count in (f.n_in, f.n_out, f.cached):
        bad = bad | (count < 0) | (count > MAX_TOKENS)
    return bad


def failing(f: Fields, latest: float, oldest: float) -> list:
    """The rows each of CHECKS refuses. `latest`: the latest t0 accepted (now + a day); `oldest`: the retention's."""
    return [test(f, latest, oldest) for _, test, _ in CHECKS]


def rejection_of(check: int, f: Fields, oldest: float):
    """The Rejection of one row (Python numbers) refused by CHECKS[check]."""
    reason, _, detail = CHECKS[check]
    return Rejection(reason, detail(f, oldest))


def check_one(f: Fields, latest: float, oldest: float):
    """The row path: a batch of one row, its Rejection or None."""
    for reason, test, detail in CHECKS:
        if test(f, latest, oldest):
            return Rejection(reason, detail(f, oldest))
    return None


def _rate(xp, count, seconds):
    """count / seconds; NaN without a time, with one <= 0, or where the rate overflows (a subnormal
    ttft_s=2.2e-309 once gave inf, which no percentile survives)."""
    ok = seconds > 0
    value = count / xp.where(ok, seconds, 1.0)
    return xp.where(ok & xp.isfinite(value), value, NULL)


def metrics(f: Fields, xp=ONE) -> dict:
    """The derived metrics of docs/metrics.md, NaN where null."""
    decode_s = f.e2e - f.ttft
    decodes = f.n_out > 1
    decode_tps = _rate(xp, xp.where(decodes, f.n_out - 1, NULL), decode_s)
    has_decode = decode_tps == decode_tps
    return {
        "decode_s": decode_s,
        "prefill_tps": _rate(xp, f.n_in, f.ttft),
        # t_first - (t_scheduled or t0)
        "prefill_tps_uncached": _rate(xp, f.n_in - f.cached, f.ttft - xp.where(f.queue == f.queue, f.queue, 0.0)),
        "decode_tps": decode_tps,
        "tpot_s": xp.where(has_decode, decode_s / xp.where(has_decode, f.n_out - 1, 1), NULL),
    }
