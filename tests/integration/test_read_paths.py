"""The read-path matrix: every read command, on every kind of data, gives the
same answer with the store opened directly and through a running worker.

Commands: `query bands` (exact, rollup, --abandoned exclude with --prefill
engine, re-bucketed with --prefill uncached, a model filter, the default
table, hourly steps on the rollup's hour tier and with --no-tiers), `latency`
(exact, rollup, the hour tier and --no-tiers), `chart` (PNG, SVG, HTML), `alerts check`
and `alerts backtest` (per-phase rules and the SLOs' burn-rate rules), `slo`
(exact, per-minute counts, whole window, by model as a table, an ad-hoc
objective), `dlq inspect`, `inflight`. Data: a normal window, a
sparse one (cells of one or two generations), a null-heavy one (no first
token, output_tokens = 1, no queue, no cache) and an empty one.

First a subprocess writes the store. Then, at the same time, a subprocess
runs every command with the store opened directly (chDB: a path opens in one
process only), and a worker started on a byte-for-byte copy of that store
owns it while the test process runs the same commands, which now read
through the worker's ClickHouse HTTP interface with clickhouse-connect, as
they read a ClickHouse server. Exit codes and output must be equal; exact
bands must equal numpy on the rows written.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
import sys
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import pytest
from clock import days_ago
from conftest import WorkerProc
from stores import migrated

pytestmark = [pytest.mark.integration, pytest.mark.slow]

T0 = days_ago(2)  # two days ago, midnight UTC
H = 3600
WINDOWS = {"normal": (0, 3 * H), "sparse": (4 * H, 5 * H), "nullheavy": (6 * H, 7 * H), "empty": (8 * H, 9 * H)}
QS = {"p1": 1, "p5": 5, "p50": 50, "p95": 95, "p99": 99}
# Declared SLOs (PHASEMETER_SLOS): one over everything, one scoped to long
# prompts of one model that leaves failures out. Targets of 0.8 and lower:
# a burn of 6× would need over 100 % misses, so no
# burn-rate alert fires here (`alerts check` exits 0 on this data; the
# firing cases are tests/integration/test_slo.py's).
SLO_FILE = """
[[slo]]
name = "chat"
objectives = { ttft_s = 2.0, decode_tps = 40.0 }
target = 0.8

