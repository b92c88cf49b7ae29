"""Percentile queries at scale: exact or rollup path, re-bucketing, latency.

Every read is a named SQL file run by a Runner (`phasemeter.query.runner`) with
typed, server-side bound parameters (the rollup files read the minute, hour and
day tiers, each over the range `paths.tier_plan` gives it):

| shape                 | exact (raw rows)          | rollup (per-minute states) |
|-----------------------|---------------------------|----------------------------|
| throughput bands      | bands_exact.sql           | bands_rollup.sql           |
| ... re-bucketed       | bands_rebucket.sql        | -- (needs raw input_tokens)|
| latency p50/p90/p99   | latency.sql               | latency_rollup.sql         |
| ... re-bucketed       | latency_rebucket.sql      | --                         |
| decode stalls         | bands_stalls.sql          | -- (no gap data: refused)  |
| ... per P/D pool      | bands_by_pool.sql,        | -- (no pools: refused)     |
|   (--by)              | latency_by_pool.sql       |                            |

The exact files also take {abandoned:String} and (bands) {prefill:String}
(variants.py); every frame ends with the abandoned counts of its cells.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from phasemeter.query.queries import BAND_COLUMNS, METHOD as EXACT_METHOD, order_rows
from phasemeter.query.rows import Rows, missing, naive_utc
from phasemeter.stream_jobs.buckets import labels as bucket_labels, parse_edges
from phasemeter.timeparse import ArgError, auto_step, parse_duration, window

from phasemeter.analytics import variants
from phasemeter.analytics.paths import (SHOWN, TIER_GRAINS, PathChoice, TierPlan, auto_candidates, choose_path,
                                        count_grain, sample_step, samples_needed, step_rule, tier_plan)
from phasemeter.analytics.variants import ABANDONED_COLUMNS, BY_CHOICES, SPLIT_COLUMNS

if TYPE_CHECKING:  # a frame is built for the callers that ask for one (run_query): text outputs read Rows
    import pandas as pd

LATENCY_PCTS = ("p50", "p90", "p99")
LATENCY_METRICS = ("ttft", "tpot", "queue")
LATENCY_COLUMNS = ["t", "model", "input_bucket", "n"] + [
    f"{m}_{c}" for m in LATENCY_METRICS for c in ("n",) + LATENCY_PCTS] + list(ABANDONED_COLUMNS)
# Throughput frames: BAND_COLUMNS (as queries.bands, the demo's), then the
# abandoned counts and the prefill variant the prefill_* columns hold.
BANDS_COLUMNS = list(BAND_COLUMNS) + list(ABANDONED_COLUMNS) + ["prefill_variant"]
# `query bands --stalls`: chunk data per cell (max_gap_s of each generation).
STALL_COLUMNS = ["t", "model", "input_bucket", "n", "chunk_n", "gap_n", "gap_p50", "gap_p99", "gap_max",
                 "stalled_n", "stalled_share", "estimated_n"] + list(ABANDONED_COLUMNS)
# The KV transfer's percentiles, in the per-pool latency frame only.
KV_COLUMNS = ["kv_transfer_n"] + [f"kv_transfer_{p}" for p in LATENCY_PCTS]
STALLS_EXACT_ONLY = {"--stalls": "the rollup (generations_minute) has no gap data: max_gap_s and stalled "
                                 "are raw-row columns"}

ROLLUP_METHOD = ("rollup: per-minute states (schema/0003_rollup_minute.sql), per-hour/day ones where the step "
                 "is whole hours/days (0014, 0015), merged per step; a percentile whose "
                 "ranks lie among the 16 lowest/highest values kept per cell is exact (numpy linear), "
                 "denser cells use quantilesTDigest (measured error in docs/analytics.md); whole minutes "
                 "[from, to); for throughput the slow tail is the LOW percentile (p1/p5)")
LATENCY_EXACT_METHOD = ('exact: quantilesExactInclusive == numpy.percentile(method="linear"); for latency '
                        "(ttft_s, tpot_s, queue_s) the slow tail is the HIGH percentile (p90/p99)")
STALLS_METHOD = ('exact: quantilesExactInclusive == numpy.percentile(method="linear") over each generation\'s '
                 "max_gap_s (rows with chunk data only); for a gap the slow tail is the HIGH end (p99, max)")
LATENCY_ROLLUP_METHOD = ("rollup: per-minute states (per-hour/day ones at whole-hour/day steps); ttft/tpot exact "
                         "(numpy linear) when the ranks lie among the 16 highest values kept per cell, else quantilesTDigest; queue_s quantilesTDigest; "
                         "for latency the slow tail is the HIGH percentile (p90/p99)")

_SQL = {("bands", "exact", False): "bands_exact", ("bands", "pool", False): "bands_by_pool",
        ("latency", "pool", False): "latency_by_pool", ("bands", "exact", True): "bands_rebucket",
        ("bands", "rollup", False): "bands_rollup",
        ("latency", "exact", False): "latency", ("latency", "exact", True): "latency_rebucket",
        ("latency", "rollup", False): "latency_rollup", ("stalls", "exact", False): "bands_stalls"}


def columns_for(kind: str, by: str | None = None) -> list[str]:
    if kind == "stalls":
        return list(STALL_COLUMNS)
    cols = list(BANDS_COLUMNS) if kind == "bands" else list(LATENCY_COLUMNS)
    if by is None:
        return cols
    at = cols.index("abandoned") if kind == "latency" else len(cols)
    cols[at:at] = KV_COLUMNS if kind == "latency" else []
    return cols[:2] + [by] + cols[2:]


def method_for(kind: str, path: str) -> str:
    if kind == "stalls":
        return STALLS_METHOD
    if kind == "bands":
        return EXACT_METHOD if path == "exact" else ROLLUP_METHOD
    return LATENCY_EXACT_METHOD if path == "exact" else LATENCY_ROLLUP_METHOD


def _utc(t: datetime) -> datetime:
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def align_minutes(start: datetime, end: datetime) -> tuple[datetime, datetime]:
    """[floor(start), ceil(end)) to whole minutes: the rollup's grain."""
    start, end = _utc(start), _utc(end)
    lo = start.replace(second=0, microsecond=0)
    hi = end.replace(second=0, microsecond=0)
    if hi < end:
        hi += timedelta(minutes=1)
    return lo, hi


