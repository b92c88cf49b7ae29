"""The benchmark scripts import and their pure parts run at tiny sizes.

No broker, no timing assertions (a shared 2-core machine is too noisy for
that): only that each part returns sane, internally consistent numbers, and
times that lie between what the script itself makes certain (a lower bound)
and the caller's own clock around the call (an upper bound).
"""

from __future__ import annotations

import importlib
import json
import sys
import time
from datetime import datetime, timezone
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


@pytest.mark.parametrize("name", ["bench_worker", "bench_join", "bench_sink", "bench_freshness", "profile_worker",
                                  "bench_otlp", "bench_asgi", "bench_openai_wrapper", "bench_cli_startup",
                                  "run_all", "bare_faust_app", "bench_chunk_hook", "bench_scale", "bench_slo_sink",
                                  "profile_tiers", "bench_read_blocking", "bench_web_port", "bench_sql_http", "bench_panel_paths",
                                  "bench_worker_memory", "profile_worker_memory"])
def test_imports_and_has_main(bench, name):
    mod = bench(name)
    assert callable(mod.main)


def test_worker_memory_figures(bench):
    m = bench("bench_worker_memory")
    configs = [m.parse_config("worker:"), m.parse_config("arena2:MALLOC_ARENA_MAX=2,PHASEMETER_BATCH_BYTES=8000000")]
    assert configs == [("worker", {}), ("arena2", {"MALLOC_ARENA_MAX": "2", "PHASEMETER_BATCH_BYTES": "8000000"})]
    runs = {"worker": [{"peak_rss_mib": 900.0, "rss_start_mib": 330.0, "gens_per_s": 100_000.0}],
            "arena2": [{"peak_rss_mib": 450.0, "rss_start_mib": 330.0, "gens_per_s": 97_000.0}]}
    figs = m.figures(configs, runs)
    assert [f["goal"] for f in figs] == ["worker-peak-rss", "worker-peak-rss-options", "worker-peak-rss-options-rate"]
    assert [f["met"] for f in figs] == [False, False, False]  # 450 MiB, but at 0.97x the rate
    assert figs[1]["ratio"] == 0.5 and figs[2]["ratio"] == 0.97


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
    r = bench("bench_sink").run(2000, [500, 1000], tmp_path / "store", rounds=2, tries=["optimize_on_insert=0"])
    assert r["rows"] == 2000 and r["rows_per_round"] == 1000 and r["batches"] == [500, 1000]
    paths = {p["key"]: p for p in r["paths"]}
    assert set(paths) == {"sql", "sink.500", "sink.1000", "try.2", "plain.500", "plain.1000", "columns.500",
                          "columns.1000", "sql.small"}
    # every path wrote every row, and each of its rows is stored once (no block taken for another's duplicate)
    for key, p in paths.items():
        assert p["rows"] == (2 * 2000 if key == "sql" else 2000), key
        assert p["rows_per_s"] > 0 and p["vs_sql"] > 0, key
        if not key.startswith("sql"):
            assert p["stored"] == 2000, key
    assert paths["sink.500"]["inserts"] == 4 and paths["sink.1000"]["inserts"] == 2 and paths["sql"]["inserts"] == 4
    assert paths["columns.500"]["inserts"] == 4 and set(r["meets_columns"]) == {500, 1000}
    assert r["sql_stored"] == r["sql_expected"] > 2 * 2000
    assert set(r["split"]) == {500, 1000}  # one split per batch size
    for b, s in r["split"].items():
        assert s["arrow_s"] > 0 and s["insert_s"] > 0 and s["sink_s"] >= s["views_s"] >= 0, b
    text = bench("bench_sink").render(r)
    assert "rows/s" in text and "× SQL-side" in text


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


def test_run_all_stages(bench):
    ra = bench("run_all")
    keys = [s["key"] for s in ra.stages(False, "")]
    assert keys == ["emitter", "worker", "join", "sink", "freshness", "profile", "queries", "accuracy"]


