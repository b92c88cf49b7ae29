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

from phasemeter.timeparse import ArgError

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
