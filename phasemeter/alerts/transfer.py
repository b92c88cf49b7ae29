"""The transfer alert family: in prefill/decode disaggregated serving, the
KV cache's move from the prefill pool to the decode pool got slow.

Pure: one `transfer_window` frame (phasemeter.query.rows.Rows, what
`runner.rows` returns; or a DataFrame) + a Rule -> Results, so each state is a
unit test on a small frame. The signature it looks for (docs/alerts.md):
TTFT rose, prefill compute held, the transfer rose. All three must hold:
  * the transfer's percentile rose by more than the rule's threshold and is
    at least its floor (a rise from 2 ms to 5 ms pages nobody);
  * the TTFT at the same percentile rose by at least TTFT_RISE: a slower
    transfer the client never felt is no incident;
  * the median prefill compute throughput (input_tokens over the TTFT left
    after the queue and the transfer) did not drop by the rule's threshold
    or more: when compute slowed too, the prefill slow-tail rule and its
    runbook sections own it, and this family stays quiet rather than page
    twice for one cause.
A frame holds only generations with a transfer time, so a store without
P/D traffic gives no rows and no result.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

# _num, _ratio: evaluate's null-safe readings, shared by every rule family.
from phasemeter.alerts.evaluate import FIRING, INSUFFICIENT, OK, Result, _num, _ratio, stall_value, window_sides
from phasemeter.alerts.rules import Rule
from phasemeter.query.rows import Rows, of

if TYPE_CHECKING:  # annotations only: `phasemeter --help` must not load pandas
    import pandas as pd

# TTFT must have risen at least this much for the transfer to be the incident.
TTFT_RISE = 0.10


def _change(cur: float | None, base: float | None) -> float | None:
    ratio = _ratio(cur, base)
    return None if ratio is None else ratio - 1


def judge(rule: Rule, n_cur: int, n_base: int, kv: tuple[float | None, float | None],
          ttft: tuple[float | None, float | None], compute: tuple[float | None, float | None]) -> str:
    """OK, FIRING or INSUFFICIENT from (current, baseline) of the transfer,
    TTFT and compute. Insufficient: too few transfers, or no value to compare."""
    kv_cur, kv_base = kv
    if n_cur < rule.min_current or n_base < rule.min_baseline or kv_cur is None or kv_base is None:
        return INSUFFICIENT
    transfer_up = kv_cur >= rule.floor and kv_cur > kv_base * (1 + rule.threshold)
    ttft_change, compute_change = _change(*ttft), _change(*compute)
    ttft_up = ttft_change is not None and ttft_change >= TTFT_RISE
    compute_flat = compute_change is not None and compute_change > -rule.threshold
    return FIRING if transfer_up and ttft_up and compute_flat else OK


def diagnose(rule: Rule, kv: tuple, ttft_change: float | None, compute_change: float | None) -> str:
    p = f"p{rule.percentile:g}"
    return (f"KV transfer {p} {stall_value('kv_transfer_s', kv[1])} → {stall_value('kv_transfer_s', kv[0])}, "
            f"TTFT {p} {ttft_change:+.0%}, prefill compute steady ({compute_change:+.0%}) → "
            "the move between the pools: interconnect, KV connector or a decode pool's intake "
            "(prefill runbook, section D)")


def evaluate_transfer(rule: Rule, frame: Rows | pd.DataFrame | None, at: datetime,
                      buckets: tuple[str, ...] = ()) -> list[Result]:
    """Every model × bucket with transfers in either window."""
    out: list[Result] = []
    if frame is None or frame.empty:
        return out
    sides = window_sides(of(frame))
    for model, bucket in sorted({(model, bucket) for model, bucket, _ in sides}):
        if not rule.covers(bucket) or (buckets and bucket not in buckets):
            continue
        cur, base = sides.get((model, bucket, "current"), {}), sides.get((model, bucket, "baseline"), {})
        n_cur, n_base = int(cur.get("kv_n", 0) or 0), int(base.get("kv_n", 0) or 0)
        kv = (_num(cur.get("kv_q")), _num(base.get("kv_q")))
        ttft = (_num(cur.get("ttft_q")), _num(base.get("ttft_q")))
        compute = (_num(cur.get("compute_p50")), _num(base.get("compute_p50")))
        state = judge(rule, n_cur, n_base, kv, ttft, compute)
        ttft_change, compute_change = _change(*ttft), _change(*compute)
        evidence = diagnose(rule, kv, ttft_change, compute_change) if state == FIRING else ""
        covered = _num(base.get("covered_ms"))
        out.append(Result(rule, model, bucket, at, state, kv[0], kv[1], n_cur, n_base, _change(*kv), None, None,
                          evidence, engine_change=compute_change,
                          baseline_covered_s=None if covered is None else covered / 1000))
    return out


__all__ = ["evaluate_transfer", "judge", "diagnose", "TTFT_RISE", "OK", "FIRING", "INSUFFICIENT"]
