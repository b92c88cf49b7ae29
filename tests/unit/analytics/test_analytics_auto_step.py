"""The auto step by samples (analytics/paths): the finest step at which most
cells hold enough samples for the percentiles shown, within bounds."""

from __future__ import annotations

from phasemeter.analytics.paths import (SHOWN, auto_candidates, count_grain, sample_step, samples_needed,
                                        step_rule)

H = 3600


def test_the_percentiles_shown_set_the_samples_needed():
    assert samples_needed(SHOWN["bands"]) == 100 and samples_needed(SHOWN["latency"]) == 100
    assert samples_needed(("p50", "p90")) == 10
    assert samples_needed(("p5", "p50", "p95")) == 20 and samples_needed(("p50",)) == 1


def test_candidates_run_from_300_points_to_12():
    steps = auto_candidates(H)
    assert steps[0] == 15 and steps[-1] == 300 and steps == sorted(steps)
    assert all(H / s <= 300 for s in steps) and all(H / s >= 12 for s in steps)
    assert auto_candidates(30 * 86400) == [10800, 21600, 43200, 86400]
    assert all(s % 60 == 0 for s in auto_candidates(H, whole_minutes=True))
    assert auto_candidates(60) == [1, 5] and auto_candidates(1) == [1]


def minutes(per_minute: list[int], series=("m", "b"), t0: int = 1_800_000_000 // 3600 * 3600):
    return [(series, t0 + 60 * i, n) for i, n in enumerate(per_minute)]


def test_sparse_data_gets_a_step_where_most_cells_hold_100():
    # An hour of 1-10 generations a 15 s cell (the sparse store of docs/live.md): 4-40 a minute.
    counts = minutes([4 + (i * 7) % 37 for i in range(60)])
    step = sample_step(counts, 60, auto_candidates(H), 100)
    assert step == 300  # 5-minute cells of ~100 and more; 2-minute cells hold ~45
    cells = {}
    for _, t, n in counts:
        cells[t // step] = cells.get(t // step, 0) + n
    assert len(cells) == 12 and sum(v >= 100 for v in cells.values()) >= 6


def test_dense_data_keeps_the_finest_step():
    counts = minutes([2000] * 60)  # 500 a 15 s cell
    assert sample_step(counts, 60, auto_candidates(H), 100) == 15


def test_the_finest_step_that_meets_it_not_a_coarser_one():
    counts = minutes([120] * 60)  # 30 a 15 s cell, 60 a 30 s cell, 120 a minute
    assert sample_step(counts, 60, auto_candidates(H), 100) == 60
    assert sample_step(counts, 60, auto_candidates(H), 20) == 15


def test_most_cells_means_at_least_half_of_those_with_data():
    # Two series: one dense, one sparse; only whole-minute cells counted.
    dense, sparse = minutes([500] * 60, ("a", "x")), minutes([10] * 60, ("b", "x"))
    assert sample_step(dense + sparse, 60, [60, 300, 900], 100) == 60  # half the cells hold 100
    assert sample_step(dense + minutes([10] * 60, ("c", "x")) + sparse, 60, [60, 300, 900], 100) == 900


def test_no_counts_gives_the_finest_and_too_few_everywhere_the_coarsest():
    assert sample_step([], 60, [15, 30, 60], 100) == 15
    assert sample_step(minutes([1] * 60), 60, [15, 30, 60, 300], 100) == 300
    assert count_grain(H) == 60 and count_grain(30 * 86400) == 3600 and count_grain(400 * 86400) == 86400
    # Counted at the finest candidate when every candidate is a whole number of it: 30 d at 3 h cells.
    assert count_grain(30 * 86400, auto_candidates(30 * 86400)) == 10800
    assert count_grain(6 * H, auto_candidates(6 * H)) == 60  # 120 s then 300 s: not a multiple


def test_the_rule_is_said_in_words():
    text = step_rule(100, [15, 30, 60, 120, 300])
    assert text == ("auto step: the finest of 15s–5m at which most cells hold ≥ 100 generations "
                    "(p1/p99 need 100, p5/p95 20)")
