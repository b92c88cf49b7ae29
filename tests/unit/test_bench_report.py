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