def test_join_bench_phase_events_store_the_same_rows(bench):
    """The bench's phase events are valid, join, and derive to the row the one-event form derives to."""
    from phasemeter.stream_jobs import join
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import Phase, process_message

    U = bench("_util")
    bucket, now = Bucketer(parse_edges("0,512,2048,8192,32768")), time.time()
    kinds = set()
    for e in U.synthetic_events(300, start=now - 90, span_s=60):
        phases = U.phase_events(e)
        kinds.add(tuple(p["kind"] for p in phases))
        entry = None
        assert 2 <= len(phases) <= 3, phases  # start, first_token, end; no first_token when it failed before one
        for p in phases:
            [phase] = process_message(U.encode_event(p), bucket, 1_000_000, now)
            assert isinstance(phase, Phase), phase
            entry, outs, note = join.apply(entry, phase.request_id, phase.fields, 0, now)
        assert note == "joined" and len(outs) == 1
        [joined] = process_message(json.dumps(outs[0][1]).encode(), bucket, 1_000_000, now, internal=True)
        [single] = process_message(U.encode_event(e), bucket, 1_000_000, now)
        assert {k: v for k, v in joined.items() if k != "schema_version"} == \
            {k: v for k, v in single.items() if k != "schema_version"}
    assert kinds == {("start", "first_token", "end"), ("start", "end")}  # ~1 % fail before a token


def test_join_bench_summary_render_and_profile(bench, tmp_path):
    bj = bench("bench_join")

    def run(mode, rate, accepted=1000):
        return {"mode": mode, "generations": 1000, "messages": 3000 if mode == "join" else 1000,
                "drain_gens_per_s": rate, "gens_per_s": rate, "from_first_consumed_s": 1000 / rate,
                "msgs_per_s": rate * (3 if mode == "join" else 1), "cpu_s": 1.0, "all_joined": accepted == 1000,
                "health": {"accepted": accepted, "rejected": 0},
                "inflight": {"in_flight": [], "awaiting_start": 0, "counts": {"generations_joined": accepted}}}

    runs = [run("single", 1000.0), run("join", 100.0), run("join_env", 500.0),
            run("single", 3000.0), run("join", 200.0), run("join_env", 900.0)]
    r = {"params": {"n": 1000}, "runs": runs, **bj.summarize(runs),
         "prefill": {"single": {"messages": 1000, "avg_bytes": 350.0}, "join": {"messages": 3000, "avg_bytes": 150.0}}}
    assert r["pair_ratios"] == [0.1, 0.067] and r["join_vs_single"] == 0.075 and r["all_joined"]
    assert r["env_pair_ratios"] == [0.5, 0.3] and r["join_env_vs_single"] == 0.35
    assert r["join_msgs_per_s"] == 450.0
    assert r["cpu_us_per_generation"] == {"single": 1000, "join": 1000, "join_env": 1000}
    assert "**join ÷ single: 0.075**" in bj.render(r) and "**yes**" in bj.render(r)
    assert "envelopes of 100 ÷ single: 0.350**" in bj.render(r)
    # --compare-python: the old worker's join modes, read against the same round's single run
    compared = [runs[0], runs[1], run("join@old", 50.0), runs[2], run("join_env@old", 250.0),
                runs[3], runs[4], run("join@old", 300.0), runs[5], run("join_env@old", 600.0)]
    c = {**r, "params": {"n": 1000, "compare_python": "/old/bin/python"}, **bj.summarize(compared)}
    assert c["join_vs_single"] == 0.075 and c["join_env_vs_single"] == 0.35  # unchanged by the old runs
    assert c["old_pair_ratios"] == [0.05, 0.1] and c["old_env_pair_ratios"] == [0.25, 0.2]
    assert c["old_join_vs_single"] == 0.087 and c["old_join_env_vs_single"] == 0.212
    assert "join ÷ single **0.087**" in bj.render(c) and "join ÷ single **" not in bj.render(r)
    runs[1] = run("join", 100.0, accepted=999)
    assert not bj.summarize(runs)["all_joined"]
    raw = tmp_path / "p.raw"
    main = "_run_module_as_main (<frozen runpy>:198);BaseEventLoop.run_forever (asyncio/base_events.py:607)"
    raw.write_text(f"{main};Topic.send (faust/topics.py:190) 30\n{main};EpollSelector.select (selectors.py:468) 10\n"
                   f"Thread._bootstrap (threading.py:1002);Pipeline.split (stream_jobs/pipeline.py:83) 50\n")
    shares = bj.profile_shares(str(raw), 80.0)
    assert shares["main_thread_busy"] == 0.38 and shares[bj.FRAMES["Topic.send"]] == 0.75
    assert "error" in bj.profile_shares(str(tmp_path / "none.raw"), 1.0)