[[slo]]
name = "long"
models = ["llama-4-maverick"]
buckets = ["8k-32k", "32k+"]
objectives = { prefill_tps = 2000.0, tpot_s = 0.05, e2e_s = 30.0 }
target = 0.5
count_failed = false
"""


def _iso(offset_s: float) -> str:
    return datetime.fromtimestamp(T0 + offset_s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def rows_for(kind: str) -> list[dict]:
    """The rows of one window, through the real derivation."""
    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import process

    lo, hi = WINDOWS[kind]
    if kind == "normal":
        rows = synthetic_rows(3000, T0 + lo, hi - lo, seed=1)
        for i, r in enumerate(rows):  # generations that never ended, as the join records them
            if i % 40 == 7:
                r.update(status="abandoned", finish_reason="expired_in_prefill", output_tokens=0, ttft_s=None,
                         prefill_tps=None, prefill_tps_uncached=None, decode_s=None, decode_tps=None, tpot_s=None)
            elif i % 40 == 8 and r["ttft_s"] is not None:
                r.update(status="abandoned", finish_reason="expired_in_decode", output_tokens=0, decode_tps=None,
                         tpot_s=None)
        return rows
    if kind == "sparse":
        return synthetic_rows(40, T0 + lo, hi - lo, seed=2)
    if kind == "empty":
        return []
    bucket, out = Bucketer(parse_edges("default")), []
    for i in range(300):
        event = {"schema_version": 1, "kind": "generation", "request_id": f"null-{i}", "model": "m-null",
                 "t0": T0 + lo + i * 11.0, "e2e_s": 1.5, "input_tokens": 100 + 97 * i}
        if i % 3 == 0:  # an error before the first token: no prefill, no decode
            event.update(status="error", output_tokens=0)
        elif i % 3 == 1:  # one output token: no decode phase
            event.update(ttft_s=0.4, output_tokens=1)
        else:  # no queue, no cache: their columns stay null
            event.update(ttft_s=0.2 + (i % 7) / 10, output_tokens=40)
        row = process(json.dumps(event).encode(), bucket, 1_000_000, now=T0 + 86_400)
        assert isinstance(row, dict), row
        out.append({**row, "src_topic": "t", "src_partition": 0, "src_offset": 100_000 + i})
    return out


def dead_letters() -> list[dict]:
    from phasemeter.stream_jobs import reasons as R

    return [{"ts": T0 + WINDOWS[k][0] + 60 + i, "reason": (R.MALFORMED_JSON, R.NEGATIVE)[i % 2],
             "detail": f"case {i}", "payload": "{", "payload_size": 1, "src_topic": "t", "src_partition": 1,
             "src_offset": 200_000 + 10 * j + i}
            for j, k in enumerate(("normal", "nullheavy")) for i in range(3)]


def commands(out_dir: Path) -> dict[str, list[str]]:
    cmds = {}
    for kind, (lo, hi) in WINDOWS.items():
        w = ["--from", _iso(lo), "--to", _iso(hi)]
        model = "m-null" if kind == "nullheavy" else "llama-4-maverick"
        cmds |= {
            f"{kind}/bands exact": ["query", "bands", *w, "--step", "10m", "--exact", "--format", "json"],
            f"{kind}/bands rollup": ["query", "bands", *w, "--step", "10m", "--rollup", "--format", "json"],
            f"{kind}/bands exclude engine": ["query", "bands", *w, "--step", "30m", "--exact", "--abandoned",
                                             "exclude", "--prefill", "engine", "--format", "json"],
            f"{kind}/bands rebucket uncached": ["query", "bands", *w, "--step", "1h", "--exact", "--buckets",
                                                "0,1024,8192", "--prefill", "uncached", "--format", "json"],
            f"{kind}/bands model": ["query", "bands", *w, "--step", "1h", "--rollup", "--model", model,
                                    "--format", "json"],
            f"{kind}/bands table": ["query", "bands", *w, "--step", "1h"],
            f"{kind}/latency exact": ["latency", *w, "--step", "10m", "--exact", "--format", "json"],
            f"{kind}/latency rollup": ["latency", *w, "--step", "10m", "--rollup", "--format", "json"],
            # Per P/D pool (schema/0027): text outputs of rows too.
            f"{kind}/bands by pool": ["query", "bands", *w, "--step", "1h", "--by", "decode_replica"],
            f"{kind}/latency by pool": ["latency", *w, "--step", "10m", "--by", "prefill_replica", "--format",
                                        "json"],
            # Whole-hour steps: the hour tier answers the hours after its first cell.
            f"{kind}/bands tiers": ["query", "bands", *w, "--step", "1h", "--rollup", "--format", "json"],
            f"{kind}/bands minute tier": ["query", "bands", *w, "--step", "1h", "--rollup", "--no-tiers",
                                          "--format", "json"],
            f"{kind}/latency tiers": ["latency", *w, "--step", "1h", "--rollup", "--format", "json"],
            f"{kind}/latency minute tier": ["latency", *w, "--step", "1h", "--rollup", "--no-tiers",
                                            "--format", "json"],
            f"{kind}/alerts check": ["alerts", "check", f"--at={_iso(hi)}", "--format", "json"],
            f"{kind}/alerts backtest": ["alerts", "backtest", "--from", _iso(lo), "--to", _iso(hi),
                                        "--every", "30m", "--format", "json"],
            f"{kind}/dlq inspect": ["dlq", "inspect", *w, "--format", "json"],
            f"{kind}/slo exact": ["slo", *w, "--step", "10m", "--exact", "--format", "json"],
            f"{kind}/slo rollup": ["slo", *w, "--step", "10m", "--rollup", "--format", "json"],
            f"{kind}/slo window": ["slo", *w, "--format", "json"],
            f"{kind}/slo table": ["slo", *w, "--by", "model", "--budget"],
            f"{kind}/slo objective": ["slo", *w, "--slo", "chat", "--objective", "ttft_s=0.5", "--format", "csv"],
        }
        for ext in ("png", "svg", "html"):
            cmds[f"{kind}/chart {ext}"] = ["chart", *w, "--step", "30m", "--exact", "--out",
                                           str(out_dir / f"{kind}.{ext}")]
    cmds["inflight"] = ["inflight", "--format", "json"]
    # Errors: the same message, exit code and (no) file both ways; through the
    # worker they are the worker's, raised by the same code.
    lo, hi = WINDOWS["normal"]
    w = ["--from", _iso(lo), "--to", _iso(hi)]
    cmds |= {
        "error/bad column": ["query", "bands", *w, "--columns", "nope"],
        "error/empty model": ["query", "bands", *w, "--model", " "],
        "error/out suffix": ["chart", *w, "--out", str(out_dir / "bad.txt")],
        "error/latency png": ["latency", *w, "--out", str(out_dir / "bad-latency.png")],
        "error/slos file": ["slo", *w, "--slos", "no-such-slos.toml"],  # relative: the CLI's folder
        "error/rules file": ["alerts", "check", f"--at={_iso(hi)}", "--rules", "no-such-rules.toml"],
    }
    return cmds


def run_all(cmds: dict[str, list[str]]) -> dict[str, dict]:
    from phasemeter.cli.main import main

    results = {}
    for name, argv in cmds.items():
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:  # argparse
                rc = exc.code
        results[name] = {"rc": rc, "out": out.getvalue(), "err": err.getvalue()}
    return results


def write_phase() -> None:
    """In a subprocess: write the store that both paths read."""
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    from phasemeter.stream_jobs.app import declared_slos
    from phasemeter.store.slo_defs import register

    # Declared a day before the history, as a worker running with the file
    # would have: the per-minute counts cover every window.
    register(client, declared_slos(settings), at=datetime.fromtimestamp(T0 - 86400, timezone.utc))
    sink = Sink.over(client, settings.store_dsn)
    for kind in WINDOWS:
        rows = rows_for(kind)
        if rows:
            sink.write(rows, [])
    sink.write([], dead_letters())
    client.close()


def direct_phase(result_path: str, out_dir: str) -> None:
    """In a subprocess: every command on the store, opened directly."""
    from phasemeter.query.remote import worker_url
    from phasemeter.settings import Settings

    assert worker_url(Settings.from_env().data_path) is None  # no worker: commands open the store themselves
    Path(result_path).write_text(json.dumps(run_all(commands(Path(out_dir)))))


def _normalise(name: str, out: str) -> str:
    """What may differ between two runs of the same read: paths of chart files."""
    return out.replace("/direct/", "/x/").replace("/worker/", "/x/").replace("/worker-light/", "/x/")


def test_every_read_command_is_the_same_direct_and_through_the_worker(pm_env, tmp_path, monkeypatch):
    for d in ("direct", "worker"):
        (tmp_path / d).mkdir()
    (tmp_path / "slos.toml").write_text(SLO_FILE)
    pm_env = {**pm_env, "PHASEMETER_SLOS": str(tmp_path / "slos.toml")}
    env = {**pm_env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1]),
                                                     os.environ.get("PYTHONPATH", "")])}
    migrated(env)
    written = subprocess.run([sys.executable, "-c", "import test_read_paths as t; t.write_phase()"],
                             env=env, capture_output=True, text=True, timeout=300)
    assert written.returncode == 0, written.stderr[-3000:]
    # The worker owns a byte-for-byte copy of the store written above, so the
    # direct commands (a subprocess on the original: a chDB path opens in one
    # process) run while the same commands go through the worker; one after
    # the other they took 59 s + 41 s.
    # symlinks=True: ClickHouse's databases link to their tables' folders by
    # relative symlinks, which must stay links (followed, the copy won't open).
    shutil.copytree(pm_env["PHASEMETER_DATA_DIR"], tmp_path / "data-w", symlinks=True)
    pm_env = {**pm_env, "PHASEMETER_DATA_DIR": str(tmp_path / "data-w")}
    script = "import sys, test_read_paths as t; t.direct_phase(sys.argv[1], sys.argv[2])"
    # A port no worker listens on: `inflight` asks the worker of its settings'
    # port, and the direct run must find none, as with no worker running.
    from ports import free_port

    env = {**env, "PHASEMETER_WEB_PORT": str(free_port())}
    # Its stderr to a file: a pipe nobody reads until the worker's half is
    # done could fill and hold the direct half up.
    with open(tmp_path / "direct.err", "wb") as err_file:
        direct_run = subprocess.Popen([sys.executable, "-c", script, str(tmp_path / "direct.json"),
                                       str(tmp_path / "direct")], env=env, stdout=subprocess.DEVNULL,
                                      stderr=err_file)
    w = WorkerProc(pm_env, tmp_path, int(pm_env["PHASEMETER_WEB_PORT"]))
    try:
        w.start()
        for k, v in pm_env.items():
            monkeypatch.setenv(k, v)
        monkeypatch.delenv("CLICKHOUSE_URL", raising=False)
        from phasemeter.query.remote import SQL_URL, worker_state

        assert worker_state(Path(pm_env["PHASEMETER_DATA_DIR"]))[SQL_URL]  # commands read through its SQL interface
        via = run_all(commands(tmp_path / "worker"))
        direct_run.wait(600)
        assert direct_run.returncode == 0, (tmp_path / "direct.err").read_text(errors="replace")[-3000:]
        direct = json.loads((tmp_path / "direct.json").read_text())
        (tmp_path / "worker-light").mkdir()
        lightweight = run_light(commands(tmp_path / "worker"), direct, pm_env, tmp_path)
    finally:
        w.stop()
        if direct_run.poll() is None:
            direct_run.kill()
            direct_run.wait()

    assert direct.keys() == via.keys()
    for name in direct:
        d, v = direct[name], via[name]
        if name == "inflight":  # only a worker holds the join state
            assert d["rc"] != 0 and "no worker answering" in d["err"], d
            assert v["rc"] == 0 and json.loads(v["out"])["in_flight"] == [], v
            continue
        assert d["rc"] == v["rc"], (name, d, v)
        assert _normalise(name, d["out"]) == _normalise(name, v["out"]), name
        assert _normalise(name, d["err"]) == _normalise(name, v["err"]), name
        assert "Traceback" not in d["err"] + v["err"], (name, d["err"], v["err"])
    _check_outcomes(direct, tmp_path)
    for ext in ("png", "svg", "html"):  # drawn from rows read through the worker: the same bytes
        for kind in WINDOWS:
            a, b = (_chart_bytes(tmp_path / d / f"{kind}.{ext}") for d in ("direct", "worker"))
            assert a == b, (kind, ext)
    assert lightweight == {name: ["pandas"] if name in FRAMES else [] for name in LIGHT}, lightweight


def _chart_bytes(path: Path) -> bytes:
    """A chart file as compared: an SVG's creation date is the one difference."""
    import re

    return re.sub(rb"<dc:date>[^<]*</dc:date>", b"", path.read_bytes())


