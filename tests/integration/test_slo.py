"""SLO attainment on a real chDB store: the exact and the per-minute paths
equal a pure-Python count of the same rows (abandoned and errored included,
windows crossing step boundaries), the crash repair of the SLO counts, the
registration of declared SLOs, and burn-rate alerts routed by phase through
`phasemeter alerts check` / `backtest`."""

from __future__ import annotations

import contextlib
import io
import json
import random
from datetime import datetime, timedelta, timezone

import pytest
from clock import days_ago
from stores import migrated_client

from phasemeter.alerts import slo_rules
from phasemeter.alerts.slo_rules import SLO_COUNTS, parse_slos
from phasemeter.analytics.slo import attainment
from phasemeter.query.runner import DirectRunner
from phasemeter.store import migrate as mig
from phasemeter.store import rollup, slo_defs
from phasemeter.store.slices import cell_chars, slices
from phasemeter.stream_jobs import ledger
from phasemeter.stream_jobs.buckets import labels, parse_edges
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
LABELS = labels(parse_edges("default"))
T0 = days_ago(3)  # three days ago, midnight UTC
SLOS = parse_slos({"slo": [
    {"name": "chat", "objectives": {"ttft_s": 1.0, "decode_tps": 40.0}, "target": 0.95},
    {"name": "long", "models": ["llama-4-maverick"], "buckets": ["8k-32k", "32k+"], "count_failed": False,
     "objectives": {"prefill_tps": 5000.0, "tpot_s": 0.03, "e2e_s": 12.0}, "target": 0.9},
]}, bucket_labels=LABELS)
FAILED = ("error", "abandoned")


def judge(row: dict, slo) -> list[int] | None:
    """The definition of docs/slo.md in plain Python (None: left out)."""
    failed = row["status"] in FAILED
    if failed and not slo.count_failed:
        return None
    limits = dict(slo.objectives)
    value = {"ttft_s": row["ttft_s"], "prefill_tps": row["prefill_tps"], "tpot_s": row["tpot_s"],
             "decode_tps": row["decode_tps"], "e2e_s": row["e2e_s"]}
    miss = {}
    for m in ("ttft_s", "prefill_tps", "tpot_s", "decode_tps", "e2e_s"):
        v, lim = value[m], limits.get(m)
        if lim is None or v is None:
            miss[m] = 0
        else:
            miss[m] = int(v > lim) if m in ("ttft_s", "tpot_s", "e2e_s") else int(v < lim)
    return [1, int(not failed and not any(miss.values())), int(failed)] + list(miss.values())


def expected(rows, slo, lo: float, hi: float, step_s: int | None) -> dict:
    out: dict = {}
    for r in rows:
        if not lo <= r["ts"] < hi:
            continue
        if (slo.models and r["model"] not in slo.models) or (slo.buckets and r["input_bucket"] not in slo.buckets):
            continue
        flags = judge(r, slo)
        if flags is None:
            continue
        t = lo if step_s is None else r["ts"] // step_s * step_s
        key = (int(t), r["model"], r["input_bucket"])
        out[key] = [a + b for a, b in zip(out.get(key, [0] * len(SLO_COUNTS)), flags, strict=True)]
    return out


def got(rows: list[dict]) -> dict:
    return {(int(r["t"].timestamp()), r["model"], r["input_bucket"]): [r[k] for k in SLO_COUNTS] for r in rows}


def make_rows(n: int = 4000, seed: int = 3) -> list[dict]:
    from phasemeter.demo.rows import synthetic_rows

    rows = synthetic_rows(n, T0, 6 * 3600, seed=seed)
    rnd = random.Random(seed)
    for i, r in enumerate(rows):
        if i % 37 == 5:  # never ended, before the first token
            r.update(status="abandoned", output_tokens=0, ttft_s=None, prefill_tps=None, decode_tps=None,
                     tpot_s=None, decode_s=None)
        elif i % 37 == 6 and r["ttft_s"] is not None:  # never ended, in decode
            r.update(status="abandoned", decode_tps=None, tpot_s=None)
        elif rnd.random() < 0.01:
            r.update(status="error", ttft_s=None, prefill_tps=None, decode_tps=None, tpot_s=None)
    return rows