def test_run_all_writes_its_parts_and_keeps_everything_else(bench, tmp_path):
    """`make bench` rewrites only what run_all wrote before: hand-written findings, sections
    no stage writes, and (with --only) the other stages' parts stay as they were."""
    ra = bench("run_all")
    run = {"command": "python bench/bench_join.py", "rc": 0, "seconds": 1.0, "stdout": "| t |\n|---|\n| 2 |"}
    join = {"key": "join", "title": "2b. Join", "note": "", "runs": [run]}
    first = ra.merge("", ra.parts({"nproc": 2}, [join], 60.0, ["--only", "join"]))
    assert first.startswith("# Benchmarks\n") and "`python bench/run_all.py --only join`" in first
    assert "## Machine" in first and "## 2b. Join" in first and "| 2 |" in first
    # a person adds findings under the generated part and a section of their own
    edited = first.replace("<!-- /join-run -->", "<!-- /join-run -->\n\n### Findings\nkept words") + \
        "\n## 14. At scale\n\nhand-made table\n"
    again = ra.merge(edited, ra.parts({"nproc": 4}, [{**join, "runs": [{**run, "stdout": "| 3 |"}]}], 6.0, []))
    assert "| 3 |" in again and "| 2 |" not in again and "| 4 |" in again
    assert "### Findings\nkept words" in again and "hand-made table" in again
    assert again.index("| 3 |") < again.index("kept words") < again.index("hand-made table")
    assert again.count("## 2b. Join") == 1 and again.count("## Machine") == 1
    # an existing heading without marks (a report from before the marks): the part goes right under it
    old = "# Benchmarks\n\n## 2b. Join\n\nold findings\n\n## 3. Sink\n\nsink words\n"
    merged = ra.merge(old, ra.parts({}, [join], 1.0, []))
    assert merged.index("## 2b. Join") < merged.index("| 2 |") < merged.index("old findings") < merged.index("sink")
    # a stage absent from the report becomes a new section at the end; a skipped script says so
    missing = ra.run_stage({"key": "x", "title": "X", "note": "", "script": "no_such_bench.py", "json": False,
                            "runs": [[]]}, 10, None)
    tail = ra.merge(merged, ra.parts({}, [missing], 1.0, []))
    assert tail.rstrip().endswith("<!-- /x-run -->") and "does not exist yet" in tail and "sink words" in tail


def test_chunk_hook_bench_tiny(bench):
    hook = bench("bench_chunk_hook")
    r = hook.run(40, 20, 2)
    for kind in ("reference", "chunked", "floor", "record", "record_stalls"):
        assert r[kind]["n"] == 40 and 0 < r[kind]["p50"] <= r[kind]["p99"] <= r[kind]["max"]
    assert r["chunks"] == 20 and r["meter"]["dropped"] == 0 and r["meter"]["failed"] == 0
    assert "g.chunk(1)" in hook.render(r) and "per generation over the reference" in hook.render(r)


def test_scale_fill_follows_the_traffic_model_and_fills_every_tier(bench, tmp_path):
    import clickhouse_connect

    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.ledger import all_tier_mismatches

    bs = bench("bench_scale")
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path / 'store'}")
    client.command("CREATE DATABASE IF NOT EXISTS s")
    client.database = "s"
    migrate(client)
    start = time.time() // 86400 * 86400 - 30 * 86400
    client.command(bs.FILL_SQL, parameters=bs.fill_params(40_000, start))
    q = lambda sql: client.query(sql).result_rows[0]  # noqa: E731
    assert q("SELECT count(), uniqExact(model), uniqExact(input_bucket), uniqExact(model, input_bucket) "
             "FROM generations") == (40_000, 4, 5, 20)
    lo, hi = q("SELECT min(ts), max(ts) FROM generations")
    assert lo.timestamp() >= start and hi.timestamp() < start + 30 * 86400 and hi.timestamp() > start + 29 * 86400
    errors, cancelled, no_ttft, bad_prefill, bad_e2e = q(
        "SELECT countIf(status = 'error'), countIf(status = 'cancelled'), countIf(ttft_s IS NULL), "
        "countIf(abs(prefill_tps - input_tokens / ttft_s) > 1e-6 * prefill_tps), "
        "countIf(status != 'error' AND abs(e2e_s - ttft_s - decode_s) > 1e-9) FROM generations")
    assert 200 < errors < 600 and 200 < cancelled < 600 and no_ttft == errors  # 1 % each
    assert bad_prefill == 0 and bad_e2e == 0
    # The scripted regression: long prompts' prefill slower from 65 % of the window on.
    before, after = client.query(
        "SELECT medianIf(prefill_tps, ts < toDateTime64({t:Float64}, 3)), "
        "medianIf(prefill_tps, ts >= toDateTime64({u:Float64}, 3)) FROM generations WHERE input_bucket = '32k+'",
        parameters={"t": start + 0.6 * 30 * 86400, "u": start + 0.7 * 30 * 86400}).result_rows[0]
    assert after < before / 2
    days = (datetime.fromtimestamp(start - 86400, timezone.utc), datetime.fromtimestamp(start + 31 * 86400, timezone.utc))
    assert all_tier_mismatches(client, *days) == []
    client.close()


