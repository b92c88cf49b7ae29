"""SLO attainment where people look: `/api/slo` on a running worker with
declared SLOs, the page's attainment row in headless Chromium, and the same
row in `chart --out x.html`.

One worker for the module (PHASEMETER_SLOS = a file with two SLOs: `chat`
over every model, `ghost` over a model that serves nothing, i.e. declared
but without rows). A subprocess writes the store first, with the SLOs
registered a day before the rows (as a worker running with them would have),
so the per-minute counts cover the window and both paths can answer. The
endpoint must equal `phasemeter slo --format json`, which with the worker up
goes through its HTTP API like a user's CLI.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import WorkerProc, worker_env, write_store_in_subprocess
from test_live_page import cli_json, get

pytestmark = [pytest.mark.integration]

NOW = time.time()
T0 = (NOW - 50 * 60) // 60 * 60  # rows in [T0, T0 + 45 min): inside the page's default last hour
SPAN_S = 45 * 60
N = 2000
SLOS = """
[[slo]]
name = "chat"
objectives = { ttft_s = 2.0, decode_tps = 50.0 }
target = 0.95

[[slo]]
name = "ghost"
models = ["not-served"]
objectives = { e2e_s = 5.0 }
target = 0.9
"""


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_store(t0: float) -> None:
    """In a subprocess (chDB opens a path in one process only)."""
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.settings import Settings
    from phasemeter.store import slo_defs
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    slo_defs.register(client, load_slos(settings.slos), at=datetime.fromtimestamp(t0 - 86_400, timezone.utc))
    Sink.over(client, settings.store_dsn).write(synthetic_rows(N, t0, SPAN_S, seed=3), [])
    client.close()


@pytest.fixture(scope="module")
def live(kafka_bootstrap, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("live_slo")
    (tmp / "slos.toml").write_text(SLOS)
    env = worker_env(kafka_bootstrap, tmp / "data",
                     pythonpath=(Path(__file__).parent, Path(__file__).parents[1]),
                     PHASEMETER_SLOS=str(tmp / "slos.toml"))
    write_store_in_subprocess(env, "test_live_slo", T0)
    w = WorkerProc(env, tmp, int(env["PHASEMETER_WEB_PORT"])).start()
    yield w, env
    w.stop()


WINDOW = {"from": _iso(T0), "to": _iso(T0 + SPAN_S)}


def cli_slo(env, monkeypatch, step: str, *flags: str, window=WINDOW) -> list[dict]:
    return cli_json(env, monkeypatch, "slo", "--from", window["from"], "--to", window["to"], "--step", step,
                    *flags, "--format", "json")["slos"]


@pytest.mark.parametrize("step,path", [("5m", "exact"), ("5m", "rollup"), ("1m", "auto"), ("window", "auto")])
def test_api_slo_equals_phasemeter_slo(live, monkeypatch, step, path):
    w, env = live
    flags = {"exact": ["--exact"], "rollup": ["--rollup"], "auto": []}[path]
    status, doc, _ = get(w, "/api/slo", **WINDOW, step=step, path=path)
    assert status == 200, doc
    assert doc["slos"] == cli_slo(env, monkeypatch, step, *flags)
    assert doc["window"] == cli_slo(env, monkeypatch, "window", *flags)  # the row's headline
    assert doc["declared"] == ["chat", "ghost"] and doc["bucket_order"][0] == "0-512" and "note" not in doc
    chat, ghost = doc["slos"]
    assert chat["meta"]["path"] == ("exact" if path == "auto" else path)  # a 45 min window: exact unless forced
    assert len(chat["rows"]) >= (10 if step == "window" else 80)
    assert sum(r["n"] for r in chat["rows"]) == N  # every generation of the window is judged once
    assert 0.5 < sum(r["met_n"] for r in chat["rows"]) / N < 0.95  # neither all met nor all missed
    assert ghost["rows"] == [] and ghost["meta"]["slo"] == "ghost"  # declared, in scope of nothing


def test_api_slo_by_model_and_filters_equal_the_cli(live, monkeypatch):
    w, env = live
    status, doc, _ = get(w, "/api/slo", **WINDOW, step="15m", by="model", model="qwen3-32b", slo="chat")
    assert status == 200, doc
    assert doc["slos"] == cli_slo(env, monkeypatch, "15m", "--by", "model", "--model", "qwen3-32b", "--slo", "chat")
    assert {(r["model"], r["input_bucket"]) for r in doc["slos"][0]["rows"]} == {("qwen3-32b", "all")}
    assert doc["declared"] == ["chat"]


def test_api_slo_of_a_window_without_rows(live, monkeypatch):
    """SLOs declared, nothing generated in the window: empty rows, not an error."""
    w, env = live
    before = {"from": _iso(T0 - 3 * 3600), "to": _iso(T0 - 2 * 3600)}
    status, doc, _ = get(w, "/api/slo", **before, step="5m")
    assert status == 200, doc
    assert [s["rows"] for s in doc["slos"]] == [[], []] and [s["rows"] for s in doc["window"]] == [[], []]
    assert doc["slos"] == cli_slo(env, monkeypatch, "5m", window=before)


@pytest.mark.parametrize("query,param,words", [
    ({"from": "yesterday"}, "from", "expected 'now', a relative time"),
    ({"to": "-2h"}, "to", "must be after"),
    ({"step": "7x"}, "step", "expected a duration"),
    ({"bucket": "9-10"}, "bucket", "the buckets are 0-512"),
    ({"path": "fast"}, "path", "expected auto, exact or rollup"),
    ({"step": "15s", "path": "rollup"}, "path", "whole minutes"),
    ({"slo": "nope"}, "slo", "the declared SLOs are chat, ghost"),
    ({"by": "bucket"}, "by", "expected cell"),
    ({"modle": "x"}, "modle", "unknown parameter"),
])
def test_api_slo_errors_are_400_naming_the_parameter(live, query, param, words):
    status, doc, _ = get(live[0], "/api/slo", **query)
    assert status == 400 and doc["param"] == param and words in doc["error"], doc


def _pct(v) -> str:
    return "–" if v is None else f"{v * 100:.1f}%"


def _burns(r) -> str:
    if r["burning"] == "none":
        return "nothing missed"
    if r["burning"] == "errors":
        return "burns: failed generations"
    return f"most missed {r['burning_objective']} · burns {r['burning']}"


# Per attainment panel: its title and the whole window's two corner lines.
SLO_SHOWN = """(() => ({
  heads: [...document.querySelectorAll('#slo .sgrid .sh')].map(t => t.textContent),
  rows: [...document.querySelectorAll('#slo .sgrid tr th:first-child:not(.sh)')].slice(1).map(t => t.innerText),
  panels: [...document.querySelectorAll('#slo svg.slo')].map(s => [...s.querySelectorAll('text')].map(t => t.textContent)),
  targets: document.querySelectorAll('#slo svg.slo line.tgt').length,
  misses: document.querySelectorAll('#slo svg.slo rect.miss').length,
  bands: document.querySelectorAll('svg.panel').length}))()"""


def expected_panels(doc: dict) -> dict[str, list[str]]:
    """title -> [whole-window attained line, its burns line], from /api/slo's own rows."""
    out = {}
    for s in doc["window"]:
        for r in s["rows"]:
            out[f"{r['model']} · {s['meta']['slo']} · {r['input_bucket']}"] = [
                f"{_pct(r['attainment'])} attained · target {_pct(s['meta']['target'])}", _burns(r)]
    return out