@pytest.fixture
def store(tmp_path):
    with migrated_client(tmp_path, "t_slo") as c:
        yield c


def test_both_paths_equal_a_python_count(store):
    # Declared before the rows were written (as a worker running with it).
    assert slo_defs.register(store, SLOS, at=datetime.fromtimestamp(T0 - 86400, timezone.utc)) == (
        ["chat", "long"], [])
    rows = make_rows()
    assert sum(r["status"] == "abandoned" for r in rows) > 150 and sum(r["status"] == "error" for r in rows) > 20
    Sink.over(store, "chdb").write(rows, [])
    runner = DirectRunner(store)
    # Whole minutes that cross 10-minute step boundaries at both ends.
    lo, hi = T0 + 3 * 60, T0 + 5 * 3600 + 17 * 60
    start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (lo, hi))
    assert [s.name for s in SLOS.slos] == ["chat", "long"]
    for slo in SLOS.slos:
        for step in (600, None):
            want = expected(rows, slo, lo, hi, step)
            assert want and sum(v[0] for v in want.values()) > 300
            for force in ("exact", "rollup"):
                out, meta = attainment(runner, slo, start, end, step, bucket_labels=LABELS, force=force)
                assert meta["path"] == force
                assert got(out) == want, (slo.name, step, force)
        # The automatic choice over a long window takes the counted path.
        _, meta = attainment(runner, slo, start - timedelta(hours=1), end, None, bucket_labels=LABELS)
        assert meta["path"] == "rollup", meta


def test_by_model_and_the_derived_values(store):
    slo_defs.register(store, SLOS, at=datetime.fromtimestamp(T0 - 60, timezone.utc))
    rows = make_rows(1500)
    Sink.over(store, "chdb").write(rows, [])
    runner = DirectRunner(store)
    start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (T0, T0 + 6 * 3600))
    chat = SLOS.slos[0]
    out, _ = attainment(runner, chat, start, end, None, bucket_labels=LABELS, by="model")
    want = expected(rows, chat, T0, T0 + 6 * 3600, None)
    models = sorted({m for (_, m, _) in want})
    assert len(models) >= 2 and sorted(r["model"] for r in out) == models  # one row per model, none missing
    for r in out:
        total = [sum(v[i] for (t, m, b), v in want.items() if m == r["model"]) for i in range(len(SLO_COUNTS))]
        assert [r[k] for k in SLO_COUNTS] == total and r["input_bucket"] == "all"
        assert r["attainment"] == pytest.approx(total[1] / total[0])
        assert r["burn_rate"] == pytest.approx((1 - total[1] / total[0]) / 0.05)
        assert r["goodput_per_s"] == pytest.approx(total[1] / (6 * 3600))


def test_the_rollup_refuses_windows_before_registration(store):
    slo_defs.register(store, SLOS)  # now: the history was written before it
    Sink.over(store, "chdb").write(make_rows(300), [])
    runner = DirectRunner(store)
    start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (T0, T0 + 6 * 3600))
    from phasemeter.timeparse import ArgError

    with pytest.raises(ArgError, match="counted per minute from .* after --from"):
        attainment(runner, SLOS.slos[0], start, end, 600, bucket_labels=LABELS, force="rollup")
    out, meta = attainment(runner, SLOS.slos[0], start, end, 600, bucket_labels=LABELS)
    assert meta["path"] == "exact" and "counted per minute from" in meta["reason"] and out