# Commands run as a user runs them (a fresh `python -m phasemeter` process)
# through the worker: the same output as the direct run, and chDB never
# imported (the CLI reads the worker's SQL interface; it does not open the store),
# nor pandas where the output is text.
LIGHT = ("normal/bands exact", "normal/bands table", "normal/latency exact", "normal/slo table",
         "normal/bands by pool", "normal/latency by pool",
         "normal/alerts check", "normal/alerts backtest", "normal/dlq inspect", "normal/chart html",
         "error/bad column", "error/out suffix")
HEAVY = ("chdb", "pandas")
# The text outputs read plain rows (phasemeter/query/rows.py): only `chart`
# (its frame is read before the --out suffix is checked) and `dlq inspect` (a
# frame of the dead letters) import pandas.
FRAMES = ("normal/chart html", "normal/dlq inspect", "error/out suffix")


def run_light(cmds: dict[str, list[str]], direct: dict, env: dict, tmp_path: Path) -> dict[str, list[str]]:
    heavy = {}
    for name in LIGHT:
        argv = [a.replace("/worker/", "/worker-light/") for a in cmds[name]]
        done = subprocess.run([sys.executable, "-X", "importtime", "-m", "phasemeter", *argv], env=env,
                              capture_output=True, text=True, timeout=300)
        lines = done.stderr.splitlines(keepends=True)
        names = {x.rsplit("|", 1)[-1].strip() for x in lines if x.startswith("import time:")}
        err = "".join(x for x in lines if not x.startswith("import time:"))
        assert "phasemeter.cli.main" in names, name  # the listing is real
        heavy[name] = sorted({n.partition(".")[0] for n in names} & set(HEAVY))
        d = direct[name]
        assert (done.returncode, _normalise(name, done.stdout),
                _normalise(name, err)) == (d["rc"], _normalise(name, d["out"]), _normalise(name, d["err"])), name
    assert (tmp_path / "worker-light" / "normal.html").read_bytes() == (tmp_path / "direct" / "normal.html").read_bytes()
    return heavy


