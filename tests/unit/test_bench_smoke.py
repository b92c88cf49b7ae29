"""The benchmark scripts import and their pure parts run at tiny sizes.

No broker, no timing assertions (a shared 2-core machine is too noisy for
that): only that each part returns sane, internally consistent numbers.
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


@pytest.fixture(scope="module")
def bench():
    sys.path.insert(0, str(BENCH))
    try:
        yield lambda name: importlib.import_module(name)
    finally:
        sys.path.remove(str(BENCH))


@pytest.mark.parametrize("name", ["bench_worker", "bench_sink", "bench_freshness", "profile_worker",
                                  "run_all", "bare_faust_app"])
def test_imports_and_has_main(bench, name):
    mod = bench(name)
    assert callable(mod.main)


def test_util_helpers(bench):
    U = bench("_util")
    info = U.machine_info()
    for key in ("date", "nproc", "python", "kafka", "chdb", "faust-streaming"):
        assert info[key]
    events = U.synthetic_events(50)
    assert len({e["request_id"] for e in events}) == 50
    assert set(events[0]) == {"schema_version", "kind", "request_id", "model", "t0", "ttft_s", "e2e_s",
                              "queue_s", "input_tokens", "output_tokens", "cached_input_tokens", "status",
                              "finish_reason", "gateway", "replica"}
    assert b'"kind":"batch"' in U.envelope(events[:3])
    table = U.md_table(["a", "b"], [["x", 1.5], ["y", 20000.0]])
    assert table.splitlines()[1] == "|---|---:|" and "20,000" in table
    assert U.ratio(5.0, 10.0) == 0.5 and U.ratio(None, 1.0) is None


def test_sink_bench_tiny(bench, tmp_path):
    r = bench("bench_sink").run(2000, 500, tmp_path / "store")
    assert r["rows"] == 2000 and r["batches"] == 4
    assert r["stored"] == 2000 and r["stored_direct"] == 2000
    assert r["sink_rows_per_s"] > 0 and r["direct_rows_per_s"] > 0 and r["sink_vs_direct"] > 0
    assert "rows/s" in bench("bench_sink").render(r)


@pytest.mark.parametrize("envelope_size", [0, 100])
def test_profile_tiny(bench, envelope_size):
    pw = bench("profile_worker")
    r = pw.run(2000, 500, envelope_size, False, 15)
    assert r["generations"] == 2000
    assert r["messages"] == (2000 if envelope_size == 0 else 20)
    names = [x["function"] for x in r["ours"]]
    assert 0 < len(names) <= 15 and any("split" in n for n in names)
    assert "µs/generation" in pw.render(r)


def test_worker_render_reports_missing_envelope_support(bench):
    bw = bench("bench_worker")
    row = {"reader": "bare Faust agent (async for)", "messages": 10, "generations": 10, "seconds": 1.0,
           "msgs_per_s": 10.0, "gens_per_s": 10.0, "ratio_vs_bare_faust": 1.0}
    env = {"reader": "phasemeter worker (envelopes of 100)", "messages": 1, "generations": 100, "seconds": None,
           "msgs_per_s": None, "gens_per_s": None, "supported": False,
           "note": "envelopes not supported by this worker (rejected=1, accepted=0)"}
    text = bw.render({"single": [row], "envelope": env, "prefill": {}, "worker_vs_bare_faust": None})
    assert "envelopes not supported by this worker" in text


def test_run_all_markdown_and_kept_notes(bench, tmp_path):
    ra = bench("run_all")
    keys = [s["key"] for s in ra.stages(False, "")]
    assert keys == ["emitter", "worker", "sink", "freshness", "profile", "queries", "accuracy"]
    missing = ra.run_stage({"key": "x", "title": "X", "note": "", "script": "no_such_bench.py", "json": False,
                            "runs": [[]]}, 10, None)
    assert "skipped" in missing
    out = tmp_path / "B.md"
    out.write_text(f"old\n{ra.NOTES_BEGIN}\nhot spot\n{ra.NOTES_END}\n")
    notes = ra.kept_notes(out)
    text = ra.markdown({"nproc": 2}, [missing], 1.0, [], notes)
    assert "does not exist yet" in text and "## Machine" in text and "hot spot" not in text  # only under Profile
    assert ra.kept_notes(tmp_path / "none.md") == ""