def test_registration_is_idempotent_and_retires_undeclared_slos(store):
    assert slo_defs.register(store, SLOS)[0] == ["chat", "long"]
    assert slo_defs.register(store, SLOS) == ([], [])
    first = slo_defs.registered(store)
    # Another name and target judging alike: one more row, the same id and coverage.
    alias = parse_slos({"slo": [{"name": "chat-strict", "objectives": {"ttft_s": 1.0, "decode_tps": 40.0},
                                 "target": 0.99}, *[{"name": s.name, "objectives": dict(s.objectives),
                                                     "target": s.target, "count_failed": s.count_failed,
                                                     **({"models": list(s.models)} if s.models else {}),
                                                     **({"buckets": list(s.buckets)} if s.buckets else {})}
                                                    for s in SLOS.slos]]}, bucket_labels=LABELS)
    assert alias.slos[0].slo_id == SLOS.slos[0].slo_id
    assert slo_defs.register(store, alias) == (["chat-strict"], [])
    assert slo_defs.registered(store) == first
    names = store.query("SELECT name, target FROM slo_definitions ORDER BY name").result_rows
    assert names == [("chat", 0.95), ("chat-strict", 0.99), ("long", 0.9)]
    assert slo_defs.register(store, SLOS) == ([], [])  # the alias row goes, the id stays counted
    assert slo_defs.registered(store) == first
    changed = parse_slos({"slo": [{"name": "chat", "objectives": {"ttft_s": 1.5}, "target": 0.95}]})
    added, retired = slo_defs.register(store, changed)
    assert added == ["chat"] and sorted(retired) == sorted(first)
    assert set(slo_defs.registered(store)) == {changed.slos[0].slo_id}
    from phasemeter.alerts.slo_rules import NONE

    assert slo_defs.register(store, NONE) == ([], [changed.slos[0].slo_id])
    assert slo_defs.registered(store) == {}


def test_registration_stores_each_field_as_declared_to_the_millisecond(store):
    """The bound statement writes every column of slo_definitions in the
    table's own order, objectives in OBJECTIVES order, and the registration
    instant to the millisecond: cut to the second, 12:00:00.500 would claim
    that minute's first half-second was counted."""
    import re

    from phasemeter.alerts.slo_rules import OBJECTIVES
    from phasemeter.store.client import load_sql

    listed = re.search(r"INSERT INTO slo_definitions \(([^)]*)\)", load_sql("slo_register")).group(1)
    table = [name for name, *_ in store.query("DESCRIBE TABLE slo_definitions").result_rows]
    assert [c.strip() for c in listed.split(",")] == table
    at = datetime.fromtimestamp(T0 - 3600 + 0.5, timezone.utc)
    assert slo_defs.register(store, SLOS, at=at)[0] == ["chat", "long"]
    got = store.query("SELECT * FROM slo_definitions ORDER BY name").result_rows
    want = [(s.slo_id, s.name, list(s.models), list(s.buckets), *(s.limit(m) for m in OBJECTIVES),
             int(s.count_failed), s.target, at.replace(tzinfo=None)) for s in sorted(SLOS.slos, key=lambda s: s.name)]
    assert got == want
    # counted from the first whole minute after it, plus one for clocks ahead (schema/0026)
    assert set(slo_defs.registered(store).values()) == {datetime.fromtimestamp(T0 - 3600 + 120, timezone.utc)}
    whole = datetime.fromtimestamp(T0 - 3600, timezone.utc)  # on a whole minute: the next one, plus one
    assert store.query("SELECT phasemeter_slo_covered_from_v1({t:DateTime64(3)})",
                       parameters={"t": whole.replace(tzinfo=None)}).result_rows[0][0] == \
        (whole + timedelta(minutes=1)).replace(tzinfo=None)


