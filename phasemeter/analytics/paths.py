"""Raw (exact) or rollup? A pure decision, unit-tested on its own.

Rollup when the caller forces it; otherwise by the store's rule
(schema/0023_read_path_rule.sql, read through sql/read_path.sql): the step is
whole minutes (the rollup's grain) and the window is long (> 6 h) or would
read many raw rows (> 5M). The Grafana panels choose by the same rule, in SQL,
so a panel takes the CLI's path. Re-bucketing needs raw input_tokens, so it
is exact-only; so are the choices the rollup cannot answer (`exact_only`:
--abandoned exclude, --prefill engine or uncached, see variants.py): they
route to the exact path, and with --rollup they fail naming both flags.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from phasemeter.timeparse import STEPS, ArgError

ROLLUP_GRAIN_S = 60  # the minute tier's cells; --rollup needs whole minutes before any store is asked


@dataclass(frozen=True)
class PathChoice:
    path: str    # "exact" | "rollup"
    reason: str  # one line, shown in output meta


def choose_path(window_s: float, step_s: int, *, force: str | None = None, rebucket: bool = False,
                rule: dict | Callable[[], dict] | None = None,
                exact_only: dict[str, str] | None = None) -> PathChoice:
    """`rule`: the store's verdict for this window, step and filters (a row of
    read_path_view), or a callable returning it: only asked when nothing else
    decides. `exact_only`: {flag as typed: why the rollup cannot answer it}."""
    exact_only = exact_only or {}
    whole_minutes = step_s >= ROLLUP_GRAIN_S and step_s % ROLLUP_GRAIN_S == 0
    if force == "exact":
        return PathChoice("exact", "--exact")
    if force == "rollup":
        if rebucket:
            raise ArgError("--buckets recomputes buckets from raw input_tokens, so it needs the exact path; "
                           "drop --rollup")
        if exact_only:
            raise ArgError(f"{' and '.join(exact_only)} cannot be answered with --rollup: "
                           f"{'; '.join(exact_only.values())}. Drop --rollup (without it the exact path "
                           "is chosen automatically)")
        if not whole_minutes:
            raise ArgError(f"--rollup needs a step of whole minutes (the rollup's grain), got {step_s}s")
        return PathChoice("rollup", "--rollup")
    if force is not None:
        raise ValueError(f"force={force!r}: expected 'exact', 'rollup' or None")
    if rebucket:
        return PathChoice("exact", "--buckets re-bucketing reads raw input_tokens")
    if exact_only:
        return PathChoice("exact", f"{' and '.join(exact_only)} needs raw rows ({'; '.join(exact_only.values())})")
    if rule is None:
        raise ValueError("rule: the store's verdict (sql/read_path.sql) is needed to choose a path")
    return from_rule(rule() if callable(rule) else rule)


def from_rule(verdict: dict) -> PathChoice:
    """The store's verdict (columns of read_path_view) as a path and the line
    that says why, quoting the limits the store applied."""
    window_h, rows = float(verdict["window_s"]) / 3600, verdict.get("raw_rows")
    why = verdict["rule"]
    if why == "step":
        return PathChoice("exact", f"step {int(verdict['step_s'])}s is finer than / not a multiple of the rollup's "
                                   f"{int(verdict['grain_s']) // 60} min")
    if why == "window":
        return PathChoice("rollup", f"window {window_h:.1f} h > {float(verdict['rollup_window_s']) / 3600:g} h")
    if why == "rows":
        return PathChoice("rollup", f"~{int(rows):,} raw rows > {int(verdict['rollup_raw_rows']):,}")
    if why == "short":
        return PathChoice("exact", f"short window ({window_h:.1f} h), {int(rows):,} raw rows")
    raise ValueError(f"rule {why!r}: expected step, window, rows or short")


# The coarser tiers of the rollup (schema/0014, 0019, 0015), finest first:
# name and grain. Each nests inside the one before it (three whole hours; a
# UTC day is eight 3-hour cells). The 3-hour tier is there for the auto step
# of long windows (3 h from 25 days on, then 6 h, 12 h, 1 d: each step then
# reads one cell or a few instead of three hours or more).
TIER_GRAINS: tuple[tuple[str, int], ...] = (("hour", 3600), ("hour3", 10800), ("day", 86400))


@dataclass(frozen=True)
class TierPlan:
    """Which part of [start, end) each coarser tier answers, epoch seconds,
    [lo, hi) per tier; the minute tier answers the rest, and each tier answers
    its range minus the range of the next tier read inside it. The ranges
    always nest, as the views check (schema/0020, 0021): a tier not read gets
    the range of the next tier read inside it, or an empty range at the end of
    the one it nests in. `read`: the tiers chosen, finest first."""
    ranges: dict[str, tuple[int, int]]
    read: tuple[str, ...] = ()

    def states_per_series(self, start_s: int, end_s: int) -> int:
        """How many cell states one model x bucket merges over [start_s, end_s)."""
        spans = [(end_s - start_s, 60)] + [(self.ranges[n][1] - self.ranges[n][0], g)
                                           for n, g in TIER_GRAINS if n in self.read]
        inner = [s for s, _ in spans[1:]] + [0]
        return sum((span - inside) // grain for (span, grain), inside in zip(spans, inner))

    def used(self) -> list[str]:
        return list(self.read)

    def answers(self, name: str, at: int) -> bool:
        """Whether tier `name` answers the cell that starts at `at`: inside its
        range and outside the next coarser tier's (the ranges nest)."""
        names = [n for n, _ in TIER_GRAINS]
        lo, hi = self.ranges[name]
        i = names.index(name) + 1
        inner = self.ranges[names[i]] if i < len(names) else (hi, hi)
        return lo <= at < hi and not inner[0] <= at < inner[1]


