"""Pure alert logic: one `alert_window` frame + a Rule -> states and evidence.

No I/O here, so every state (ok / firing / insufficient data) and every line
of the root-cause map (docs/metrics.md) is a plain unit test on small DataFrames.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from phasemeter.alerts.rules import Rule
from phasemeter.textgrid import grid

if TYPE_CHECKING:  # only in annotations: `phasemeter --help` imports this module and must not load pandas
    import pandas as pd

OK, FIRING, INSUFFICIENT = "ok", "firing", "insufficient data"
# Each metric's (sample count, value) columns in its frame: alert_window for
# the throughputs, stall_window for the stall family.
COLUMNS = {"prefill_tps": ("prefill_n", "prefill_q"), "decode_tps": ("decode_n", "decode_q"),
           "max_gap_s": ("gap_n", "gap_q"), "stalled_share": ("verdict_n", "stalled_share"),
           "kv_transfer_s": ("kv_n", "kv_q")}  # transfer_window (alerts/transfer.py)
OTHER = {"prefill": "decode", "decode": "prefill"}
# For decode: queue_s p95 must at least grow this much to be called "rose".
QUEUE_RISE = 1.5


@dataclass(frozen=True)
class Result:
    rule: Rule
    model: str
    bucket: str
    at: datetime
    state: str
    current: float | None      # percentile of rule.metric in the window
    baseline: float | None
    n_current: int             # non-null samples of rule.metric
    n_baseline: int
    change: float | None       # current/baseline - 1 (-0.4 = 40% slower)
    other_change: float | None  # the other phase, same percentile, same model × bucket
    queue_ratio: float | None  # queue_s p95 current / baseline
    evidence: str = ""         # root-cause hint, only when firing
    queue_share: tuple[float | None, float | None] = (None, None)  # queue / TTFT (current, baseline)
    engine_change: float | None = None  # engine prefill (queue excluded), same percentile
    baseline_covered_s: float | None = None  # first to last baseline generation

    @property
    def thin_baseline(self) -> bool:
        """The baseline's data spans under half of what the rule asks for: an
        incident inside it is absorbed and looks resolved."""
        return (self.baseline_covered_s is not None and self.n_baseline > 0
                and self.baseline_covered_s < 0.5 * self.rule.baseline.nominal_s)

    @property
    def firing(self) -> bool:
        return self.state == FIRING


def _num(value) -> float | None:
    """NaN/None -> None: an empty window has no percentile (never 0)."""
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _ratio(cur: float | None, base: float | None) -> float | None:
    return cur / base if cur is not None and base is not None and base > 0 else None


def diagnose(phase: str, threshold: float, queue_ratio: float | None, other_change: float | None,
             queue_share: tuple[float | None, float | None] = (None, None),
             engine_change: float | None = None) -> str:
    """Which runbook section a firing alert most likely belongs to (docs/alerts.md).

    Prefill as the gateway sees it includes the queue. Whether the queue is
    the cause is decided by engine prefill (queue excluded): if it fell as
    much as total prefill, compute slowed, however much the queue grew; if it
    held, the extra time was spent waiting. The queue's share of TTFT before
    and after is stated either way.
    """
    other = OTHER[phase]
    if other_change is not None and other_change <= -threshold:
        return (f"both phases dropped ({other} {other_change:+.0%}) → node fault / model swap / bad deploy")
    rose = queue_ratio is not None and queue_ratio >= QUEUE_RISE
    if phase == "prefill":
        share_cur, share_base = queue_share
        if engine_change is None or share_cur is None or share_base is None:
            return "prefill slowed; no queue_s reported, so waiting and computing cannot be told apart " \
                   "→ compute contention"
        share = f"queue {share_base:.0%} → {share_cur:.0%} of TTFT"
        if engine_change <= -threshold:
            return f"engine prefill (queue excluded) {engine_change:+.0%}, {share} → compute contention"
        return f"engine prefill steady ({engine_change:+.0%}), {share} → queue/scheduler saturation"
    steady = "no data" if other_change is None else f"{other_change:+.0%}"
    text = f"decode slowed, prefill steady ({steady}) → KV-cache/batch"
    return text + (f"; queue_s p95 also rose {queue_ratio:.1f}× (preemption?)" if rose else "")


def _side(df: pd.DataFrame, model: str, bucket: str, part: str) -> dict:
    rows = df[(df["model"] == model) & (df["input_bucket"] == bucket) & (df["part"] == part)]
    return rows.iloc[0].to_dict() if len(rows) else {}


def evaluate(rule: Rule, frame: pd.DataFrame, at: datetime, buckets: tuple[str, ...] = ()) -> list[Result]:
    """Every model × bucket seen in either window (a vanished or brand-new model
    shows up as insufficient data, never as an error or a false alarm)."""
    out: list[Result] = []
    if frame is None or frame.empty:
        return out
    phase, other = rule.phase, OTHER[rule.phase]
    n_col, v_col = COLUMNS[rule.metric]
    pairs = sorted(set(zip(frame["model"], frame["input_bucket"])))
    for model, bucket in pairs:
        if not rule.covers(bucket) or (buckets and bucket not in buckets):
            continue
        cur, base = _side(frame, model, bucket, "current"), _side(frame, model, bucket, "baseline")
        n_cur, n_base = int(cur.get(n_col, 0) or 0), int(base.get(n_col, 0) or 0)
        v_cur, v_base = _num(cur.get(v_col)), _num(base.get(v_col))
        if rule.rises:
            out.append(_rise(rule, model, bucket, at, n_cur, n_base, v_cur, v_base, base))
            continue
        ratio = _ratio(v_cur, v_base)
        other_ratio = _ratio(_num(cur.get(f"{other}_q")), _num(base.get(f"{other}_q")))
        other_change = None if other_ratio is None else other_ratio - 1
        queue_ratio = _ratio(_num(cur.get("queue_p95")), _num(base.get("queue_p95")))
        shares = (_num(cur.get("queue_share")), _num(base.get("queue_share")))
        engine_ratio = _ratio(_num(cur.get("engine_q")), _num(base.get("engine_q")))
        engine_change = None if engine_ratio is None else engine_ratio - 1
        covered = _num(base.get("covered_ms"))
        if n_cur < rule.min_current or n_base < rule.min_baseline or ratio is None:
            state = INSUFFICIENT
        elif ratio < 1 - rule.threshold:
            state = FIRING
        else:
            state = OK
        evidence = (diagnose(phase, rule.threshold, queue_ratio, other_change, shares, engine_change)
                    if state == FIRING else "")
        out.append(Result(rule, model, bucket, at, state, v_cur, v_base, n_cur, n_base,
                          None if ratio is None else ratio - 1, other_change, queue_ratio, evidence,
                          shares, engine_change, None if covered is None else covered / 1000))
    return out


def _rise(rule: Rule, model: str, bucket: str, at: datetime, n_cur: int, n_base: int, v_cur: float | None,
          v_base: float | None, base: dict) -> Result:
    """The stall family: fires when the current value is at least the rule's
    floor and over baseline × (1 + threshold); a clean baseline (0 stalled)
    makes any current value over the floor a rise."""
    if n_cur < rule.min_current or n_base < rule.min_baseline or v_cur is None or v_base is None:
        state = INSUFFICIENT
    elif v_cur >= rule.floor and v_cur > v_base * (1 + rule.threshold):
        state = FIRING
    else:
        state = OK
    change = v_cur / v_base - 1 if v_cur is not None and v_base else None
    evidence = diagnose_stalls(rule, v_cur, v_base) if state == FIRING else ""
    covered = _num(base.get("covered_ms"))
    return Result(rule, model, bucket, at, state, v_cur, v_base, n_cur, n_base, change, None, None, evidence,
                  baseline_covered_s=None if covered is None else covered / 1000)


def stall_value(metric: str, v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.1%}" if metric == "stalled_share" else f"{v:.2f}s"


def diagnose_stalls(rule: Rule, v_cur: float | None, v_base: float | None) -> str:
    """Streams stopping mid-answer: preemption or KV-cache pressure first."""
    what = "stalled share" if rule.metric == "stalled_share" else f"p{rule.percentile:g} largest chunk gap"
    return (f"decode stalls: {what} {stall_value(rule.metric, v_base)} → {stall_value(rule.metric, v_cur)} "
            "→ preemption / KV-cache pressure (decode runbook, section A)")


def order(results: list[Result], bucket_labels: list[str], rule_names: list[str]) -> list[Result]:
    """Rule file order, then model, then buckets in edge order (2k-8k before 8k-32k)."""
    rank = {b: i for i, b in enumerate(bucket_labels)}
    rules = {n: i for i, n in enumerate(rule_names)}
    return sorted(results, key=lambda r: (rules.get(r.rule.name, 99), r.model, rank.get(r.bucket, 99), r.bucket))


def as_dict(r: Result) -> dict:
    return {"rule": r.rule.name, "phase": r.rule.phase, "metric": r.rule.metric,
            "percentile": f"p{r.rule.percentile:g}", "model": r.model, "input_bucket": r.bucket,
            "at": r.at.isoformat(), "state": r.state, "current": r.current, "baseline": r.baseline,
            "change_pct": None if r.change is None else round(100 * r.change, 2),
            "n_current": r.n_current, "n_baseline": r.n_baseline,
            "other_phase_change_pct": None if r.other_change is None else round(100 * r.other_change, 2),
            "queue_p95_ratio": r.queue_ratio, "queue_share_of_ttft": r.queue_share[0],
            "queue_share_of_ttft_baseline": r.queue_share[1],
            "engine_prefill_change_pct": None if r.engine_change is None else round(100 * r.engine_change, 2),
            "baseline_nominal_s": r.rule.baseline.nominal_s, "baseline_covered_s": r.baseline_covered_s,
            "baseline_thin": r.thin_baseline,
            "evidence": r.evidence, "runbook": r.rule.runbook,
            "threshold_pct": round(100 * r.rule.threshold, 2)}


def _fmt(v: float | None, metric: str = "") -> str:
    if metric in COLUMNS and metric not in ("prefill_tps", "decode_tps"):
        return stall_value(metric, v)
    return "-" if v is None else (f"{v:,.0f}" if abs(v) >= 100 else f"{v:.2f}")


def table(results: list[Result]) -> str:
    """Aligned text; firing rows are followed by phase, runbook and evidence."""
    head = ["rule", "model", "bucket", "current", "baseline", "change", "n cur", "n base", "state"]
    rows = [[r.rule.name, r.model, r.bucket, _fmt(r.current, r.rule.metric), _fmt(r.baseline, r.rule.metric),
             "-" if r.change is None else f"{r.change:+.1%}", str(r.n_current), str(r.n_baseline),
             r.state.upper() if r.firing else r.state] for r in results]
    lines = grid(head, rows, right={3, 4, 5, 6, 7})
    if not rows:
        lines.append("(no generations in the evaluated windows)")
    for r in results:
        if r.firing and r.rule.rises:
            lines.append(f"FIRING {r.rule.alertname} [{r.rule.phase}] {r.model} {r.bucket}: {r.evidence} vs "
                         f"{r.rule.baseline.describe()} ({coverage(r)}); runbook: {r.rule.runbook}")
        elif r.firing:
            lines.append(f"FIRING {r.rule.alertname} [{r.rule.phase}] {r.model} {r.bucket}: "
                         f"p{r.rule.percentile:g} {r.rule.metric} {r.change:+.0%} vs {r.rule.baseline.describe()}"
                         f" ({coverage(r)}); {r.evidence}; runbook: {r.rule.runbook}")
    thin = [r for r in results if r.thin_baseline]
    if thin:
        r = min(thin, key=lambda x: x.baseline_covered_s)
        lines.append(f"note: {len(thin)} baseline(s) cover under half their span (shortest: {r.rule.name} "
                     f"{r.model} {r.bucket}, {coverage(r)} of {r.rule.baseline.describe()}); an incident inside "
                     "a baseline is absorbed by it and can look resolved")
    return "\n".join(lines)


def coverage(r: Result) -> str:
    """What the baseline really holds: its span and sample count."""
    if r.baseline_covered_s is None:
        return f"baseline n={r.n_baseline}"
    return f"baseline covers {_human_s(r.baseline_covered_s)}, n={r.n_baseline}"


def _human_s(seconds: float) -> str:
    if seconds >= 5400:
        return f"{seconds / 3600:.1f}h"
    return f"{seconds / 60:.0f}m" if seconds >= 90 else f"{seconds:.0f}s"