# "sink": the worker's call with the default limit; "thirds": the cells cut into
# three or four statements, as a server's bound-value limit would cut a wide re-read.
@pytest.mark.parametrize("how", ["sink", "thirds"])
def test_repair_rebuilds_lost_and_doubled_slo_counts(store, how):
    slo_defs.register(store, SLOS, at=datetime.fromtimestamp(T0 - 60, timezone.utc))
    rows = make_rows(1200)
    sink = Sink.over(store, "chdb")
    sink.write(rows[:600], [])
    store.command("DETACH TABLE slo_minute_mv")  # the crash: raw holds a batch the view never saw
    sink.write(rows[600:], [])
    store.command("ATTACH TABLE slo_minute_mv")
    far = (datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))
    lost = ledger.slo_mismatches(store, *far)
    assert lost and all(raw > counted for *_, raw, counted in lost)
    # ... and a view block counted twice elsewhere.
    store.command("INSERT INTO slo_minute SELECT * FROM slo_minute WHERE minute < {m:DateTime}",
                  parameters={"m": datetime.fromtimestamp(T0 + 1800, timezone.utc).replace(tzinfo=None)},
                  settings={"insert_deduplicate": 0})
    bad = ledger.slo_mismatches(store, *far)
    assert any(raw < counted for *_, raw, counted in bad)
    cells = {(m, b, t) for _, m, b, t, _, _ in bad}
    if how == "sink":
        assert len(sink.repair_rollup(cells)) >= len(bad)
    else:
        limit = sum(map(cell_chars, cells)) // 3 + 1
        assert len(list(slices(sorted(cells), cell_chars, limit))) >= 3
        assert len(rollup.repair_cells(store, cells, limit=limit) + ledger.repair_slo(store, cells, limit=limit)) \
            >= len(bad)
    assert ledger.slo_mismatches(store, *far) == []
    runner = DirectRunner(store)
    start, end = (datetime.fromtimestamp(x, timezone.utc) for x in (T0, T0 + 6 * 3600))
    assert [s.name for s in SLOS.slos] == ["chat", "long"]
    for slo in SLOS.slos:
        out, _ = attainment(runner, slo, start, end, 600, bucket_labels=LABELS, force="rollup")
        assert got(out) == expected(rows, slo, T0, T0 + 6 * 3600, 600)
    assert sink.repair_rollup(cells) == []  # idempotent


def test_with_no_slo_declared_there_is_nothing_to_check(store):
    # repair_slo skips its check when no SLO is declared (the default): the
    # check itself could find nothing, a retired SLO's counts not being raw's.
    slo_defs.register(store, SLOS, at=datetime.fromtimestamp(T0 - 60, timezone.utc))
    Sink.over(store, "chdb").write(make_rows(300), [])
    store.command("INSERT INTO slo_minute SELECT * FROM slo_minute", settings={"insert_deduplicate": 0})
    far = (datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc))
    cells = {(m, b, t) for _, m, b, t, _, _ in ledger.slo_mismatches(store, *far)}
    assert cells and slo_defs.registered(store)
    slo_defs.register(store, slo_rules.NONE)
    assert not slo_defs.registered(store)
    assert ledger.slo_mismatches(store, *far) == [] and ledger.repair_slo(store, cells) == []


def _cli(*argv: str) -> tuple[int, str, str]:
    from phasemeter.cli.main import main

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(list(argv))
        except SystemExit as exc:
            rc = exc.code
    return rc, out.getvalue(), err.getvalue()


BURN_SLOS = """
[[slo]]
name = "chat"
objectives = { ttft_s = 2.0, decode_tps = 30.0 }
target = 0.99
"""


def incident_rows(phase: str, start: float, minutes: int, bad_from: int) -> list[dict]:
    """One generation per 2 s; from minute `bad_from` on, 30 % break one phase's objective."""
    from phasemeter.stream_jobs.buckets import Bucketer
    from phasemeter.stream_jobs.derive import process

    bucket, rows = Bucketer(parse_edges("default")), []
    for i in range(minutes * 30):
        t = start + i * 2.0
        bad = i >= bad_from * 30 and i % 10 < 3
        ttft = 3.5 if bad and phase == "prefill" else 0.4
        out_tokens = 200
        decode_s = (out_tokens - 1) / (12.0 if bad and phase == "decode" else 60.0)
        ev = {"schema_version": 1, "kind": "generation", "request_id": f"{phase}-{i}", "model": "m",
              "t0": t, "ttft_s": ttft, "e2e_s": ttft + decode_s, "input_tokens": 1000, "output_tokens": out_tokens}
        row = process(json.dumps(ev).encode(), bucket, 1_000_000, now=start + 86400 * 5)
        rows.append({**row, "src_topic": "t", "src_partition": 0, "src_offset": i})
    return rows


