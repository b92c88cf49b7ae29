"""Alerts against a real chDB store holding generated history (no Kafka).

One store per module, at a tmp path. Each scenario is its own model, so a
single evaluation shows every state at once and cross-firing is visible:
the expected state of every rule × model × bucket is written out in full.
"""

from __future__ import annotations

import base64
import json
import random
import socket
import threading
import uuid
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pandas as pd
import pytest

from stores import in_database

from phasemeter.alerts import check, demo_check, load_rules
from phasemeter.alerts.rules import TRANSFER_ALERT
from phasemeter.alerts.transfer import TTFT_RISE
from phasemeter.cli.main import main
from phasemeter.store.migrate import migrate
from phasemeter.query.runner import DirectRunner
from phasemeter.settings import Settings
from phasemeter.store.client import connect
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import ROW_COLUMNS, process
from phasemeter.demo.synthetic import SyntheticGateway

pytestmark = pytest.mark.integration

BUCKETS = ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"]
TOKENS = {"0-512": 300, "512-2k": 1000, "2k-8k": 4000, "8k-32k": 16000, "32k+": 50000}
LONG = ("8k-32k", "32k+")
PREFILL_BUCKETS = ("2k-8k", "8k-32k", "32k+")
BASE_N, CUR_N = 300, 80
# Data sits 3 min inside the window edges, so a query a few minutes after the
# fixture (the Grafana SQL uses now()) still sees exactly the same rows.
# `anchor()` sets them when the store is built: the module's import can be
# many minutes earlier (the suite runs the slow files first), past that margin.
AT: datetime
CUR: tuple[datetime, datetime]
BASE: tuple[datetime, datetime]


def anchor() -> None:
    global AT, CUR, BASE
    AT = datetime.now(timezone.utc).replace(microsecond=0)
    CUR = (AT - timedelta(minutes=12), AT - timedelta(seconds=1))
    BASE = (AT - timedelta(hours=24, minutes=12), AT - timedelta(minutes=18))


anchor()

# model -> (engine prefill slowdown in long buckets, decode slowdown, queue multiplier in long buckets)
SCENARIOS = {
    "steady": (1.0, 1.0, 1.0),
    # The queue eats TTFT (0.02 s -> ~10 s against ~2-6 s of compute): engine prefill holds.
    "prefill-queue": (1.0, 1.0, 500.0),
    # The queue grows 4x but stays a few % of TTFT while compute slows: not the queue.
    "prefill-small-queue": (2.5, 1.0, 4.0),
    "prefill-flat": (2.5, 1.0, 1.0),
    "decode-reg": (1.0, 2.5, 1.0),
    "both-reg": (2.5, 2.5, 1.0),
}


def prefill_fires(model: str) -> bool:
    slow, _, queue = SCENARIOS[model]
    return slow > 1 or queue > 100


class Rows:
    def __init__(self):
        self.rows, self.rng = [], random.Random(11)
        self.bucket = Bucketer(parse_edges("default"))

    def add(self, model, bucket, n, lo, hi, prefill_slow=1.0, decode_slow=1.0, queue_mult=1.0):
        rng, n_in = self.rng, TOKENS[bucket]
        span = (hi - lo).total_seconds()
        for i in range(n):
            t0 = lo.timestamp() + span * (i + rng.random()) / n
            queue = 0.02 * rng.lognormvariate(0, 0.3) * queue_mult
            ttft = queue + n_in / (9000 * rng.lognormvariate(0, 0.2) / prefill_slow)
            n_out = 200
            e2e = ttft + (n_out - 1) / (60 * rng.lognormvariate(0, 0.15) / decode_slow)
            event = dict(schema_version=1, kind="generation", request_id=uuid.uuid4().hex, model=model, t0=t0,
                         e2e_s=e2e, input_tokens=n_in, output_tokens=n_out, ttft_s=ttft, queue_s=queue)
            self.append(process(json.dumps(event).encode(), self.bucket, 1_000_000))

    def append(self, row):
        assert isinstance(row, dict), row
        row.update(src_topic="alerts-test", src_partition=0, src_offset=len(self.rows))
        self.rows.append(row)


