"""Which rollup tier answers which part of a window: a pure function
(phasemeter.analytics.paths.tier_plan). A wrong plan would count a minute
twice or not at all, or put a coarse cell across two steps, so each case is
checked against a brute-force walk over the window's minutes."""

from __future__ import annotations

import random

import pytest

from phasemeter.analytics.paths import TIER_GRAINS, tier_plan

M, H, D = 60, 3600, 86400
T0 = 20_000 * D          # a whole UTC day
OLD = {"hour": 0, "hour3": 0, "day": 0}  # every tier holds cells from long before the window


def tier_of_each_minute(plan, start, end):
    """{minute: tier name} as the views read it (schema/0020: nested ranges, the
    innermost range holding a minute answers it)."""
    out = {}
    for t in range(start, end, M):
        tier = "minute"
        for name, _ in TIER_GRAINS:
            lo, hi = plan.ranges[name]
            if lo <= t < hi:
                tier = name
        out[t] = tier
    return out


def check(plan, start, end, step):
    """Every minute of [start, end) read once, each coarse cell whole, inside
    the window and inside one step; the ranges nest as the views require."""
    (h_lo, h_hi), (h3_lo, h3_hi), (d_lo, d_hi) = plan.ranges["hour"], plan.ranges["hour3"], plan.ranges["day"]
    assert start <= h_lo <= h3_lo <= d_lo <= d_hi <= h3_hi <= h_hi <= end
    grains = dict(TIER_GRAINS)
    assert set(plan.ranges) == set(grains) and [n for n, _ in TIER_GRAINS] == ["hour", "hour3", "day"]
    for name, (lo, hi) in plan.ranges.items():
        if lo < hi:
            g = grains[name]
            assert lo % g == 0 and hi % g == 0 and step % g == 0, (name, lo, hi, step)
    minutes = tier_of_each_minute(plan, start, end)
    assert sorted(minutes) == list(range(start, end, M))
    # Each coarse cell the plan reads lies wholly in the window and in one step.
    for name, g in TIER_GRAINS:
        for cell in {t // g * g for t, tier in minutes.items() if tier == name}:
            assert start <= cell and cell + g <= end
            assert all(minutes[t] == name for t in range(cell, cell + g, M))
            assert cell // step == (cell + g - 1) // step


@pytest.mark.parametrize("start,end,step,used,states", [
    (T0, T0 + 30 * D, 10800, ["hour", "hour3"], 240),               # 30 d at the auto step: 3-hour cells
    (T0 + 17 * M, T0 + 30 * D, 10800, ["hour", "hour3"], 43 + 2 + 239),  # ragged start: minutes, hours, then 3 h
    (T0, T0 + 60 * D, 21600, ["hour", "hour3"], 480),               # 6 h steps: two 3-hour cells each
    (T0, T0 + 7 * D, 2 * H, ["hour"], 7 * 24),                      # 3 h does not fit a 2 h step: hours
    (T0, T0 + 30 * D, D, ["hour", "hour3", "day"], 30),             # daily steps: days
    (T0 + 5 * H, T0 + 3 * D + 2 * H, D, ["hour", "hour3", "day"], 1 + 6 + 2 + 2),  # hours, 3 h, days, hours
    (T0, T0 + 7 * D, H, ["hour"], 7 * 24),                          # 7 d at 1 h
    (T0, T0 + D, M, [], 1440),                                      # 1-minute steps: minutes only
    (T0, T0 + 30 * D, 1800, [], 30 * 1440),                         # an hour does not fit a 30-min step
    (T0 + 10 * M, T0 + H + 10 * M, H, [], 60),                      # no whole hour inside the window
    (T0, T0 + H, H, ["hour"], 1),
])
def test_plan(start, end, step, used, states):
    plan = tier_plan(start, end, step, OLD)
    check(plan, start, end, step)
    assert plan.used() == used
    assert plan.states_per_series(start, end) == states


def test_a_tier_is_read_only_from_the_cell_it_may_be_read_from():
    # The caller passes the tier's first cell, or the next one when the first is partial.
    plan = tier_plan(T0, T0 + 30 * D, 10800, {"hour": T0 + 10 * D + H, "day": None})
    check(plan, T0, T0 + 30 * D, 10800)
    assert plan.ranges["hour"] == (T0 + 10 * D + H, T0 + 30 * D)
    assert plan.used() == ["hour"]  # an empty day tier is never read
    plan = tier_plan(T0, T0 + 30 * D, D, {"hour": T0 + 10 * D + 25 * M, "day": T0 + 11 * D})
    check(plan, T0, T0 + 30 * D, D)
    assert plan.ranges["hour"] == (T0 + 10 * D + H, T0 + 30 * D)  # not a whole hour: rounded up
    assert plan.ranges["day"] == (T0 + 11 * D, T0 + 30 * D)


def test_empty_tiers_and_no_tiers_read_the_minute_tier_only():
    for plan in (tier_plan(T0, T0 + 30 * D, 10800, {"hour": None, "day": None}),
                 tier_plan(T0, T0 + 30 * D, 10800, {}),
                 tier_plan(T0, T0 + 30 * D, 10800, OLD, use_tiers=False)):
        check(plan, T0, T0 + 30 * D, 10800)
        assert plan.used() == [] and plan.states_per_series(T0, T0 + 30 * D) == 30 * 1440


def test_a_tier_with_nothing_in_the_window_is_passed_over():
    # A tier added by a later migration starts empty (the 3-hour one, schema/0019)
    # while the coarser day tier holds years: the day tier still answers, and the
    # empty tiers take its range, so the ranges nest and no minute is read twice.
    for first in ({"hour": 0, "hour3": None, "day": 0}, {"hour": None, "hour3": None, "day": 0},
                  {"hour": 0, "hour3": T0 + 40 * D, "day": 0}):
        plan = tier_plan(T0, T0 + 30 * D, D, first)
        check(plan, T0, T0 + 30 * D, D)
        assert plan.used() == [n for n in ("hour", "day") if first[n] is not None]
        assert plan.ranges["hour3"] == plan.ranges["day"] == (T0, T0 + 30 * D)
        assert plan.states_per_series(T0, T0 + 30 * D) == 30
    plan = tier_plan(T0 + 5 * H, T0 + 3 * D, D, {"hour": 0, "hour3": None, "day": 0})
    check(plan, T0 + 5 * H, T0 + 3 * D, D)
    assert plan.used() == ["hour", "day"] and plan.states_per_series(T0 + 5 * H, T0 + 3 * D) == 19 + 2


def test_random_windows_against_brute_force():
    rng = random.Random(4)
    assert len(TIER_GRAINS) == 3  # hour, hour3, day
    for _ in range(300):
        start = T0 + rng.randrange(0, 3 * D // M) * M
        end = start + rng.randrange(1, 5 * D // M) * M
        step = rng.choice([M, 5 * M, 1800, H, 2 * H, 10800, 21600, 43200, D, 7 * D])
        first = {"hour": rng.choice([None, 0, start + rng.randrange(0, D // M) * M]),
                 "hour3": rng.choice([None, 0, start + rng.randrange(0, D // M) * M]),
                 "day": rng.choice([None, 0, start + rng.randrange(0, 2 * D // M) * M])}
        plan = tier_plan(start, end, step, first)
        check(plan, start, end, step)
        for name, g in TIER_GRAINS:
            lo, hi = plan.ranges[name]
            if name in plan.used():  # never before the cell the tier may be read from
                assert first[name] is not None and lo >= first[name]
            elif lo < hi:  # a tier not read only passes on the range of one read inside it
                assert any(plan.ranges[n] == (lo, hi) for n in plan.used()), (name, plan)


class TierRunner:
    """A fake store: the tiers' first cells and which of them are partial."""

    def __init__(self, first: dict, partial: set):
        self.first, self.partial, self.calls = first, partial, []

    def rows(self, name, params):  # what the reads ask for: the frame below as plain columns
        from phasemeter.query.rows import of

        return of(self.df(name, params))

    def df(self, name, params):
        import pandas as pd

        self.calls.append((name, dict(params)))
        if name == "rollup_tier_first_cells":
            return pd.DataFrame({k: [pd.Timestamp(v, unit="s") if v is not None else None]
                                 for k, v in self.first.items()})
        if name == "rollup_mismatches":
            tier = params["table"].removeprefix("generations_")
            return pd.DataFrame({"model": ["m"]}) if tier in self.partial else pd.DataFrame({"model": []})
        raise AssertionError(name)


def _plan(runner, start, end, step):
    from datetime import datetime, timezone

    from phasemeter.analytics.core import _tier_plan

    return _tier_plan(runner, datetime.fromtimestamp(start, timezone.utc), datetime.fromtimestamp(end, timezone.utc),
                      step, True)


def test_a_partial_first_cell_is_skipped_a_complete_one_read():
    window = (T0, T0 + 30 * D, D)
    every = {"hour": T0, "hour3": T0, "day": T0}
    runner = TierRunner(every, partial={"hour", "hour3", "day"})
    plan = _plan(runner, *window)
    assert plan.ranges == {"hour": (T0 + H, T0 + 30 * D), "hour3": (T0 + 3 * H, T0 + 30 * D),
                           "day": (T0 + D, T0 + 30 * D)}
    # Each partial cell hands its time to the next finer tier, which is then asked.
    assert [c[1]["table"] for c in runner.calls if c[0] == "rollup_mismatches"] == [
        "generations_day", "generations_hour3", "generations_hour"]
    runner = TierRunner(every, partial=set())
    plan = _plan(runner, *window)
    assert plan.ranges == {"hour": (T0, T0 + 30 * D), "hour3": (T0, T0 + 30 * D), "day": (T0, T0 + 30 * D)}
    # The day tier answers the first day: the finer tiers' first cells are not read, so not asked.
    assert [c[1]["table"] for c in runner.calls if c[0] == "rollup_mismatches"] == ["generations_day"]


def test_only_a_first_cell_its_tier_answers_is_asked():
    """30 days at 3-hour steps over a store that starts with the window: the
    3-hour tier answers it all, and only its first cell is scanned."""
    every = {"hour": T0, "hour3": T0, "day": T0}
    runner = TierRunner(every, partial=set())
    plan = _plan(runner, T0, T0 + 30 * D, 3 * H)
    assert plan.used() == ["hour", "hour3"] and plan.ranges["hour3"] == (T0, T0 + 30 * D)
    assert [c[1]["table"] for c in runner.calls if c[0] == "rollup_mismatches"] == ["generations_hour3"]
    runner = TierRunner(every, partial={"hour3"})  # the hour tier then answers the first 3 hours: asked
    plan = _plan(runner, T0, T0 + 30 * D, 3 * H)
    assert plan.ranges == {"hour": (T0, T0 + 30 * D), "hour3": (T0 + 3 * H, T0 + 30 * D),
                           "day": (T0 + 30 * D, T0 + 30 * D)}
    assert [c[1]["table"] for c in runner.calls if c[0] == "rollup_mismatches"] == [
        "generations_hour3", "generations_hour"]


def test_the_first_cell_is_checked_only_when_the_window_reaches_it():
    runner = TierRunner({"hour": T0 - 5 * D, "hour3": T0 - 5 * D, "day": T0 - 5 * D},
                        partial={"hour", "hour3", "day"})
    plan = _plan(runner, T0, T0 + 30 * D, 10800)
    assert plan.used() == ["hour", "hour3"] and [c[0] for c in runner.calls] == ["rollup_tier_first_cells"]
    runner = TierRunner({"hour": T0, "hour3": T0, "day": T0}, partial=set())
    _plan(runner, T0, T0 + 30 * D, 60)  # minute steps: no tier can answer, nothing asked
    assert runner.calls == []


def test_an_empty_tier_is_not_read_and_not_checked():
    runner = TierRunner({"hour": T0, "hour3": None, "day": None}, partial=set())
    plan = _plan(runner, T0, T0 + 30 * D, D)
    assert plan.used() == ["hour"] and [c[1]["table"] for c in runner.calls[1:]] == ["generations_hour"]
    runner = TierRunner({"hour": T0, "hour3": None, "day": T0}, partial=set())
    plan = _plan(runner, T0, T0 + 30 * D, D)
    assert plan.used() == ["hour", "day"]
    assert [c[1]["table"] for c in runner.calls[1:]] == ["generations_day"]  # the hour tier answers nothing