@pytest.mark.parametrize("phase, other", [("prefill", "decode"), ("decode", "prefill")])
def test_burn_rate_alerts_route_to_the_burning_phase(tmp_path, monkeypatch, phase, other):
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect

    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "data"))
    for var in ("CLICKHOUSE_URL", "PHASEMETER_SLOS"):
        monkeypatch.delenv(var, raising=False)
    slos = tmp_path / "slos.toml"
    slos.write_text(BURN_SLOS)
    client = connect(Settings.from_env())
    mig.migrate(client)
    start = T0 + 3600
    Sink.over(client, "chdb").write(incident_rows(phase, start, minutes=240, bad_from=150), [])
    client.close()
    iso = lambda s: datetime.fromtimestamp(start + s, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")  # noqa: E731
    # Before the incident: silent. 40 min into it (30 % misses against a 1 %
    # budget: the 1 h window burns 0.5× per minute of incident, past 14.4 after
    # 29 min), the fast burn pages, routed by phase.
    rc, out, err = _cli("alerts", "check", "--slos", str(slos), f"--at={iso(140 * 60)}", "--format", "json")
    assert rc == 0 and all(r["state"] == "ok" for r in json.loads(out)["burn_rate"]), (out, err)
    rc, out, err = _cli("alerts", "check", "--slos", str(slos), f"--at={iso(190 * 60)}", "--format", "json")
    burns = {r["rule"]: r for r in json.loads(out)["burn_rate"]}
    assert rc == 1, (out, err)
    fast = burns["fast-burn"]
    assert fast["state"] == "firing" and fast["phase"] == phase and fast["severity"] == "page"
    assert fast["runbook"] == f"docs/runbooks/{phase}.md" and other not in fast["runbook"]
    assert fast["burn_short"] == pytest.approx(30.0, rel=0.1)
    # The table says which phase burns and links its runbook only.
    rc, text, _ = _cli("alerts", "check", "--slos", str(slos), f"--at={iso(190 * 60)}")
    line = next(x for x in text.splitlines() if x.startswith("FIRING page chat/fast-burn"))
    assert f"budget burnt by {phase}" in line and f"runbooks/{phase}.md" in line and f"runbooks/{other}.md" not in line
    # Backtest: the episode starts within minutes of the incident and never routes to the other phase.
    rc, out, err = _cli("alerts", "backtest", "--slos", str(slos), "--from", iso(60 * 60), "--to", iso(230 * 60),
                        "--every", "5m", "--format", "json")
    assert rc == 0, err
    eps = [e for e in json.loads(out)["burn_rate_episodes"] if e["rule"] == "fast-burn"]
    assert len(eps) == 1 and eps[0]["phase"] == phase and eps[0]["runbook"] == f"docs/runbooks/{phase}.md"
    began = datetime.fromisoformat(eps[0]["started"]).timestamp() - start
    assert 175 * 60 < began <= 185 * 60, began


def test_slo_cli_errors_exit_2_and_name_the_flag(tmp_path, monkeypatch):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "none"))
    monkeypatch.delenv("PHASEMETER_SLOS", raising=False)
    for argv, words in [((), ["--slos", "no SLO is declared"]),
                        (("--slos", "example", "--objective", "ttft=1"), ["--objective.ttft", "unknown metric"]),
                        (("--slos", "example", "--objective", "ttft_s"), ["--objective", "METRIC=LIMIT"]),
                        (("--slos", "example", "--slo", "nope"), ["--slo 'nope'", "interactive"]),
                        (("--slos", "example", "--step", "7x"), ["--step"]),
                        (("--slos", str(tmp_path / "x.toml")), ["--slos", "cannot read"])]:
        rc, out, err = _cli("slo", *argv)
        assert rc == 2 and all(w in err for w in words), (argv, err)
    assert not (tmp_path / "none").exists()  # nothing created