def _naive(t: datetime) -> datetime:
    """ClickHouse DateTime64 params: naive UTC."""
    return _utc(t).replace(tzinfo=None)


def _dtype(col: str) -> str:
    if col == "t":
        return "datetime64[ns]"
    if col in ("model", "input_bucket", "prefill_variant") or col in BY_CHOICES:
        return "object"
    if col in SPLIT_COLUMNS:
        return "Int64"  # unknown (NULL) on the rollup path, never 0
    return "int64" if col in ("n", "abandoned") or col.endswith("_n") else "float64"  # stalled_share: NaN = none


def _cast(dtype: str):
    """One value as a column of `dtype` holds it (what the frame of run_query holds)."""
    if dtype == "datetime64[ns]":
        return naive_utc
    if dtype == "float64":
        return lambda v: math.nan if v is None else float(v)
    if dtype == "Int64":
        return lambda v: None if missing(v) else int(v)
    return (lambda v: v) if dtype == "object" else int


def _tidy(rows: Rows, kind: str, by: str | None = None) -> Rows:
    """The kind's columns, in order, each value typed as its column (_dtype);
    a per-pool answer's "pool" named by what it holds (`by`)."""
    cols = columns_for(kind, by)
    if rows.empty:
        return Rows(cols, [[] for _ in cols])
    if by is not None:
        rows = Rows([by if n == "pool" else n for n in rows.names], rows.columns)
    return Rows(cols, [list(map(_cast(_dtype(c)), rows.column(c))) for c in cols])


def frame(rows: Rows, kind: str, by: str | None = None) -> pd.DataFrame:
    """Rows of `_tidy` as a DataFrame of the columns' dtypes."""
    import pandas as pd

    return pd.DataFrame({c: pd.Series(rows.column(c), dtype=_dtype(c)) for c in columns_for(kind, by)})


def preflight(kind: str, step_s: int | None, force: str | None, rebucket: bool, abandoned: str, prefill: str,
              by: str | None = None) -> None:
    """Flag errors that need no store: bad values, and --rollup with what it cannot answer."""
    if kind not in ("bands", "latency", "stalls"):
        raise ValueError(f"kind={kind!r}: expected 'bands', 'latency' or 'stalls'")
    variants.check(kind, abandoned, prefill)
    variants.check_by(kind, by, rebucket)
    if kind == "stalls" and rebucket:
        raise ArgError("--stalls with --buckets is not supported (the stall query reads the stored bucket); "
                       "drop --buckets")
    if step_s is not None and step_s < 1:
        raise ArgError(f"--step: must be at least 1s, got {step_s}")
    if force == "rollup":  # an auto step is whole minutes under --rollup
        choose_path(0, step_s or 60, force=force, rebucket=rebucket,
                    exact_only=_exact_only(kind, abandoned, prefill, by))