def insert(client, rows: list[dict]) -> None:
    """The sink's insert (ROW_COLUMNS, ts as exact ms) without its retry loop:
    a failing insert here should fail the test, not wait for the store."""
    df = pd.DataFrame.from_records(rows, columns=list(ROW_COLUMNS))
    df["ts"] = pd.to_datetime((df["ts"] * 1000).round().astype("int64"), unit="ms", utc=True)
    client.insert_df("generations", df)


def build_history() -> list[dict]:
    data = Rows()
    for model, (pf, dc, qm) in SCENARIOS.items():
        for b in BUCKETS:
            long = b in LONG
            data.add(model, b, BASE_N, *BASE)
            data.add(model, b, CUR_N, *CUR, prefill_slow=pf if long else 1.0, decode_slow=dc,
                     queue_mult=qm if long else 1.0)
    for b in BUCKETS:
        # Enough baseline samples but a too-small current window, with a big drop.
        data.add("sparse", b, BASE_N, *BASE)
        data.add("sparse", b, 30, *CUR, prefill_slow=5.0, decode_slow=5.0)
        data.add("new-model", b, CUR_N, *CUR)                  # no baseline at all
        data.add("gone-model", b, BASE_N, *BASE)               # stopped serving
        # A baseline with a 20 h hole: only the first and the last two hours have data.
        data.add("gappy", b, BASE_N // 2, BASE[0], BASE[0] + timedelta(hours=1))
        data.add("gappy", b, BASE_N // 2, BASE[1] - timedelta(hours=2), BASE[1])
        data.add("gappy", b, CUR_N, *CUR)
    return data.rows


def expected_states() -> dict:
    out = {}
    for model, (pf, dc, _) in SCENARIOS.items():
        for b in PREFILL_BUCKETS:
            out[("prefill-slow-tail", model, b)] = "firing" if prefill_fires(model) and b in LONG else "ok"
        for b in BUCKETS:
            out[("decode-slow-tail", model, b)] = "firing" if dc > 1 else "ok"
    for model, state in (("sparse", "insufficient data"), ("new-model", "insufficient data"),
                         ("gone-model", "insufficient data"), ("gappy", "ok")):
        for b in PREFILL_BUCKETS:
            out[("prefill-slow-tail", model, b)] = state
        for b in BUCKETS:
            out[("decode-slow-tail", model, b)] = state
    return out


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    anchor()
    root = tmp_path_factory.mktemp("alerts")
    db = f"alerts_{uuid.uuid4().hex[:8]}"
    settings = Settings.from_env({}, clickhouse_url=f"chdb://{root / 'store'}", database=db,
                                 data_dir=str(root / "data"))
    client = connect(settings)
    migrate(client)
    insert(client, build_history())
    yield settings, DirectRunner(client)
    client.close()


def cli(settings, *args) -> int:
    return main(["alerts", *args, "--clickhouse-url", settings.store_dsn, "--database", settings.database,
                 "--data-dir", settings.data_dir])


def run_json(settings, capsys, *args) -> tuple[int, dict]:
    code = cli(settings, "check", "--at", AT.isoformat(), "--format", "json", *args)
    out = capsys.readouterr().out
    return code, json.loads(out)


def test_every_state_exactly_and_no_cross_firing(store):
    settings, runner = store
    results = check(runner, load_rules(), AT, bucket_labels=BUCKETS)
    assert {(r.rule.name, r.model, r.bucket): r.state for r in results} == expected_states()
    firing = {(r.model, r.rule.phase): r.evidence for r in results if r.state == "firing"}
    assert firing[("prefill-queue", "prefill")].startswith("engine prefill steady")
    assert firing[("prefill-queue", "prefill")].endswith("of TTFT → queue/scheduler saturation")
    assert firing[("prefill-small-queue", "prefill")].startswith("engine prefill (queue excluded) -")
    assert firing[("prefill-small-queue", "prefill")].endswith("→ compute contention")
    assert firing[("prefill-flat", "prefill")].endswith("→ compute contention")
    assert firing[("decode-reg", "decode")].startswith("decode slowed, prefill steady")
    assert firing[("both-reg", "prefill")].endswith("node fault / model swap / bad deploy")
    assert firing[("both-reg", "decode")].endswith("node fault / model swap / bad deploy")


def test_same_hour_baseline_with_mostly_empty_days(store):
    settings, runner = store
    from phasemeter.alerts import override

    rs = override(load_rules(), baseline={"kind": "same_hour", "days": 7, "duration": "1h"})
    results = check(runner, rs, AT, models=["steady", "prefill-queue"])
    # Only yesterday's hour has data (~12 samples/bucket): never firing, never an error.
    assert {r.state for r in results} == {"insufficient data"}


def test_cli_exit_codes_and_json(store, capsys):
    settings, _ = store
    code, doc = run_json(settings, capsys)
    assert code == 1 and doc["firing"] == sum(s == "firing" for s in expected_states().values())
    assert cli(settings, "check", "--at", AT.isoformat(), "--model", "steady") == 0
    out = capsys.readouterr().out
    assert "firing" not in out.split("\n", 1)[1].lower() or "0 firing" in out
    code = cli(settings, "check", "--at", AT.isoformat(), "--model", "prefill-queue")
    out = capsys.readouterr().out
    assert code == 1
    assert "FIRING PhasemeterPrefillSlowTail [prefill] prefill-queue 32k+" in out
    assert "runbook: docs/runbooks/prefill.md" in out and "queue/scheduler saturation" in out
    assert cli(settings, "check", "--at", "yesterday-ish") == 2
    assert "--at" in capsys.readouterr().err


def test_sql_injection_through_model_is_just_a_name(store, capsys):
    settings, _ = store
    code, doc = run_json(settings, capsys, "--model", "x' OR 1=1 --")
    assert (code, doc["results"], doc["firing"]) == (0, [], 0)


def test_backtest_lists_rising_edges(store, capsys):
    settings, _ = store
    code = cli(settings, "backtest", "--from", (AT - timedelta(hours=2)).isoformat(), "--to", AT.isoformat(),
               "--every", "15m", "--format", "json", "--model", "prefill-queue", "--model", "steady")
    doc = json.loads(capsys.readouterr().out)
    assert code == 0 and doc["points"] == 9
    assert sorted((e["rule"], e["model"], e["input_bucket"], e["started"], e["ended"]) for e in doc["episodes"]) == sorted(
        ("prefill-slow-tail", "prefill-queue", b, AT.isoformat(), None) for b in LONG)
    code = cli(settings, "backtest", "--from", (AT - timedelta(hours=2)).isoformat(), "--to", AT.isoformat(),
               "--every", "1s")
    assert code == 2 and "--every" in capsys.readouterr().err


class Hook(BaseHTTPRequestHandler):
    received: list = []
    status = 200

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((self.path, dict(self.headers), json.loads(body)))
        self.send_response(type(self).status)
        self.end_headers()

    def log_message(self, *args):
        pass


@pytest.fixture
def hook():
    Hook.received, Hook.status = [], 200
    server = HTTPServer(("127.0.0.1", 0), Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def check_alertmanager_shape(msg: dict) -> None:
    """The keys and types Alertmanager's webhook receiver documents (version 4)."""
    types = {"version": str, "groupKey": str, "truncatedAlerts": int, "status": str, "receiver": str,
             "groupLabels": dict, "commonLabels": dict, "commonAnnotations": dict, "externalURL": str,
             "alerts": list}
    assert set(msg) == set(types) and all(isinstance(msg[k], t) for k, t in types.items())
    assert msg["version"] == "4" and msg["status"] in ("firing", "resolved") and msg["alerts"]
    for alert in msg["alerts"]:
        assert set(alert) == {"status", "labels", "annotations", "startsAt", "endsAt", "generatorURL",
                              "fingerprint"}
        assert alert["status"] == "firing"
        assert all(isinstance(v, str) for d in (alert["labels"], alert["annotations"]) for v in d.values())
        assert {"alertname", "phase", "model", "input_bucket", "severity"} <= set(alert["labels"])
        assert {"summary", "description", "runbook_url"} <= set(alert["annotations"])
        datetime.fromisoformat(alert["startsAt"].replace("Z", "+00:00"))
        assert alert["endsAt"] == "0001-01-01T00:00:00Z"
        assert set(msg["commonLabels"].items()) <= set(alert["labels"].items())
    assert msg["groupLabels"] == {"alertname": msg["alerts"][0]["labels"]["alertname"]}


def test_webhook_posts_alertmanager_payload(store, hook, capsys):
    settings, _ = store
    url = f"http://ops:s3cret@127.0.0.1:{hook}/hook?k=1"
    code = cli(settings, "check", "--at", AT.isoformat(), "--model", "both-reg", "--webhook", url)
    assert code == 1, capsys.readouterr().err
    assert "s3cret" not in capsys.readouterr().err
    assert len(Hook.received) == 2  # one message per alertname: prefill and decode page separately
    by_name = {}
    for path, headers, msg in Hook.received:
        assert path == "/hook?k=1"
        assert headers["Authorization"] == "Basic " + base64.b64encode(b"ops:s3cret").decode()
        check_alertmanager_shape(msg)
        by_name[msg["groupLabels"]["alertname"]] = msg
    prefill, decode = by_name["PhasemeterPrefillSlowTail"], by_name["PhasemeterDecodeSlowTail"]
    assert sorted(a["labels"]["input_bucket"] for a in prefill["alerts"]) == sorted(LONG)
    assert sorted(a["labels"]["input_bucket"] for a in decode["alerts"]) == sorted(BUCKETS)
    assert prefill["commonLabels"]["phase"] == "prefill" and decode["commonLabels"]["phase"] == "decode"
    assert prefill["commonAnnotations"]["runbook_url"] == "docs/runbooks/prefill.md"
    assert decode["commonAnnotations"]["runbook_url"] == "docs/runbooks/decode.md"


def test_webhook_error_or_down_exits_2_without_credentials(store, hook, capsys):
    settings, _ = store
    Hook.status = 500
    code = cli(settings, "check", "--at", AT.isoformat(), "--model", "decode-reg",
               "--webhook", f"http://ops:s3cret@127.0.0.1:{hook}/hook")
    err = capsys.readouterr().err
    assert code == 2 and f"http://127.0.0.1:{hook}/hook answered HTTP 500" in err and "s3cret" not in err
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    code = cli(settings, "check", "--at", AT.isoformat(), "--model", "decode-reg",
               "--webhook", f"http://ops:s3cret@127.0.0.1:{port}/hook")
    err = capsys.readouterr().err
    assert code == 2 and f"webhook http://127.0.0.1:{port}/hook unreachable" in err
    assert "s3cret" not in err and "Traceback" not in err


def test_grafana_provisioning_parses_and_its_sql_runs(store):
    settings, runner = store
    path = Path(__file__).parents[2] / "dashboards/grafana/alerting/phasemeter-alerts.yaml"
    text = path.read_text()
    doc = json.loads("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    try:
        import yaml
        assert yaml.safe_load(text) == doc
    except ImportError:
        pass
    assert doc["apiVersion"] == 1
    rules = {r["title"]: r for g in doc["groups"] for r in g["rules"]}
    assert set(rules) == {"PhasemeterPrefillSlowTail", "PhasemeterDecodeSlowTail", "PhasemeterKvTransferSlow"}
    rules = {t: r for t, r in rules.items() if t != TRANSFER_ALERT}  # its own tests below: it needs P/D data
    # The same data in a database named like the YAML expects, migrated like any
    # store (the rules read its alert_window_view), inside this test's own store.
    client = runner.client
    with in_database(client, "phasemeter"):
        migrate(client)
    # Grafana's windows end at now(): the copy is moved forward by the time
    # since AT (the store's build, minutes earlier on a busy machine), so the
    # YAML's SQL at now() sees what phasemeter's own check sees at AT, however
    # late this test runs (the data sits 3 min inside the window edges).
    shift_ms = int((datetime.now(timezone.utc) - AT).total_seconds() * 1000)
    client.command("INSERT INTO phasemeter.generations SELECT * REPLACE (ts + toIntervalMillisecond({shift:Int64}) "
                   "AS ts) FROM {db:Identifier}.generations", parameters={"shift": shift_ms, "db": settings.database})
    ours = {(r.rule.alertname, r.model, r.bucket): r for r in check(runner, load_rules(), AT)}
    for title, rule in rules.items():
        a, b, c = rule["data"]
        assert rule["condition"] == "C"
        assert a["datasourceUid"] == "phasemeter-clickhouse"
        assert a["model"]["datasource"] == {"type": "grafana-clickhouse-datasource", "uid": "phasemeter-clickhouse"}
        assert (b["model"]["type"], b["model"]["expression"]) == ("reduce", "A")
        assert (c["model"]["type"], c["model"]["expression"]) == ("threshold", "B")
        assert c["model"]["conditions"][0]["evaluator"] == {"type": "lt", "params": [0.7]}
        assert "alert_window_view(" in a["model"]["rawSql"]  # the CLI's own query, not a copy
        got = client.query_df(a["model"]["rawSql"])
        ratios = {(m, bk): v for m, bk, v in
                  zip(got["model"], got["input_bucket"], got["slow_tail_ratio"], strict=True)}
        # Same rows as phasemeter's own evaluation (ok or firing there; min samples filter the rest).
        expect = {(m, bk): 1 + r.change for (name, m, bk), r in ours.items()
                  if name == title and r.state != "insufficient data"}
        assert {m for m, _ in expect} >= set(SCENARIOS)  # every scenario's model evaluated: not an empty match
        assert ratios.keys() == expect.keys()
        for key, ratio in ratios.items():
            assert ratio == pytest.approx(expect[key], rel=1e-9)
            assert (ratio < 0.7) == (ours[(title, *key)].state == "firing")
    client.command("DROP DATABASE phasemeter")


GRAFANA_ALERTS = Path(__file__).parents[2] / "dashboards/grafana/alerting/phasemeter-alerts.yaml"


def grafana_rule(title: str) -> dict:
    doc = json.loads("\n".join(ln for ln in GRAFANA_ALERTS.read_text().splitlines() if not ln.startswith("#")))
    [rule] = [r for g in doc["groups"] for r in g["rules"] if r["title"] == title]
    return rule


def test_grafana_transfer_rule_has_the_cli_rules_values():
    """Every number of the Grafana transfer rule is the CLI's (default_rules.toml
    and alerts/transfer.py), read from its SQL and its condition: change one
    side only and this fails."""
    import re

    [ours] = [r for r in load_rules().rules if r.transfer]
    rule = grafana_rule(ours.alertname)
    a, b, c = rule["data"]
    sql = a["model"]["rawSql"]
    code = "\n".join(ln for ln in sql.splitlines() if not ln.strip().startswith("--"))

    def one(pattern: str) -> str:
        [found] = re.findall(pattern, code)
        return found

    assert "FROM phasemeter.transfer_window_view(" in code  # the CLI's frame (sql/transfer_window.sql reads it)
    assert float(one(r"q = ([\d.]+),")) == ours.percentile / 100
    assert ours.baseline.kind == "previous"
    window_min = one(r"cur_start = now64\(3\) - INTERVAL (\d+) MINUTE, cur_end = now64\(3\)")
    assert int(window_min) * 60 == ours.window_s
    assert re.findall(r"INTERVAL (\d+) MINUTE - INTERVAL (\d+) HOUR", code) == [(window_min, "24")] * 2
    assert int(ours.baseline.duration_s) == 24 * 3600 == int(one(r"base_span_ms = (\d+)")) // 1000
    assert int(one(r"anyIf\(kv_n, part = 'current'\) >= (\d+)")) == ours.min_current
    assert int(one(r"anyIf\(kv_n, part = 'baseline'\) >= (\d+)")) == ours.min_baseline
    assert float(one(r"anyIf\(kv_q, part = 'current'\) >= ([\d.]+)")) == ours.floor
    assert float(one(r"anyIf\(ttft_q, part = 'baseline'\) - 1 >= ([\d.]+)")) == TTFT_RISE
    assert float(one(r"anyIf\(compute_p50, part = 'baseline'\) - 1 > -([\d.]+)")) == ours.threshold
    assert "input_bucket IN" not in code and ours.buckets == ()  # every bucket
    assert rule["condition"] == "C" and (b["model"]["type"], b["model"]["expression"]) == ("reduce", "A")
    assert c["model"]["conditions"][0]["evaluator"] == {"type": "gt", "params": [1 + ours.threshold]}
    assert rule["labels"] == {"phase": ours.phase, "severity": ours.severity}
    assert rule["annotations"]["runbook_url"] == ours.runbook


# model -> (transfer multiplier, prefill compute slowdown, baseline transfer s), in the current window.
PD_SCENARIOS = {
    "kv-steady": (1.0, 1.0, 0.04),
    # The transfer 4x: TTFT rises 10 %+ where compute is short (short prompts), not on long ones.
    "kv-slow": (4.0, 1.0, 0.04),
    # The transfer 4x while compute slows 2.5x: the prefill rule's, not this one.
    "kv-and-compute": (4.0, 2.5, 0.04),
    # The transfer 4x, TTFT up, but 5 ms -> 20 ms: under the 50 ms floor.
    "kv-small": (4.0, 1.0, 0.005),
}


def pd_history() -> list[dict]:
    rng, bucket, rows = random.Random(12), Bucketer(parse_edges("default")), []

    def event(model, b, t0, kv_mult, slow, kv_base):
        queue = 0.02 * rng.lognormvariate(0, 0.3)
        kv = kv_base * rng.lognormvariate(0, 0.2) * kv_mult
        ttft = queue + TOKENS[b] / (9000 * rng.lognormvariate(0, 0.2) / slow) + kv
        return dict(schema_version=2, kind="generation", request_id=uuid.uuid4().hex, model=model, t0=t0,
                    input_tokens=TOKENS[b], output_tokens=200, ttft_s=ttft, queue_s=queue,
                    e2e_s=ttft + 199 / (60 * rng.lognormvariate(0, 0.15)), prefill_replica="prefill-0",
                    decode_replica="decode-0", kv_transfer_s=round(kv, 6))

    def add(model, b, n, lo, hi, kv_mult=1.0, slow=1.0, kv_base=0.04):
        span = (hi - lo).total_seconds()
        made = [process(json.dumps(event(model, b, lo.timestamp() + span * (i + rng.random()) / n, kv_mult, slow,
                                         kv_base)).encode(), bucket, 1_000_000) for i in range(n)]
        assert len(made) == n
        for row in made:
            assert isinstance(row, dict), row
            row.update(src_topic="alerts-pd", src_partition=0, src_offset=len(rows))
            rows.append(row)

    for model, (kv_mult, slow, kv_base) in PD_SCENARIOS.items():
        for b in BUCKETS:
            add(model, b, BASE_N, *BASE, kv_base=kv_base)
            add(model, b, CUR_N, *CUR, kv_mult=kv_mult, slow=slow, kv_base=kv_base)
    for b in BUCKETS:  # enough baseline, too few current transfers
        add("kv-sparse", b, BASE_N, *BASE)
        add("kv-sparse", b, 30, *CUR, kv_mult=4.0)
    return rows


def test_grafana_transfer_rule_fires_where_the_cli_does(store):
    """The Grafana transfer rule's SQL at now() over P/D history gives, per
    model × bucket, the CLI's transfer ratio where it can fire, and fires (C)
    exactly where `phasemeter alerts check` fires; each of the CLI's other
    conditions (TTFT risen, compute steady, the floor, min samples) keeps a
    cell quiet in both."""
    settings, runner = store
    db = f"pd_{uuid.uuid4().hex[:8]}"
    pd_client = connect(settings.replace(database=db))
    client = runner.client
    try:
        migrate(pd_client)
        insert(pd_client, pd_history())
        ours = {(r.model, r.bucket): r for r in check(DirectRunner(pd_client), load_rules(), AT) if r.rule.transfer}
        firing = {k for k, r in ours.items() if r.state == "firing"}
        states = {m: {r.state for (model, _), r in ours.items() if model == m} for m in [*PD_SCENARIOS, "kv-sparse"]}
        assert states == {"kv-steady": {"ok"}, "kv-slow": {"firing", "ok"}, "kv-and-compute": {"ok"},
                          "kv-small": {"ok"}, "kv-sparse": {"insufficient data"}}, states
        assert {r.model for r in ours.values() if r.state == "ok" and r.change > 0.5} >= {
            "kv-slow", "kv-and-compute", "kv-small"}  # the transfer rose 1.5x+ where other conditions held it
        with in_database(client, "phasemeter"):
            migrate(client)
        shift_ms = int((datetime.now(timezone.utc) - AT).total_seconds() * 1000)
        client.command("INSERT INTO phasemeter.generations SELECT * REPLACE (ts + toIntervalMillisecond("
                       "{shift:Int64}) AS ts) FROM {db:Identifier}.generations",
                       parameters={"shift": shift_ms, "db": db})
        got = client.query_df(grafana_rule(TRANSFER_ALERT)["data"][0]["model"]["rawSql"])
        ratios = {(m, b): v for m, b, v in zip(got["model"], got["input_bucket"], got["transfer_ratio"], strict=True)}
        assert ratios.keys() >= firing and len(firing) >= 2  # kv-slow's short-prompt buckets at least
        assert len(ratios) >= 2
        for key, ratio in ratios.items():
            assert ratio == pytest.approx(1 + ours[key].change, rel=1e-9), key
        assert {k for k, v in ratios.items() if v > 1.5} == firing
    finally:
        pd_client.command("DROP DATABASE IF EXISTS {db:Identifier}", parameters={"db": db})
        pd_client.close()
        client.command("DROP DATABASE IF EXISTS phasemeter")


def test_demo_check_on_demo_shaped_data(store):
    settings, runner = store
    db = f"demo_{uuid.uuid4().hex[:8]}"
    client = connect(settings.replace(database=db))
    try:
        migrate(client)
        start = AT.timestamp() - 3660
        gen = SyntheticGateway(start=start, span_s=3600, regress_at=0.65, slowdown=2.5)
        data, total = Rows(), 30_000
        for i in range(total):
            g = gen.make(i / total)
            event = dict(schema_version=1, kind="generation", request_id=f"d{i}", model=g.model, t0=g.t0,
                         e2e_s=g.e2e_s, input_tokens=g.input_tokens, output_tokens=g.output_tokens,
                         ttft_s=g.ttft_s, queue_s=g.queue_s, status=g.status)
            data.append(process(json.dumps(event).encode(), data.bucket, 1_000_000))
        insert(client, data.rows)
        for at in (None, datetime.fromtimestamp(start + 0.9 * 3600, timezone.utc)):
            text = demo_check(DirectRunner(client), settings, at=at)
            states = {tuple(line.split()[:3]): line.split()[-1] for line in text.splitlines()
                      if line.startswith(("prefill-slow-tail", "decode-slow-tail"))}
            models = ("llama-4-maverick", "qwen3-32b")
            expect = {("prefill-slow-tail", m, b): ("FIRING" if b in LONG else "ok")
                      for m in models for b in PREFILL_BUCKETS}
            expect |= {("decode-slow-tail", m, b): "ok" for m in models for b in BUCKETS}
            assert states == expect, text
            # The demo's regression is compute: its queue stays ~1 % of TTFT
            # while engine prefill falls, so the queue is not blamed.
            assert "4 firing" in text and "→ compute contention" in text and "queue/scheduler" not in text
            assert "engine prefill (queue excluded) -" in text and "of TTFT" in text
    finally:
        client.close()
