"""Pure SLO arithmetic: attainment rows and multi-window burn-rate alerts
from the judge's counts (docs/slo.md). No I/O, so every state is a unit test.

Counts are dicts keyed by SLO_COUNTS (n, met_n, failed_n, <metric>_miss_n).
* attainment = met / n; a failed generation (error, abandoned) is never met
  unless the SLO leaves failures out (then it is not in n either);
* burn rate over a span = (1 - attainment) / (1 - target): 1 spends the
  error budget exactly over the SLO period;
* the phase that burns the budget is the one of the objective with the most
  misses, so the alert links that phase's runbook.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from phasemeter.alerts.slo_rules import OBJECTIVES, SLO_COUNTS, BurnRule, Slo

OK, FIRING, INSUFFICIENT = "ok", "firing", "insufficient data"


def unpack(counts) -> dict[str, int]:
    """The SQL `counts` array -> named counts (all zero for no rows)."""
    values = list(counts) if counts is not None else []
    return {k: int(values[i]) if i < len(values) else 0 for i, k in enumerate(SLO_COUNTS)}


def add(a: dict[str, int], b: dict[str, int]) -> dict[str, int]:
    return {k: a.get(k, 0) + b.get(k, 0) for k in SLO_COUNTS}


def attainment(c: dict[str, int]) -> float | None:
    return c["met_n"] / c["n"] if c["n"] else None


def burn_rate(c: dict[str, int], slo: Slo) -> float | None:
    att = attainment(c)
    return None if att is None else (1.0 - att) / slo.budget


def culprit(c: dict[str, int], slo: Slo) -> tuple[str, str | None]:
    """(phase, objective) burning the budget: the objective with the most
    misses. e2e_s spans both phases, so it is attributed through the phase
    objectives beside it; failures outnumbering every objective's misses are
    "errors". (phase "none": nothing missed.)"""
    misses = {m: c[f"{m}_miss_n"] for m, _ in slo.objectives}
    top = max(misses, key=lambda m: (misses[m], -list(OBJECTIVES).index(m)), default=None)
    if c["failed_n"] and c["failed_n"] > (misses[top] if top else 0):
        return "errors", None
    if top is None or misses[top] == 0:
        return "none", None
    phase = OBJECTIVES[top][1]
    if phase is None:  # e2e_s: which phase's own objectives miss more
        per = {p: sum(v for m, v in misses.items() if OBJECTIVES[m][1] == p) for p in ("prefill", "decode")}
        has = {p: any(OBJECTIVES[m][1] == p for m in misses) for p in per}
        if per["prefill"] or per["decode"]:
            phase = "prefill" if per["prefill"] >= per["decode"] else "decode"
        elif has["prefill"] != has["decode"]:
            phase = "decode" if has["prefill"] else "prefill"  # the declared phase held: the other one is slow
        else:
            phase = "prefill"  # e2e_s alone cannot tell the phases apart (docs/slo.md)
    return phase, top


def row(slo: Slo, c: dict[str, int], span_s: float) -> dict:
    """One attainment row's derived values (the counts are kept beside them)."""
    att, burn = attainment(c), burn_rate(c, slo)
    phase, objective = culprit(c, slo)
    out = {"attainment": att, "target": slo.target, "met_n": c["met_n"], "n": c["n"],
           "failed_share": c["failed_n"] / c["n"] if c["n"] else None}
    for metric, _ in slo.objectives:
        out[f"{metric}_miss_share"] = c[f"{metric}_miss_n"] / c["n"] if c["n"] else None
    out.update(burn_rate=burn, budget_left=None if burn is None else 1.0 - burn,
               goodput_per_s=c["met_n"] / span_s if span_s > 0 else None,
               burning=phase if att is not None and att < 1 else "none",
               burning_objective=objective if att is not None and att < 1 else None)
    return out


@dataclass(frozen=True)
class BurnResult:
    slo: Slo
    rule: BurnRule
    model: str
    at: datetime
    state: str
    burn_long: float | None
    burn_short: float | None
    n_long: int
    n_short: int
    phase: str                 # prefill | decode | errors | none
    objective: str | None      # the objective with the most misses (long window)
    long: dict = field(default_factory=dict, compare=False)   # the long window's counts

    @property
    def firing(self) -> bool:
        return self.state == FIRING

    def evidence(self) -> str:
        c = self.long
        if not c.get("n"):
            return ""
        parts = [f"{m} missed by {c[f'{m}_miss_n'] / c['n']:.1%}" for m, _ in self.slo.objectives]
        parts.append(f"failed {c['failed_n'] / c['n']:.1%}")
        return ", ".join(parts)


def evaluate(slo: Slo, rule: BurnRule, model: str, at: datetime, long: dict[str, int],
             short: dict[str, int]) -> BurnResult:
    """Fires when both windows burn at least `factor`; either window with
    fewer than min_samples generations is insufficient data (never fires)."""
    b_long, b_short = burn_rate(long, slo), burn_rate(short, slo)
    if long["n"] < rule.min_samples or short["n"] < rule.min_samples or b_long is None or b_short is None:
        state = INSUFFICIENT
    elif b_long >= rule.factor and b_short >= rule.factor:
        state = FIRING
    else:
        state = OK
    phase, objective = culprit(long, slo)
    return BurnResult(slo, rule, model, at, state, b_long, b_short, long["n"], short["n"], phase, objective, long)


def windows_from_rings(rings: dict[int, dict[str, int]], windows: list[int]) -> dict[int, dict[str, int]]:
    """sql/slo_windows.sql counts each generation once, in the smallest window
    holding it (ring i = [at - w_i, at - w_(i-1))); a window is the sum of its rings."""
    out, total = {}, {k: 0 for k in SLO_COUNTS}
    for i, w in enumerate(sorted(windows), start=1):
        total = add(total, rings.get(i, {}))
        out[w] = total
    return out