def shown_panels(got: dict) -> dict[str, list[str]]:
    # text order in a panel: title, n, unit, ticks (2 or 3), the two corner lines, the day labels
    return {texts[0]: texts[-4:-2] for texts in got["panels"]}


def test_page_shows_the_attainment_row(live, tmp_path):
    """The row per SLO × model, a panel per bucket with the target line and
    the steps under it, the whole window's attainment and most-missed
    objective as /api/slo says; "ghost" says it has no generations."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip()
    import io

    from matplotlib import image

    w, _ = live
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        # A fixed window (the rows'), so the page's question can be asked again here.
        chrome.open(w.url + "/?" + urllib.parse.urlencode({"win": "custom", **WINDOW}))
        chrome.wait("document.querySelectorAll('#slo svg.slo').length > 0", 60)
        got = chrome.eval(SLO_SHOWN)
        # The page's own question: whole-minute steps, at least the bands' step.
        _, bands, _ = get(w, "/api/bands", **WINDOW)
        step = max(60, -(-bands["step_s"] // 60) * 60)
        _, doc, _ = get(w, "/api/slo", **WINDOW, step=f"{step}s")
        assert got["bands"] == 20  # the bands grid is still all there
        assert got["heads"][0] == f"SLO chat: ttft_s ≤ 2 and decode_tps ≥ 50 for 95.00% · exact path, step {step}s"
        assert "ghost" in got["heads"][1] and "(no generations in scope in this window)" in got["heads"][1]
        assert [r.replace("\n", " ") for r in got["rows"]] == ["llama-4-maverick chat", "qwen3-32b chat"]
        want = expected_panels(doc)
        assert len(want) == 10 and shown_panels(got) == want
        assert any("burns prefill" in v[1] for v in want.values()) and any("burns decode" in v[1] for v in want.values())
        assert got["targets"] == 10
        under = sum(r["attainment"] < r["target"] for r in doc["slos"][0]["rows"])
        assert got["misses"] == under > 0  # one red step per step under the target
        tip = chrome.eval("""(() => { const s = document.querySelector('#slo svg.slo'), r = s.getBoundingClientRect();
            s.dispatchEvent(new MouseEvent('mousemove', {clientX: r.right - 12, clientY: r.top + 60, bubbles: true}));
            return document.getElementById('tip').textContent; })()""")
        last = [r for r in doc["slos"][0]["rows"] if r["model"] == "llama-4-maverick" and r["input_bucket"] == "0-512"][-1]
        assert f"attained {_pct(last['attainment'])} of n={last['n']} (target 95.0%)" in tip, tip
        box = chrome.eval("(() => { const r = document.querySelector('#slo .sgrid').getBoundingClientRect();"
                          " return [r.left, r.top, r.width, r.height]; })()")
        png = chrome.screenshot({"x": box[0], "y": box[1], "width": box[2], "height": box[3]})
        px = (image.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(int)
        reds = ((px[..., 0] > 200) & (px[..., 1] < 215) & (px[..., 1] > 150) & (px[..., 2] < 215)).sum()
        assert px.std() > 20 and reds > 500, "no shaded steps under the target in the screenshot"
        (tmp_path / "slo.png").write_bytes(png)  # kept in pytest's tmp dir for a person to look at
        assert chrome.errors() == []
    finally:
        chrome.close()


def test_chart_html_draws_the_same_row(live, tmp_path, monkeypatch):
    """`chart --out x.html` with the same document draws the same panels with
    the same bands.js (renderer given /api/slo's payload for the same window)."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip("to check the HTML chart in a real browser")
    import pandas as pd

    from phasemeter.render.html import render_bands_html

    w, env = live
    _, bands, _ = get(w, "/api/bands", **WINDOW, step="5m")
    _, doc, _ = get(w, "/api/slo", **WINDOW, step="5m")
    out = render_bands_html(pd.DataFrame(bands["rows"]), tmp_path / "c.html", bucket_order=bands["bucket_order"],
                            slo=doc)
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        chrome.open(out.as_uri())
        chrome.wait("document.readyState === 'complete' && document.querySelectorAll('#slo svg.slo').length > 0")
        got = chrome.eval(SLO_SHOWN)
        assert got["bands"] == 20 and shown_panels(got) == expected_panels(doc)
        assert got["heads"][0].endswith("· exact path, step 300s")
        assert chrome.errors() == []
    finally:
        chrome.close()


def test_chart_slo_is_the_pages_document(live, monkeypatch):
    """What `chart --out x.html` would embed (phasemeter.analytics.live.chart_slo,
    through the worker like the CLI): /api/slo's document for the chart's
    window at the page's step; nothing without a declared SLO or when re-bucketed."""
    import argparse
    import dataclasses

    from phasemeter.analytics.live import chart_slo, slo_step
    from phasemeter.settings import Settings

    w, env = live
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    _, bands, _ = get(w, "/api/bands", **WINDOW)  # the bands' meta: window, step
    args = argparse.Namespace(model=["qwen3-32b"], bucket=[], via=None)
    settings = Settings.from_env()
    doc = chart_slo(args, settings, bands)
    _, want, _ = get(w, "/api/slo", **WINDOW, step=f"{slo_step(bands['step_s'])}s", model="qwen3-32b")
    assert doc == want and doc["slos"][0]["rows"] and slo_step(bands["step_s"]) % 60 == 0
    assert chart_slo(args, dataclasses.replace(settings, slos=""), bands) is None
    assert chart_slo(args, settings, {**bands, "rebucketed": True}) is None


@pytest.mark.slow
def test_attainment_row_refreshes_while_live(live, tmp_path):
    """Generations through Kafka -> worker -> store reach the attainment row
    at its next refresh (every 30 s) without a reload. Last: it adds rows.

    The page's clock is moved 31 s on once the worker has the rows, so the
    refresh comes at the page's next 5 s tick, not up to 30 s later: the
    wait was most of this test's time, and the page's own timing code
    (Date.now() against the last refresh) still decides when it refreshes."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip()
    from phasemeter.producers import Meter

    w, env = live
    panel_n = ("[...document.querySelectorAll('#slo svg.slo')].filter(s => s.querySelector('.pt').textContent === "
               "'qwen3-32b · chat · 0-512').map(s => Number(s.querySelector('.pn').textContent.slice(2)"
               ".replace(/,/g, '')))[0]")
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        chrome.open(w.url + "/?win=6h&model=qwen3-32b")  # 6 h: the module's rows stay inside while it runs
        before = chrome.wait(panel_n, 60)
        meter = Meter(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"], topic=env["PHASEMETER_TOPIC"], gateway="t")
        now = time.time()
        for i in range(30):  # fast and short: every one meets `chat`
            meter.record(model="qwen3-32b", input_tokens=200, output_tokens=50, t0=now - 3 + i * 0.05,
                         ttft_s=0.05, e2e_s=0.5)
        meter.close(timeout_s=10)
        w.wait_processed(30, timeout_s=60)
        chrome.eval("(() => { const real = Date.now; Date.now = () => real.call(Date) + 31000; return 1; })()")
        after = chrome.wait(f"(() => {{ const n = {panel_n}; return n !== {before} && n; }})()", 90)
        assert after == before + 30
        assert chrome.errors() == []
    finally:
        chrome.close()