def _check_outcomes(results: dict, tmp_path: Path) -> None:
    """What each cell must say, beyond direct == worker."""
    ok = {n for n, r in results.items() if r["rc"] == 0}
    for kind in ("normal", "sparse", "nullheavy"):
        for cmd in ("bands exact", "bands rollup", "bands exclude engine", "bands rebucket uncached",
                    "bands model", "bands table", "latency exact", "latency rollup", "bands tiers",
                    "bands minute tier", "latency tiers", "latency minute tier", "alerts check",
                    "alerts backtest", "dlq inspect", "chart png", "chart svg", "chart html", "slo exact",
                    "slo rollup", "slo window", "slo table", "slo objective", "bands by pool", "latency by pool"):
            assert f"{kind}/{cmd}" in ok, (kind, cmd, results[f"{kind}/{cmd}"])
        # The matrix's rows name no pool: one pool '', the exact cells' counts, no transfer.
        pooled = json.loads(results[f"{kind}/latency by pool"]["out"])["rows"]
        exact = json.loads(results[f"{kind}/latency exact"]["out"])["rows"]
        assert len(pooled) == len(exact) > 0, kind
        assert [(r["t"], r["model"], r["input_bucket"], r["n"], r["ttft_p50"]) for r in pooled] == \
            [(r["t"], r["model"], r["input_bucket"], r["n"], r["ttft_p50"]) for r in exact], kind
        assert {(r["prefill_replica"], r["kv_transfer_n"], r["kv_transfer_p50"]) for r in pooled} == {("", 0, None)}
        assert "decode_replica" in results[f"{kind}/bands by pool"]["out"], kind
        bands = json.loads(results[f"{kind}/bands exact"]["out"])
        _equal_numpy(bands["rows"], rows_for(kind), 600)
        rollup = json.loads(results[f"{kind}/bands rollup"]["out"])
        assert [r["n"] for r in rollup["rows"]] == [r["n"] for r in bands["rows"]], kind
        for view in ("bands", "latency"):
            tiered = json.loads(results[f"{kind}/{view} tiers"]["out"])
            minute = json.loads(results[f"{kind}/{view} minute tier"]["out"])
            assert "hour + minute tiers" in tiered["reason"] and "; minute tier" in minute["reason"], kind
            assert [(r["t"], r["model"], r["input_bucket"], r["n"]) for r in tiered["rows"]] == \
                [(r["t"], r["model"], r["input_bucket"], r["n"]) for r in minute["rows"]], (kind, view)
            assert sum(r["n"] for r in tiered["rows"]) == sum(r["n"] for r in bands["rows"]), (kind, view)
    for ext, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("html", b"<!DOCTYPE html")):
        assert (tmp_path / "direct" / f"normal.{ext}").read_bytes().startswith(magic), ext
        assert (tmp_path / "worker" / f"normal.{ext}").read_bytes().startswith(magic), ext
    # SLOs are declared: the HTML chart carries their attainment row, the same both ways.
    for d in ("direct", "worker"):
        html = (tmp_path / d / "normal.html").read_text()
        assert 'id="phasemeter-slo"' in html and '"slo": "chat"' in html and '"slo": "long"' in html, d
    # The empty window: an answer that says so, never a crash. A model filter
    # there is not a typo to report (nothing exists to list): the same empty answer.
    for cmd in ("bands exact", "bands rollup", "latency exact", "latency rollup", "bands tiers", "latency tiers",
                "bands exclude engine", "bands rebucket uncached", "bands minute tier", "latency minute tier"):
        r = results[f"empty/{cmd}"]
        assert r["rc"] == 0 and json.loads(r["out"])["rows"] == [], (cmd, r)
    checked = json.loads(results["empty/alerts check"]["out"])  # a baseline, no current window: no verdict
    assert checked["firing"] == 0 and len(checked["results"]) > 0
    assert {(x["state"], x["n_current"]) for x in checked["results"]} == {("insufficient data", 0)}
    backtest = json.loads(results["empty/alerts backtest"]["out"])
    assert (backtest["points"], backtest["episodes"], backtest["burn_rate_episodes"]) == (3, [], [])
    assert json.loads(results["empty/dlq inspect"]["out"]) == {"total": 0, "reasons": []}
    assert results["empty/slo objective"]["out"].splitlines()[1:] == []  # the CSV header alone
    assert results["empty/slo objective"]["out"].startswith("slo,model,input_bucket,n,")
    for ext, magic in (("png", b"\x89PNG"), ("svg", b"<?xml"), ("html", b"<!DOCTYPE html")):
        assert "(0 rows, exact path" in results[f"empty/chart {ext}"]["out"], ext
        assert (tmp_path / "direct" / f"empty.{ext}").read_bytes().startswith(magic), ext
    assert "(no generations in this window)" in results["empty/bands table"]["out"]
    assert results["empty/bands model"]["rc"] == 0 and json.loads(results["empty/bands model"]["out"])["rows"] == []
    normal = json.loads(results["normal/bands exact"]["out"])["rows"]
    assert sum(r["abandoned"] for r in normal) == sum(1 for r in rows_for("normal") if r["status"] == "abandoned") > 100
    excluded = json.loads(results["normal/bands exclude engine"]["out"])["rows"]
    assert sum(r["n"] for r in excluded) == sum(r["n"] for r in normal) - sum(r["abandoned"] for r in normal)
    nulls = json.loads(results["nullheavy/bands exact"]["out"])["rows"]
    assert sum(r["decode_n"] for r in nulls) == 100 and all(r["prefill_n"] <= r["n"] for r in nulls)
    _check_slos(results)
    for name, says in (("bad column", "--columns: unknown column(s) 'nope'"), ("empty model", "--model ' '"),
                       ("out suffix", "--out "), ("latency png", "latency charts are HTML only"),
                       ("slos file", "--slos no-such-slos.toml: cannot read"),
                       ("rules file", "--rules no-such-rules.toml: cannot read")):
        r = results[f"error/{name}"]
        assert r["rc"] == 2 and says in r["err"] and r["out"] == "", (name, r)
    for d in ("direct", "worker"):
        assert not (tmp_path / d / "bad.txt").exists() and not (tmp_path / d / "bad-latency.png").exists(), d
    dlq = json.loads(results["normal/dlq inspect"]["out"])
    assert dlq["total"] == 3 and {r["reason"] for r in dlq["reasons"]} == {"malformed_json", "negative"}, dlq


