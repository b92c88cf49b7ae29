"""BENCHMARKS.md is generated from bench/results/*.json (bench/report.py):
a test regenerates it and fails on a difference."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def report():
    sys.path.insert(0, str(BENCH))
    try:
        import report as module

        yield module
    finally:
        sys.path.remove(str(BENCH))


def test_benchmarks_md_is_generated_from_the_results(report):
    results = report.load()
    assert len(results) >= 10
    text = report.render(results)
    assert len(text.encode()) < 25_000
    assert (report.ROOT / "BENCHMARKS.md").read_text() == text, \
        f"BENCHMARKS.md differs from bench/results/: run `{report.COMMAND}` and commit it"


def test_every_result_names_its_command_machine_and_goals(report):
    results = report.load()
    assert len(results) >= 10
    for name, doc in results:
        assert name.startswith(doc["date"][:10]) and doc["command"] and doc["machine"].get("cpu"), name
        assert len(doc["figures"]) >= 1, name
        for f in doc["figures"]:
            assert f["goal"] and f["target"] and (f["value"] is not None or f["ratio"] is not None), (name, f)


def _result(date: str, value: float) -> dict:
    return {"name": "x", "date": date, "command": "python bench/x.py", "machine": {"cpu": "c", "nproc": 2},
            "notes": "", "figures": [{"goal": "g", "what": "w", "value": value, "unit": "s", "reference": None,
                                      "ratio": None, "target": "≤ 1 s", "met": value <= 1}]}


def test_a_goal_shows_its_newest_result_and_a_changed_figure_changes_the_page(report, tmp_path):
    for date, value in (("2026-12-01T00:00:00Z", 0.5), ("2026-12-03T00:00:00Z", 1.5), ("2026-12-02T00:00:00Z", 0.7)):
        (tmp_path / f"{date[:10]}-x.json").write_text(json.dumps(_result(date, value)))
    text = report.render(report.load(tmp_path))
    row = [ln for ln in text.splitlines() if ln.startswith("| `g`")]
    assert len(row) == 1
    assert "1.5 s" in row[0] and "**no**" in row[0] and "2026-12-03" in row[0]
    (tmp_path / "2026-12-03-x.json").write_text(json.dumps(_result("2026-12-03T00:00:00Z", 0.9)))
    assert report.render(report.load(tmp_path)) != text


def test_a_second_run_of_the_day_is_recorded_beside_the_first(scripts, tmp_path):
    results = scripts("results")
    figure = results.figure("g", "a figure", 1.0, "s")
    first = results.record("x", [figure], command="python bench/x.py", out_dir=tmp_path)
    second = results.record("x", [dict(figure, value=2.0)], command="python bench/x.py --again", out_dir=tmp_path)
    assert first != second and sorted(tmp_path.iterdir()) == sorted([first, second])
    assert json.loads(first.read_text())["figures"][0]["value"] == 1.0
    assert json.loads(second.read_text())["command"] == "python bench/x.py --again"


@pytest.fixture(scope="module")
def scripts():
    import importlib

    sys.path.insert(0, str(BENCH))
    try:
        yield lambda name: importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


def test_each_benchmark_states_its_goal_figures_beside_their_references(scripts):
    """The figures the scripts record, from results shaped as their main() builds them."""
    worker = scripts("bench_worker").figures({
        "params": {"envelope_size": 100}, "rounds": [{"bare": 10_000.0, "worker": 11_000.0, "ratio": 1.1}] * 2,
        "envelope_rounds": [{"bare": 10_000.0, "worker": 120_000.0, "ratio": 12.0}], "envelope": {}})
    assert [f["goal"] for f in worker] == ["worker-single", "worker-single", "worker-envelopes"]
    assert [f["ratio"] for f in worker] == [1.1, 1.1, 12.0] and all(f["met"] for f in worker)
    join = scripts("bench_join").figures({"rounds": [{"single": 30_000.0, "join": 4_000.0, "join_env": 31_000.0}]})
    assert {f["goal"]: f["met"] for f in join} == {"join-envelopes": True, "join-per-phase": False}
    sink = scripts("bench_sink").figures({
        "batches": [20000], "sql_rows_per_s": 300_000.0, "meets_columns": {20000: False},
        "paths": [{"key": "columns.20000", "rows_per_s": 150_000.0}]})
    assert len(sink) == 1 and sink[0]["goal"] == "sink-20000" and sink[0]["ratio"] == 0.5 and not sink[0]["met"]
    fresh = scripts("bench_freshness").figures([{"rate": 2000.0, "envelope_size": 100, "p99_ms": 600.0,
                                                 "meets_target": True}])
    assert [f["goal"] for f in fresh] == ["freshness-2k"] and fresh[0]["value"] == 600.0
    accuracy = scripts("bench_accuracy").figures({(s, t, p): 1.5 for s in (3600, 10800) for t in (True, False)
                                                  for p in ("p1", "p99")})
    assert len(accuracy) == 4 and all(f["met"] and f["ratio"] == 1.0 for f in accuracy)
    known = set(scripts("report").ORDER)
    assert {f["goal"] for f in worker + join + sink + fresh + accuracy} <= known


def test_the_scale_and_start_up_benchmarks_state_their_goals(scripts):
    def q(tiers, exact, day=0.5, day_exact=0.6, empty=0.1):
        return {"30 d, auto step (3 h) | rollup, tiers": {"median_s": tiers},
                "30 d, auto step (3 h) | exact": {"median_s": exact},
                "1 d, 1 min steps | rollup, tiers": {"median_s": day}, "1 d, 1 min steps | exact": {"median_s": day_exact},
                "empty 1 min (fixed cost) | auto": {"median_s": empty}}
    scale = scripts("bench_scale").figures([{"rows": 10_000_000, "queries": q(0.7, 1.5)},
                                            {"rows": 100_000_000, "queries": q(0.4, 7.0)}], via_worker=True)
    goals = [f["goal"] for f in scale]
    assert goals == ["bands-rows", "bands-30d", "bands-1d-1min", "query-fixed-cost", "bands-rows"]
    assert [f["met"] for f in scale] == [True] * 5
    direct = scripts("bench_scale").figures([{"rows": 100_000_000, "queries": q(1.2, 7.6, empty=0.8)}], False)
    assert [(f["goal"], f["met"]) for f in direct] == [("bands-30d-direct", False), ("bands-1d-1min-direct", True),
                                                      ("query-fixed-cost-direct", False)]
    times = {"python -c pass (reference)": {"wall": [0.03, 0.04]}, "phasemeter --help": {"wall": [0.13, 0.14]},
             "phasemeter config": {"wall": [0.25, 0.3]}}
    cli = scripts("bench_cli_startup").figures(times)
    assert [(f["goal"], f["met"]) for f in cli] == [("cli-help", True), ("cli-config", False)]
    reads = {**{k: {**v, "cpu": [0.02, 0.02]} for k, v in times.items()},
             "worker: query bands --from -1h (rows)": {"wall": [0.25, 0.27], "cpu": [0.18, 0.2]},
             "worker, CLI before: query bands --from -1h": {"wall": [0.6, 0.62], "cpu": [0.5, 0.52]},
             "worker: sql SELECT 1": {"wall": [0.1, 0.12], "cpu": [0.08, 0.08]}}
    read = {f["goal"]: f for f in scripts("bench_cli_startup").figures(reads)}
    assert (read["cli-read-bands"]["met"], read["cli-read-before"]["met"]) == (True, False)
    assert read["cli-read-bands-cpu"]["ratio"] == 9.5 and read["cli-read-sql"]["value"] == 0.11
    cli += list(read.values())
    assert set(goals) | {f["goal"] for f in direct + cli} <= set(scripts("report").ORDER)