def _exact_only(kind: str, abandoned: str, prefill: str, by: str | None = None) -> dict[str, str]:
    """What the rollup cannot answer: the variants, --stalls and --by always."""
    return {**variants.exact_only(abandoned, prefill, by), **(STALLS_EXACT_ONLY if kind == "stalls" else {})}


def run_query(runner, start: datetime, end: datetime, step_s: int | None, models=None, buckets=None, *,
              kind: str = "bands", force: str | None = None, edges=None,
              default_edges="default", abandoned: str = "include",
              prefill: str = "total", tiers: bool = True, by: str | None = None) -> tuple[pd.DataFrame, dict]:
    """run_rows' answer as a DataFrame."""
    rows, meta = run_rows(runner, start, end, step_s, models, buckets, kind=kind, force=force, edges=edges,
                          default_edges=default_edges, abandoned=abandoned, prefill=prefill, tiers=tiers, by=by)
    return frame(rows, kind, by), meta


def run_rows(runner, start: datetime, end: datetime, step_s: int | None, models=None, buckets=None, *,
             kind: str = "bands", force: str | None = None, edges=None,
             default_edges="default", abandoned: str = "include",
             prefill: str = "total", tiers: bool = True, by: str | None = None) -> tuple[Rows, dict]:
    """The library entry point (CLI-free), as plain Python columns
    (phasemeter.query.rows; run_query: the same as a DataFrame). `edges` (spec or tuple) re-buckets from raw input_tokens;
    `abandoned` include|exclude and `prefill` total|engine|uncached: see variants.py.
    `by` (prefill_replica | decode_replica): one row per P/D pool too, on the
    exact path; the latency frame then has the KV transfer's percentiles.
    `tiers=False` (--no-tiers): the rollup path reads the minute tier only.

    `step_s=None`: the auto step, the finest at which most cells hold enough
    samples for the percentiles shown (meta["step_rule"] says so).

    Returns (rows, meta) with meta keys: kind, path, reason, method, step_s, step_rule,
    start, end (the window actually queried, ISO), bucket_order, rebucketed,
    abandoned, prefill, abandoned_split (False on the rollup: no phase split),
    tiers (the coarser rollup tiers read: [] on the exact path or minute only).
    """
    preflight(kind, step_s, force, edges is not None, abandoned, prefill, by)
    start, end = _utc(start), _utc(end)
    if end <= start:
        raise ArgError("--to must be after --from")
    rebucket = edges is not None
    edge_tuple = parse_edges(edges) if rebucket else parse_edges(default_edges)
    filters = {"models": list(models or []), "buckets": list(buckets or [])}
    check_filters(filters["models"], filters["buckets"], bucket_labels(edge_tuple))
    rule = ""
    if step_s is None:
        step_s, rule = _auto_step(runner, start, end, filters, kind, force, rebucket)
    step_s = int(step_s)

    choice: PathChoice = choose_path((end - start).total_seconds(), step_s, force=force, rebucket=rebucket,
                                     rule=lambda: read_path(runner, start, end, step_s, filters),
                                     exact_only=_exact_only(kind, abandoned, prefill, by))
    q_start, q_end = (align_minutes(start, end) if choice.path == "rollup" else (start, end))
    params = {"start": _naive(q_start), "end": _naive(q_end), "step_s": step_s, **filters}
    if rebucket:
        params["edges"] = [int(e) for e in edge_tuple]
        params["labels"] = bucket_labels(edge_tuple)
    used: list[str] = []
    reason = choice.reason
    if choice.path == "exact":  # the rollup files take neither: exact_only routed them here
        params["abandoned"] = abandoned
        if kind == "bands":
            params["prefill"] = prefill
        if by is not None:
            params["by"] = by
    else:
        plan = _tier_plan(runner, q_start, q_end, step_s, tiers)
        params.update(tier_params(plan))
        used = plan.used()
        spans = f"{plan.states_per_series(int(q_start.timestamp()), int(q_end.timestamp())):,} cell states per series"
        reason += f"; {' + '.join(used[::-1] + ['minute'])} tiers, {spans}" if used else f"; minute tier, {spans}"
    query = _SQL[(kind, "pool" if by is not None else choice.path, rebucket)]
    rows = _tidy(runner.rows(query, params), kind, by)
    if rows.empty and filters["models"]:
        _explain_unknown_models(runner, filters["models"], start, end)
    order = bucket_labels(edge_tuple)
    rows = order_rows(rows, order)
    if by is not None:  # model, then pool, then bucket order and time (sorted is stable)
        names, pools = rows.column("model"), rows.column(by)
        rows = rows.take(sorted(range(len(rows)), key=lambda i: (names[i], pools[i])))
    meta = {"kind": kind, "path": choice.path, "reason": reason,
            "method": method_for(kind, choice.path), "step_s": step_s, "step_rule": rule,
            "start": q_start.isoformat().replace("+00:00", "Z"),
            "end": q_end.isoformat().replace("+00:00", "Z"),
            "bucket_order": order, "rebucketed": rebucket, "abandoned": abandoned, "prefill": prefill,
            "abandoned_split": choice.path == "exact", "tiers": used, "by": by}
    return rows, meta