def _equal_numpy(got: list[dict], rows: list[dict], step_s: int) -> None:
    cells: dict = {}
    for r in rows:
        key = (int(r["ts"] // step_s * step_s), r["model"], r["input_bucket"])
        cells.setdefault(key, []).append(r)
    assert len(got) == len(cells)
    for rec in got:
        t = int(datetime.strptime(rec["t"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=timezone.utc).timestamp())
        members = cells[(t, rec["model"], rec["input_bucket"])]
        assert rec["n"] == len(members)
        for phase, col in (("prefill", "prefill_tps"), ("decode", "decode_tps")):
            vals = np.array([m[col] for m in members if m[col] is not None], dtype="float64")
            assert rec[f"{phase}_n"] == len(vals)
            for p, q in QS.items():
                want = float(np.percentile(vals, q, method="linear")) if len(vals) else None
                assert rec[f"{phase}_{p}"] == (pytest.approx(want, rel=1e-12) if want is not None else None), \
                    (rec["model"], rec["input_bucket"], phase, p)


def _slo_expected(rows: list[dict], slo, step_s: int | None, lo: float) -> dict:
    """Counts per cell by the definition of docs/slo.md, in plain Python."""
    out: dict = {}
    for r in rows:
        if (slo.models and r["model"] not in slo.models) or (slo.buckets and r["input_bucket"] not in slo.buckets):
            continue
        failed = r["status"] in ("error", "abandoned")
        if failed and not slo.count_failed:
            continue
        limits = dict(slo.objectives)
        miss = [int(limits.get(m) is not None and r[m] is not None
                    and (r[m] > limits[m] if m in ("ttft_s", "tpot_s", "e2e_s") else r[m] < limits[m]))
                for m in ("ttft_s", "prefill_tps", "tpot_s", "decode_tps", "e2e_s")]
        t = lo if step_s is None else r["ts"] // step_s * step_s
        key = (int(t), r["model"], r["input_bucket"])
        flags = [1, int(not failed and not any(miss)), int(failed)] + miss
        out[key] = [a + b for a, b in zip(out.get(key, [0] * 8), flags, strict=True)]
    return {k: v for k, v in out.items() if v[0]}


def _check_slos(results: dict) -> None:
    from phasemeter.alerts.slo_rules import SLO_COUNTS, parse_slos
    import tomllib

    slos = parse_slos(tomllib.loads(SLO_FILE)).slos
    for kind in ("normal", "sparse", "nullheavy"):
        lo = T0 + WINDOWS[kind][0]
        exact = json.loads(results[f"{kind}/slo exact"]["out"])["slos"]
        rollup = json.loads(results[f"{kind}/slo rollup"]["out"])["slos"]
        whole = json.loads(results[f"{kind}/slo window"]["out"])["slos"]
        assert len(slos) == len(exact) == len(rollup) == len(whole) == 2, kind  # chat and long
        for slo, e, r, w in zip(slos, exact, rollup, whole, strict=True):
            assert (e["meta"]["path"], r["meta"]["path"]) == ("exact", "rollup")
            got = {(int(datetime.fromisoformat(x["t"]).timestamp()), x["model"], x["input_bucket"]):
                   [x[c] for c in SLO_COUNTS] for x in e["rows"]}
            assert got == _slo_expected(rows_for(kind), slo, 600, lo), (kind, slo.name)
            assert [[x[c] for c in SLO_COUNTS] for x in r["rows"]] == list(got.values()), (kind, slo.name)
            totals = _slo_expected(rows_for(kind), slo, None, lo)
            assert {(x["model"], x["input_bucket"]): [x[c] for c in SLO_COUNTS] for x in w["rows"]} == \
                {(m, b): v for (_, m, b), v in totals.items()}, (kind, slo.name)
    assert sum(x["n"] for x in json.loads(results["normal/slo window"]["out"])["slos"][0]["rows"]) == 3000
    assert "(no generations in scope in this window)" in results["empty/slo table"]["out"]
    # --budget: the period (30 d to --to) holds every window before it, so n is all rows in scope.
    line = next(x for x in results["empty/slo table"]["out"].splitlines() if x.startswith("# error budget left"))
    maverick = sum(1 for k in WINDOWS for r in rows_for(k) if r["model"] == "llama-4-maverick")
    assert "30 d to" in line and f"llama-4-maverick " in line and f"n={maverick:,})" in line, line
    for cmd in ("slo exact", "slo rollup", "slo window"):
        assert all(s["rows"] == [] for s in json.loads(results[f"empty/{cmd}"]["out"])["slos"]), cmd
    adhoc = results["normal/slo objective"]["out"].splitlines()
    assert adhoc[0].startswith("slo,model,input_bucket,n,attainment") and len(adhoc) > 5
    assert "burn_rate" in json.loads(results["normal/alerts check"]["out"])
