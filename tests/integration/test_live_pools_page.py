"""The live page's per-pool view (docs/live.md) on a running worker: the
demo's disaggregated traffic (2 prefill pools, 3 decode pools, decode-2
slow) in one window, unified rows that are mostly null in an earlier one,
nothing at all in a third. `/api/pools` must equal `phasemeter query bands
--by` and `latency --by` (through the worker's HTTP interface, as a user's CLI
would), rows of a named pool only; a window without pools answers 200 with
the note; and a real headless Chromium draws the pools, or the note.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest
from conftest import WorkerProc, worker_env, write_store_in_subprocess
from test_live_page import _iso, cli_json, get

from phasemeter.demo.disagg import DEPLOYMENT

pytestmark = [pytest.mark.integration]

SPAN_S = 45 * 60
WINDOWS: dict[str, dict[str, str]] = {}  # set by the fixture, from its own clock


def write_store(t0: float) -> None:
    """In a subprocess (chDB opens a path in one process only): P/D rows in
    [t0, t0 + 45 min); unified rows, mostly null, in the hour two hours before."""
    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    client = connect(settings)
    migrate(client)
    nulls = synthetic_rows(400, t0 - 2 * 3600, 3600, seed=4)
    for i, r in enumerate(nulls):
        r.update(ttft_s=None, prefill_tps=None, prefill_tps_uncached=None, decode_s=None, decode_tps=None,
                 tpot_s=None, queue_s=None)
        if i % 2:
            r.update(status="error", output_tokens=0)
    pd_rows = synthetic_rows(3000, t0, SPAN_S, seed=5, first_offset=len(nulls), deployment=DEPLOYMENT)
    Sink.over(client, settings.store_dsn).write(nulls + pd_rows, [])
    client.close()


@pytest.fixture(scope="module")
def live(kafka_bootstrap, tmp_path_factory):
    t0 = (time.time() - 50 * 60) // 60 * 60
    WINDOWS.update(pd={"from": _iso(t0), "to": _iso(t0 + SPAN_S)},
                   nullheavy={"from": _iso(t0 - 2 * 3600), "to": _iso(t0 - 3600)},
                   empty={"from": _iso(t0 - 4 * 3600), "to": _iso(t0 - 3 * 3600)})
    tmp = tmp_path_factory.mktemp("pools")
    env = worker_env(kafka_bootstrap, tmp / "data",
                     pythonpath=(Path(__file__).parent, Path(__file__).parents[1]))
    write_store_in_subprocess(env, "test_live_pools_page", t0)
    w = WorkerProc(env, tmp, int(env["PHASEMETER_WEB_PORT"])).start()
    yield w, env
    w.stop()


@pytest.mark.parametrize("by", ["prefill_replica", "decode_replica"])
def test_api_pools_equals_query_bands_and_latency_by_pool(live, monkeypatch, by):
    w, env = live
    window = WINDOWS["pd"]
    status, doc, _ = get(w, "/api/pools", **window, step="5m", by=by)
    assert status == 200, doc
    pools = DEPLOYMENT.prefill_pools if by == "prefill_replica" else DEPLOYMENT.decode_pools
    assert doc["by"] == by and doc["pools"] == sorted(pools) and "note" not in doc
    assert doc["step_s"] == 300 and doc["bucket_order"][0] == "0-512"
    flags = ["--from", window["from"], "--to", window["to"], "--step", "5m", "--by", by, "--format", "json"]
    bands = cli_json(env, monkeypatch, "query", "bands", *flags)
    latency = cli_json(env, monkeypatch, "latency", *flags)
    # A request that failed before its first token never reached a decode pool
    # (disagg.py): the CLI shows it under pool ''; the view, in no pool.
    named = {k: [r for r in d["rows"] if r[by]] for k, d in (("bands", bands), ("latency", latency))}
    assert len(named["bands"]) > 20 and len(named["latency"]) == len(named["bands"])
    assert doc["bands"] == named["bands"] and doc["latency"] == named["latency"]
    assert sum(r["kv_transfer_n"] for r in doc["latency"]) > 2000  # the transfer's column, counted
    if by == "decode_replica":  # the demo's slow pool shows: its decode median is the lowest of the pools
        med = {p: sorted(r["decode_p50"] for r in doc["bands"] if r[by] == p and r["decode_p50"] is not None)
               for p in pools}
        assert len(med) == 3 and all(len(v) > 10 for v in med.values())
        mid = {p: v[len(v) // 2] for p, v in med.items()}
        assert min(mid, key=mid.get) == DEPLOYMENT.slow_pool, mid


@pytest.mark.parametrize("shape", ["empty", "nullheavy"])
def test_api_pools_without_pools_says_so(live, shape):
    status, doc, _ = get(live[0], "/api/pools", **WINDOWS[shape], step="5m")
    assert status == 200, doc
    assert doc["pools"] == [] and doc["bands"] == [] and doc["latency"] == []
    assert "no prefill/decode pools" in doc["note"] and "decode_replica" in doc["note"]


@pytest.mark.parametrize("query,param,words", [({"by": "replica"}, "by", "expected one of prefill_replica"),
                                               ({"path": "exact"}, "path", "unknown parameter"),
                                               ({"step": "7x"}, "step", "expected a duration")])
def test_api_pools_errors_are_400_naming_the_parameter(live, query, param, words):
    status, doc, _ = get(live[0], "/api/pools", **query)
    assert status == 400 and doc["param"] == param and words in doc["error"], doc


def _page(w, shape: str, by: str) -> str:
    window = WINDOWS[shape]
    return f"{w.url}/?win=custom&from={window['from']}&to={window['to']}&step=5m&pools={by}"


def test_browser_shows_the_pools_or_says_there_are_none(live, tmp_path):
    """Headless Chromium: per decode pool, a row per model · pool of decode
    panels and one of KV transfer panels, their n equal to /api/pools' own;
    off by default; on data without pools, the note and no panel; no console error."""
    from cdp import Chrome, chromium_or_skip

    exe = chromium_or_skip()
    w, _ = live
    chrome = Chrome(exe, tmp_path / "profile")
    try:
        chrome.open(w.url + "/")
        chrome.wait("document.documentElement.dataset.firstChartMs", 30)
        assert chrome.eval("document.getElementById('pools').hidden") is True  # off unless chosen
        chrome.call("Page.navigate", url=_page(w, "pd", "decode_replica"))
        chrome.wait("document.querySelectorAll('#pools-k svg.panel').length > 0", 30)
        seen = chrome.eval("""(() => {
            const rows = g => [...document.querySelectorAll(g + ' .grid tr th:first-child')].slice(1)
                              .map(t => t.innerText.replace('\\n', ' '));
            const ns = g => [...document.querySelectorAll(g + ' svg.panel .pn')]
                            .filter(t => t.textContent.startsWith('n='))
                            .map(t => Number(t.textContent.slice(2).replace(/,/g, '')));
            return {note: document.getElementById('pools-note').innerText, hidden: document.getElementById('pools').hidden,
                    by: document.getElementById('pools-by').value, b: rows('#pools-b'), k: rows('#pools-k'),
                    nb: ns('#pools-b'), nk: ns('#pools-k')};
        })()""")
        _, doc, _ = get(w, "/api/pools", **WINDOWS["pd"], step="5m", by="decode_replica")
        cells = sorted({f"{r['model']} · {r['decode_replica']}" for r in doc["bands"]})
        assert len(cells) == 6 and seen["hidden"] is False and seen["by"] == "decode_replica"
        assert seen["note"] == "decode pools: decode-0, decode-1, decode-2", seen["note"]
        assert seen["b"] == [f"{c} decode" for c in cells] and seen["k"] == [f"{c} kv_transfer" for c in cells]
        assert sum(seen["nb"]) == sum(r["decode_n"] for r in doc["bands"]) > 2000
        assert sum(seen["nk"]) == sum(r["kv_transfer_n"] for r in doc["latency"]) > 2000
        left, top, right, bottom = chrome.eval("(() => { const r = document.getElementById('pools')"
                                               ".getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; })()")
        png = chrome.screenshot({"x": left, "y": top, "width": right - left, "height": min(bottom - top, 1600)})
        (tmp_path / "pools.png").write_bytes(png)  # kept in pytest's tmp dir for a person to look at
        assert chrome.errors() == []
        for shape in ("nullheavy", "empty"):
            chrome.call("Page.navigate", url=_page(w, shape, "prefill_replica"))
            note = chrome.wait("(() => { const n = document.getElementById('pools-note');"
                               " return n && n.innerText.includes('no prefill/decode pools') && n.innerText; })()", 30)
            assert note == get(w, "/api/pools", **WINDOWS[shape])[1]["note"], note
            assert chrome.eval("document.querySelectorAll('#pools svg').length") == 0, shape
            assert chrome.errors() == [], shape
    finally:
        chrome.close()
