"""The live page (docs/live.md) on a running worker over a store with known data.

One worker for the module: a subprocess writes the store (chDB opens a path
in one process only), then `phasemeter worker` owns it. The data endpoint
must equal `phasemeter query bands --format json` (which, with the worker
up, goes through its HTTP API, as a user's CLI would); errors are 400 with
the parameter named; and a real headless Chromium loads `/`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import time
import urllib.error
import urllib.parse
import urllib.request
from datetime import datetime, timezone
from pathlib import Path

import pytest
from conftest import WorkerProc, worker_env, write_store_in_subprocess

pytestmark = [pytest.mark.integration]

SPAN_S = 45 * 60
# The rows span [T0, T0 + 45 min), inside the page's default last hour. Both
# are set by the `live` fixture when it writes the rows, not at import: under
# xdist this file can start 10 minutes after collection, by when the oldest
# rows had left the page's hour (a fresh-clone run: 12 of 3,828 missing).
T0 = 0.0
WINDOW: dict[str, str] = {}
N = 2000


def _iso(t: float) -> str:
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def write_store(t0: float) -> None:
    """In a subprocess: migrate and write the known rows (t0 from the test
    process: this one may have started in another minute)."""
    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    Sink.over(client, settings.store_dsn).write(synthetic_rows(N, t0, SPAN_S, seed=3), [])
    client.close()


def written() -> list[dict]:
    from phasemeter.demo.rows import synthetic_rows

    return synthetic_rows(N, T0, SPAN_S, seed=3)  # deterministic: the rows write_store(T0) wrote


@pytest.fixture(scope="module")
def live(kafka_bootstrap, tmp_path_factory):
    global T0
    T0 = (time.time() - 50 * 60) // 60 * 60
    WINDOW.update({"from": _iso(T0), "to": _iso(T0 + SPAN_S)})
    tmp = tmp_path_factory.mktemp("live")
    env = worker_env(kafka_bootstrap, tmp / "data",
                     pythonpath=(Path(__file__).parent, Path(__file__).parents[1]))
    t = time.monotonic()
    write_store_in_subprocess(env, "test_live_page", T0)
    t_store = time.monotonic() - t
    w = WorkerProc(env, tmp, int(env["PHASEMETER_WEB_PORT"])).start()
    print(f"store written in {t_store:.1f}s, worker up in {time.monotonic() - t - t_store:.1f}s")
    yield w, env
    w.stop()


def get(w, route: str, **query) -> tuple[int, dict | bytes, str]:
    url = f"{w.url}{route}" + (f"?{urllib.parse.urlencode(query, doseq=True)}" if query else "")
    try:
        with urllib.request.urlopen(url, timeout=60) as resp:
            body, ctype, status = resp.read(), resp.headers.get("Content-Type", ""), resp.status
    except urllib.error.HTTPError as exc:
        body, ctype, status = exc.read(), exc.headers.get("Content-Type", ""), exc.code
    return status, (json.loads(body) if ctype.startswith("application/json") else body), ctype


def cli_json(env: dict, monkeypatch, *argv: str) -> dict:
    from phasemeter.cli.main import main

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(list(argv)) == 0
    return json.loads(out.getvalue())


@pytest.mark.parametrize("step,path", [("5m", "exact"), ("5m", "rollup"), ("auto", "auto")])
def test_api_bands_equals_query_bands(live, monkeypatch, step, path):
    w, env = live
    flags = {"exact": ["--exact"], "rollup": ["--rollup"], "auto": []}[path]
    status, doc, _ = get(w, "/api/bands", **WINDOW, step=step, path=path)
    assert status == 200, doc
    want = cli_json(env, monkeypatch, "query", "bands", "--from", WINDOW["from"], "--to", WINDOW["to"],
                    "--step", step, *flags, "--format", "json")
    assert {k: v for k, v in doc.items() if k not in ("bucket_order", "models_in_window")} == want
    assert len(doc["rows"]) > 20 and sum(r["n"] for r in doc["rows"]) == len(written())
    assert doc["models_in_window"] == sorted({r["model"] for r in doc["rows"]})
    assert doc["bucket_order"][0] == "0-512"


def test_api_bands_of_an_empty_window(live):
    """What a refresh asks when nothing new arrived: the steps since the last one."""
    status, doc, _ = get(live[0], "/api/bands", **{"from": "-1m"}, step="15s", path="exact")
    assert status == 200 and doc["rows"] == [] and doc["models_in_window"] == [], doc


def test_api_bands_filters_and_relative_window(live, monkeypatch):
    w, env = live
    model = "qwen3-32b"
    status, doc, _ = get(w, "/api/bands", model=model, bucket="2k-8k,8k-32k")
    assert status == 200, doc
    assert {(r["model"], r["input_bucket"]) for r in doc["rows"]} == {(model, "2k-8k"), (model, "8k-32k")}
    # The auto step over 1 h by samples (docs/live.md): 2,000 generations spread over every cell are
    # sparse, so the step is the coarsest of 15 s-5 m unless most cells already hold 100 at a finer one.
    assert doc["path"] == "exact" and "most cells hold ≥ 100" in doc["step_rule"]
    assert doc["step_s"] in (15, 30, 60, 120, 300)
    assert doc["step_s"] == 300 or sum(r["n"] >= 100 for r in doc["rows"]) >= len(doc["rows"]) / 2
    want = cli_json(env, monkeypatch, "query", "bands", "--from", WINDOW["from"], "--to", WINDOW["to"],
                    "--model", model, "--bucket", "2k-8k", "--bucket", "8k-32k", "--format", "json")
    _, same, _ = get(w, "/api/bands", **WINDOW, model=[model], bucket=["2k-8k", "8k-32k"])
    assert same["rows"] == want["rows"]


@pytest.mark.parametrize("query,param,words", [
    ({"from": "yesterday"}, "from", "expected 'now', a relative time"),
    ({"to": "-2h"}, "to", "must be after"),
    ({"step": "7x"}, "step", "expected a duration"),
    ({"model": "no-such-model"}, "model", "models with data: "),
    ({"bucket": "9-10"}, "bucket", "the buckets are 0-512"),
    ({"path": "fast"}, "path", "expected auto, exact or rollup"),
    ({"step": "15s", "path": "rollup"}, "path", "whole minutes"),
    ({"abandoned": "maybe"}, "abandoned", "expected one of"),
    ({"modle": "x"}, "modle", "unknown parameter"),
])
def test_api_bands_errors_are_400_naming_the_parameter(live, query, param, words):
    status, doc, _ = get(live[0], "/api/bands", **query)
    assert status == 400 and doc["param"] == param and words in doc["error"], doc
    assert doc["error"].startswith(param) or param == "path", doc  # the URL's name, not a CLI flag


def test_page_and_assets_are_self_contained(live):
    from phasemeter.render.assets import ASSETS, page_weight

    w, _ = live
    status, page, ctype = get(w, "/")
    assert status == 200 and ctype.startswith("text/html") and b"phasemeter live" in page
    assert set(ASSETS) == {"index.html", "live.js", "bands.js", "pools.js", "live.css"}
    for name in ASSETS:
        status, body, ctype = get(w, f"/live/{name}")
        assert status == 200 and ctype.startswith(ASSETS[name]) and len(body) > 500, name
        assert b"http://" not in body and b"https://" not in body, name  # no CDN, no fonts
    assert get(w, "/live/..%2Fweb.py")[0] == 404 and get(w, "/live/app.py")[0] == 404
    weight = page_weight()
    assert weight["total"] < 40_000 and weight["gzip_total"] < 12_000, weight


def test_api_alerts_evaluates_the_shipped_rules(live):
    status, doc, _ = get(live[0], "/api/alerts")
    assert status == 200, doc
    assert {r["rule"] for r in doc["results"]} == {"prefill-slow-tail", "decode-slow-tail"}
    states = [r["state"] for r in doc["results"]]
    assert states == sorted(states, key=lambda s: s != "firing")  # firing first
    assert all(r["runbook_url"].startswith("docs/runbooks/") for r in doc["results"])


def test_api_slo_without_a_declared_slo(live, monkeypatch, capsys):
    """This worker was started without PHASEMETER_SLOS: /api/slo answers (the
    page's row says how to declare one), `phasemeter slo` refuses the same way."""
    from phasemeter.cli.main import main

    w, env = live
    status, doc, _ = get(w, "/api/slo", **WINDOW, step="5m")
    assert status == 200, doc
    assert doc["slos"] == [] and doc["window"] == [] and doc["declared"] == []
    assert "no SLO is declared" in doc["note"] and "PHASEMETER_SLOS" in doc["note"]
    status, bad, _ = get(w, "/api/slo", slo="chat")
    assert status == 400 and bad["param"] == "slo" and "PHASEMETER_SLOS" in bad["error"], bad
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    assert main(["slo", "--from", WINDOW["from"], "--to", WINDOW["to"], "--format", "json"]) == 2
    assert "no SLO is declared" in capsys.readouterr().err


def _runs(mask_1d, min_gap: int = 12) -> int:
    """Groups of True separated by at least `min_gap` False: panels along one axis."""
    runs, gap, inside = 0, min_gap, False
    for v in mask_1d:
        if v:
            if not inside and gap >= min_gap:
                runs += 1
            inside, gap = True, 0
        else:
            inside, gap = False, gap + 1
    return runs


def test_browser_shows_the_grid_and_follows_a_filter(live, tmp_path):
    """Headless Chromium over the DevTools pipe: cells and n in the DOM, a
    non-blank screenshot with one median line per panel, no console errors,
    and a model filter that rewrites the URL and the panels."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip()
    import numpy as np
    from matplotlib import image

    w, _ = live
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        chrome.open(w.url + "/")
        first_ms = int(chrome.wait("document.documentElement.dataset.firstChartMs", 30))
        # The boxes above the grid fill in as their answers come: measure the grid once they have.
        boxes = chrome.wait("""(() => { const t = ['health', 'inflight', 'alerts'].map(
            id => document.querySelector('#' + id + ' .body').innerText);
            return t.every(x => x !== '…') && t; })()""")
        assert "consumed" in boxes[0] and "nothing in flight" in boxes[1] and "insufficient data" in boxes[2], boxes
        # No SLO declared: the attainment row is one line saying how to declare one.
        slo = chrome.wait("(() => { const t = document.getElementById('slo').innerText;"
                          " return t.includes('PHASEMETER_SLOS') && t; })()", 30)
        assert slo.strip() == "SLO attainment: " + get(w, "/api/slo")[1]["note"], slo
        assert chrome.eval("document.querySelectorAll('#slo svg, #slo table').length") == 0
        grid = chrome.eval("""(() => {
            const heads = [...document.querySelectorAll('.grid tr:first-child th')].map(t => t.textContent);
            const rows = [...document.querySelectorAll('.grid tr th:first-child')].slice(1).map(t => t.innerText);
            const ns = [...document.querySelectorAll('svg.panel .pn')].filter(t => t.textContent.startsWith('n='))
                       .map(t => Number(t.textContent.slice(2).replace(/,/g, '')));
            const r = document.querySelector('.grid').getBoundingClientRect();
            return {heads, rows, ns, panels: document.querySelectorAll('svg.panel').length,
                    tails: document.querySelectorAll('svg.panel .tl').length,
                    box: [r.left, r.top, r.right, r.bottom]};
        })()""")
        assert grid["heads"][1:] == ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"], grid["heads"]
        assert [r.replace("\n", " ") for r in grid["rows"]] == [
            "llama-4-maverick prefill", "llama-4-maverick decode", "qwen3-32b prefill", "qwen3-32b decode"]
        assert grid["panels"] == 20 and grid["tails"] == 20
        _, doc, _ = get(w, "/api/bands")  # the page's own question: its n per cell
        assert len(grid["ns"]) == 20 and sum(grid["ns"]) == sum(r["prefill_n"] + r["decode_n"] for r in doc["rows"])
        left, top, right, bottom = grid["box"]
        png = chrome.screenshot({"x": left, "y": top, "width": right - left, "height": bottom - top})
        px = (image.imread(io.BytesIO(png), format="png")[..., :3] * 255).astype(int)
        assert px.std() > 20, "blank screenshot"
        # Panels from pixels: the axes' grey (#999). A y axis is a ~120 px tall
        # grey column, an x axis a ~240 px wide grey row (x 5 panels), crisp edges: one pair per panel.
        grey = np.abs(px - 0x99).max(axis=2) < 12
        assert (_runs(grey.sum(axis=0) > 80), _runs(grey.sum(axis=1) > 600)) == (5, 4)  # 5 buckets × 4 rows
        (tmp_path / "live.png").write_bytes(png)  # kept in pytest's tmp dir for a person to look at
        assert chrome.errors() == []

        chrome.eval("(() => { const s = document.getElementById('model'); s.value = 'qwen3-32b';"
                    " s.dispatchEvent(new Event('change')); })()")
        chrome.wait("location.search === '?model=qwen3-32b' && document.querySelectorAll('svg.panel').length === 10")
        heads = chrome.eval("[...document.querySelectorAll('.grid tr th:first-child')].slice(1).map(t => t.innerText)")
        assert [h.replace("\n", " ") for h in heads] == ["qwen3-32b prefill", "qwen3-32b decode"]
        # The link reproduces the view: a fresh load of that URL shows the same panels.
        chrome.call("Page.navigate", url=w.url + "/?model=qwen3-32b&win=6h")
        chrome.wait("document.getElementById('model').value === 'qwen3-32b' && "
                    "document.getElementById('win').value === '6h' && "
                    "document.querySelectorAll('svg.panel').length === 10")
        assert chrome.errors() == []
        print(f"time to first chart: {first_ms} ms")
    finally:
        chrome.close()


def test_browser_appends_what_arrives_without_rebuilding_the_grid(live, tmp_path):
    """New generations through Kafka -> worker -> store show up at the next
    refresh (5 s) in the same grid: the panels change, the table stays."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip()
    from phasemeter.producers import Meter

    w, env = live
    panel_n = ("[...document.querySelectorAll('svg.panel')].filter(s => s.querySelector('.pt').textContent === "
               "'qwen3-32b · prefill · 0-512').map(s => Number(s.querySelector('.pn').textContent.slice(2)"
               ".replace(/,/g, '')))[0]")
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        chrome.open(w.url + "/?model=qwen3-32b")
        chrome.wait("document.documentElement.dataset.firstChartMs")
        before = chrome.eval(panel_n)
        chrome.eval("document.querySelector('.grid').dataset.mark = 'first'")
        meter = Meter(bootstrap_servers=env["KAFKA_BOOTSTRAP_SERVERS"], topic=env["PHASEMETER_TOPIC"], gateway="t")
        now = time.time()
        for i in range(30):
            meter.record(model="qwen3-32b", input_tokens=200, output_tokens=50, t0=now - 3 + i * 0.05,
                         ttft_s=0.05, e2e_s=0.5)
        meter.close(timeout_s=10)
        w.wait_processed(30, timeout_s=30)
        after = chrome.wait(f"(() => {{ const n = {panel_n}; return n > {before} && n; }})()", 20)
        assert after == before + 30
        assert chrome.eval("document.querySelector('.grid').dataset.mark") == "first"  # appended, not rebuilt
        assert chrome.errors() == []
    finally:
        chrome.close()