def read_path(runner, start: datetime, end: datetime, step_s: int, filters: dict) -> dict:
    """The store's exact-or-rollup verdict (sql/read_path.sql: the rule the
    Grafana panels follow too) as plain values; raw_rows None when not counted."""
    rows = runner.rows("read_path", {"start": _naive(start), "end": _naive(end), "step_s": int(step_s), **filters})
    return {k: (None if missing(v) else v) for k, v in zip(rows.names, rows.records()[0])}


def _tier_plan(runner, start: datetime, end: datetime, step_s: int, tiers: bool) -> TierPlan:
    """The pure plan (paths.tier_plan) with the cell each tier may be read
    from: its first cell, unless that one is partial. A first cell is asked
    about (`sql/rollup_mismatches.sql` over that one cell, a scan of its raw
    rows) only when the plan has its tier answer it: a coarser tier answering
    that time instead makes the question moot (a 30-day window at 3-hour steps
    over a store that starts with it asked the hour tier too: one more raw scan,
    ~20-30 ms at 100M rows). Coarsest first, each tier at most once, until no
    answered first cell is left unasked: a partial one moves its tier on, which
    can hand that time to a finer tier. Nothing is asked unless a tier could
    answer (its grain divides the step and fits the window)."""
    lo, hi = int(start.timestamp()), int(end.timestamp())
    finest = TIER_GRAINS[0][1]
    if not tiers or step_s % finest or hi - lo < finest:
        return tier_plan(lo, hi, step_s, {}, use_tiers=False)
    rows = runner.rows("rollup_tier_first_cells", {})
    read_from = {}
    for name, _ in TIER_GRAINS:
        value = rows.column(name)[0] if len(rows) else None
        read_from[name] = None if missing(value) else int(_utc(value).timestamp())
    plan = tier_plan(lo, hi, step_s, read_from)
    asked: set[str] = set()
    while True:
        due = [(name, grain) for name, grain in reversed(TIER_GRAINS)
               if name not in asked and read_from[name] is not None and plan.answers(name, read_from[name])]
        if not due:
            return plan
        name, grain = due[0]
        asked.add(name)
        if not _complete(runner, name, grain, read_from[name]):
            read_from[name] += grain
            plan = tier_plan(lo, hi, step_s, read_from)


def _complete(runner, name: str, grain: int, first: int) -> bool:
    """Whether a tier's first cell holds all its raw rows (every model x bucket)."""
    cell = datetime.fromtimestamp(first, timezone.utc).replace(tzinfo=None)
    bad = runner.rows("rollup_mismatches", {"table": f"generations_{name}", "grain_s": grain, "start": cell,
                                          "end": cell + timedelta(seconds=grain), "cells": []})
    return bad.empty


def tier_params(plan: TierPlan) -> dict:
    """The views' <tier>_from/<tier>_to for every coarser tier (naive UTC)."""
    out = {}
    for name, _ in TIER_GRAINS:
        lo, hi = plan.ranges[name]
        out[f"{name}_from"] = datetime.fromtimestamp(lo, timezone.utc).replace(tzinfo=None)
        out[f"{name}_to"] = datetime.fromtimestamp(hi, timezone.utc).replace(tzinfo=None)
    return out


def check_filters(models: list[str], buckets: list[str], labels: list[str]) -> None:
    """--model/--bucket values that can never match are an error, not an empty answer."""
    for model in models:
        if not model.strip():
            raise ArgError(f"--model {model!r}: a model name cannot be empty")
    for bucket in buckets:
        if bucket not in labels:
            raise ArgError(f"--bucket {bucket!r}: not an input bucket; the buckets are {', '.join(labels)}")