def test_read_blocking_sees_a_read_that_holds_the_server_up(bench):
    # The worker's loop stands in for a server whose one lock a read holds.
    # The held read keeps the lock 0.3 s after a /health request is known to
    # wait on it, so that request took at least 0.3 s under any load; what
    # the bench measures can be no more than the caller's clock around it.
    # Whether idle reads are fast is the benchmark's figure, not this test's.
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    loop, waiting, count = threading.Lock(), [0], threading.Lock()

    class Health(BaseHTTPRequestHandler):
        def do_GET(self):
            with count:
                waiting[0] += 1
            with loop:
                with count:
                    waiting[0] -= 1
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"{}")

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}"

    def held():
        with loop:
            deadline = time.monotonic() + 30
            while not waiting[0]:
                assert time.monotonic() < deadline, "no /health request came while the lock was held"
                time.sleep(0.001)
            time.sleep(0.3)

    try:
        mod = bench("bench_read_blocking")
        t = time.monotonic()
        idle, _ = mod.worst_health_latency(url, lambda: time.sleep(0.3))
        t_idle = time.monotonic() - t
        t = time.monotonic()
        blocked, took = mod.worst_health_latency(url, held)
        t_blocked = time.monotonic() - t
    finally:
        server.shutdown()
    assert 0 < idle <= t_idle, (idle, t_idle)
    # A blocked request may have begun before the read did: both lie within the call.
    assert 0.3 <= blocked <= t_blocked and 0.3 <= took <= t_blocked, (blocked, took, t_blocked)


def test_backlogs_control_is_clean_data_of_its_own_and_recorded_without_a_target(bench):
    b = bench("bench_worker_backlogs")
    data = b.backlogs(400, 100, control=True)
    ids = {kind: {e["request_id"] for _, v in parts[""] for e in json.loads(v)["events"]} for kind, parts in data.items()}
    assert len(ids["control"]) == len(ids["clean"]) == 400 and not ids["control"] & ids["clean"]
    assert "control" not in b.backlogs(400, 100) and b.expected(400)["warmup"] == 100

    def run(rate):
        return {"gens_per_s": rate, "gens_per_cpu_s": rate / 2, "dead": 4, "duplicates": 4}
    result = {"params": {"envelope_size": 100, "drains": 3}, "rounds": [
        {"clean": run(100.0), "invalid": run(95.0), "duplicate": run(80.0), "mixed": run(91.0), "control": run(88.0)}]}
    figs = {f["goal"]: f for f in b.figures(result)}
    assert figs["worker-backlog-control"]["met"] is None and figs["worker-backlog-control"]["ratio"] == 0.88
    assert figs["worker-duplicate-1pct-cpu"]["met"] is False and figs["worker-invalid-1pct"]["met"] is True
    assert "control (per s / per CPU s)" in b.render(result) and "0.88 / 0.88" in b.render(result)


def test_a_backlogs_round_counts_each_measures_fastest_drain(bench):
    b = bench("bench_worker_backlogs")
    drains = [{"rows": 1000, "wall_s": 2.0, "cpu_s": 1.0, "dead": 1, "duplicates": 0, "peak_rss_mib": 9},
              {"rows": 1000, "wall_s": 1.0, "cpu_s": 2.0, "dead": 2, "duplicates": 0, "peak_rss_mib": 8},
              {"rows": 1200, "wall_s": 4.0, "cpu_s": 4.0, "dead": 3, "duplicates": 0, "peak_rss_mib": 7}]
    got = b.combined(drains)
    assert (got["gens_per_s"], got["gens_per_cpu_s"], got["dead"]) == (1000.0, 1000.0, 3)
    assert got["drains"] == drains