def tier_plan(start_s: int, end_s: int, step_s: int, read_from: dict[str, int | None],
              use_tiers: bool = True) -> TierPlan:
    """Pick the coarsest tier for each part of a rollup window [start_s, end_s)
    (whole minutes). A tier answers only whole cells of its grain inside the
    window, only when its grain divides step_s (each cell then falls inside one
    step: toStartOfInterval on seconds is epoch-aligned, and so are the cells),
    and only from `read_from[name]` on (None: not at all). The caller passes the
    tier's first cell, or the one after it when that first cell is partial (a
    tier's view only sees rows inserted after it was created; `analytics
    backfill` fills the past). Before that, the finer tier answers.

    A tier whose grain does not divide the step ends the search (the coarser
    grains are its multiples). A tier that holds nothing in the window is
    passed over, so a coarser one may still answer inside it: a tier added by
    a later migration (the 3-hour one) starts empty while the day tier holds
    years."""
    read: dict[str, tuple[int, int]] = {}
    lo, hi = start_s, end_s
    for name, grain in TIER_GRAINS:
        if not use_tiers or step_s % grain:
            break
        first = read_from.get(name)
        if first is None:
            continue
        t_lo = max(-(-lo // grain) * grain, -(-first // grain) * grain)
        t_hi = hi // grain * grain
        if t_lo >= t_hi:
            continue
        read[name] = (t_lo, t_hi)
        lo, hi = t_lo, t_hi
    ranges: dict[str, tuple[int, int]] = {}
    inner = (hi, hi)  # from the coarsest tier in: a tier not read takes the range inside it
    for name, _ in reversed(TIER_GRAINS):
        inner = ranges[name] = read.get(name, inner)
    return TierPlan(ranges, tuple(read))


# -- the auto step (docs/live.md) --------------------------------------------
# A percentile of a cell is only as good as the samples under it: a p1 or p99
# of fewer than 100 values is one of its few extremes, a p5 or p95 of fewer
# than 20 likewise. So the auto step is the finest round step at which most
# cells (at least half of those with any generation) hold enough samples for
# the percentiles shown, between a step giving at most 300 points over the
# window and one giving at least 12.
SAMPLES_FOR = {"p1": 100, "p99": 100, "p5": 20, "p95": 20, "p90": 10}
SHOWN = {"bands": ("p1", "p5", "p50", "p95", "p99"), "latency": ("p50", "p90", "p99"),
         "stalls": ("p50", "p99")}
AUTO_MAX_POINTS, AUTO_MIN_POINTS, AUTO_MOST = 300, 12, 0.5


def samples_needed(shown) -> int:
    return max((SAMPLES_FOR.get(p, 1) for p in shown), default=1)


def auto_candidates(span_s: float, whole_minutes: bool = False) -> list[int]:
    """The ladder's steps within bounds, finest first; whole minutes only when
    the rollup is forced (its grain)."""
    lo = next((s for s in STEPS if span_s / s <= AUTO_MAX_POINTS), STEPS[-1])
    out = [s for s in STEPS if s >= lo and (s == lo or span_s / s >= AUTO_MIN_POINTS)]
    if whole_minutes:
        out = [s for s in out if s % 60 == 0] or [max(60, lo // 60 * 60)]
    return out


def count_grain(span_s: float, candidates: list[int] = ()) -> int:
    """The grain the cell counts are read at (a rollup tier's: 60, 3600 or
    86400): every ladder step above it is a whole number of it, and a window
    gives at most ~2,900 counts per series. The finest candidate instead when
    it is coarser and every candidate is a whole number of it (fewer counts)."""
    grain = 60 if span_s <= 2 * 86400 else 3600 if span_s <= 120 * 86400 else 86400
    lo = candidates[0] if candidates else grain
    return lo if lo > grain and lo % grain == 0 and all(s % lo == 0 for s in candidates) else grain


def sample_step(counts, grain_s: int, candidates: list[int], needed: int) -> int:
    """The finest candidate at which at least AUTO_MOST of the non-empty cells
    hold `needed` samples; the coarsest candidate when none does, the finest
    when nothing is counted. `counts`: (series, cell start epoch s, n) at
    `grain_s`. A step finer than the grain splits a counted cell evenly."""
    counts = [(k, int(t), n) for k, t, n in counts if n > 0]
    if not counts:
        return candidates[0]
    for step in candidates:
        cells: dict = {}
        for series, t, n in counts:
            key, share = ((series, t // step), n) if step >= grain_s else ((series, t), n * step / grain_s)
            cells[key] = cells.get(key, 0) + share
        if sum(v >= needed for v in cells.values()) >= AUTO_MOST * len(cells):
            return step
    return candidates[-1]


def step_rule(needed: int, candidates: list[int]) -> str:
    """The rule as the output's header states it."""
    def fmt(s: int) -> str:
        return next((f"{s // u}{n}" for u, n in ((86400, "d"), (3600, "h"), (60, "m")) if s % u == 0), f"{s}s")
    bound = fmt(candidates[0]) if len(candidates) == 1 else f"{fmt(candidates[0])}–{fmt(candidates[-1])}"
    return (f"auto step: the finest of {bound} at which most cells hold ≥ {needed} generations "
            "(p1/p99 need 100, p5/p95 20)")