def _explain_unknown_models(runner, models: list[str], start: datetime, end: datetime) -> None:
    present = runner.rows("models_in_window", {"start": _naive(start), "end": _naive(end)})
    if present.empty:
        return  # an empty window: the answer is honestly empty
    known = dict(zip(present.column("model"), present.column("n")))
    missing = [m for m in models if m not in known]
    if missing:
        listing = ", ".join(f"{m} ({int(n):,})" for m, n in known.items())
        raise ArgError(f"--model {', '.join(missing)}: no generations of it in this window; "
                       f"models with data: {listing}")


def _auto_step(runner, start: datetime, end: datetime, filters: dict, kind: str, force: str | None,
               rebucket: bool) -> tuple[int, str]:
    """(step, the rule as the header says it) from the rollup's counts at the
    grain of the window (its minute, hour or day tier). Re-bucketed cells are
    counted by their stored bucket (the filter names new ones)."""
    span = (end - start).total_seconds()
    candidates = auto_candidates(span, whole_minutes=force == "rollup")
    needed = samples_needed(SHOWN[kind])
    grain, tier = count_grain(span, candidates), count_grain(span)
    tables = {60: "generations_minute", **{g: f"generations_{name}" for name, g in TIER_GRAINS}}
    params = {"start": _naive(start), "end": _naive(end), "grain": grain, "table": tables[tier],
              "models": filters["models"], "buckets": [] if rebucket else filters["buckets"]}
    rows = runner.rows("auto_step_counts", params) if len(candidates) > 1 else None
    counts = zip(zip(rows.column("model"), rows.column("input_bucket")), rows.column("t"), rows.column("n")) \
        if rows else []
    return sample_step(counts, grain, candidates, needed), step_rule(needed, candidates)


def step_or_auto(arg: str | None, start: datetime, end: datetime) -> int | None:
    """A band query's step: None for auto, which run_query then picks by the
    samples per cell (analytics/paths.sample_step)."""
    return None if arg in (None, "", "auto") else step_from(arg, start, end)


def step_from(arg: str | None, start: datetime, end: datetime) -> int:
    if arg in (None, "", "auto"):
        return auto_step(start, end)
    step = parse_duration(arg, "--step")
    if step < 1 or step != math.floor(step):
        raise ArgError(f"--step {arg!r}: must be a whole number of seconds >= 1s")
    return int(step)


def kind_of(args) -> str:
    """bands (throughput), latency (--latency) or stalls (--stalls); not both views at once."""
    latency, stalls = getattr(args, "latency", False), getattr(args, "stalls", False)
    if latency and stalls:
        raise ArgError("--stalls and the latency view (--latency, `phasemeter latency`) are different views; "
                       "choose one")
    return "stalls" if stalls else ("latency" if latency else "bands")


def fetch(args, settings, runner=None) -> tuple[pd.DataFrame, dict]:
    """fetch_rows' answer as a DataFrame (charts, library callers)."""
    rows, meta = fetch_rows(args, settings, runner)
    return frame(rows, meta["kind"], meta["by"]), meta


def fetch_rows(args, settings, runner=None) -> tuple[Rows, dict]:
    """What `phasemeter query bands` / `chart` / `latency` call: args from argparse.

    Understands the base window flags (--from/--to/--step/--model/--bucket/--via)
    plus the ones `extend_window_flags` adds (--exact/--rollup/--buckets/--latency/
    --abandoned/--prefill); any missing attribute means "default".
    """
    start, end = window(args.start, args.end)
    step_s = step_or_auto(getattr(args, "step", "auto"), start, end)
    force = "exact" if getattr(args, "exact", False) else ("rollup" if getattr(args, "rollup", False) else None)
    kind = kind_of(args)
    edges = getattr(args, "buckets", None) or None
    abandoned = getattr(args, "abandoned", None) or "include"
    prefill = getattr(args, "prefill", None) or "total"
    tiers = not getattr(args, "no_tiers", False)
    by = getattr(args, "by", None) or None
    preflight(kind, step_s, force, edges is not None, abandoned, prefill, by)  # before opening any store
    own = runner is None
    if own:
        from phasemeter.query.runner import open_runner

        runner = open_runner(settings, getattr(args, "via", None))
    try:
        return run_rows(runner, start, end, step_s, getattr(args, "model", None), getattr(args, "bucket", None),
                        kind=kind, force=force, edges=edges, default_edges=settings.bucket_edges,
                        abandoned=abandoned, prefill=prefill, tiers=tiers, by=by)
    finally:
        if own:
            runner.close()
