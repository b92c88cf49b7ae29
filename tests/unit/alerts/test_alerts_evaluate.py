"""Pure evaluation: exact states, no cross-firing, the evidence of docs/alerts.md, backtest episodes."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from phasemeter.alerts import episodes
from phasemeter.alerts.evaluate import FIRING, INSUFFICIENT, OK, diagnose, evaluate, order, table
from phasemeter.alerts.rules import load_rules
from phasemeter.alerts.webhook import payloads, safe_url

AT = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
RULES = load_rules()
PREFILL, DECODE, STALLS, _TRANSFER = RULES.rules  # the transfer family: test_alerts_transfer.py


def row(model, bucket, part, prefill=1000.0, decode=50.0, n=300, queue=0.05, share=0.02, engine=None, **kw):
    """`engine`: engine prefill (queue excluded); by default the same change as `prefill`."""
    base = dict(model=model, input_bucket=bucket, part=part, n=n, prefill_n=n, prefill_q=prefill,
                decode_n=n, decode_q=decode, queue_n=n, queue_p95=queue, queue_share=share,
                engine_q=prefill * 1.02 if engine is None else engine)
    return {**base, **kw}


def frame(*rows):
    return pd.DataFrame(list(rows))


def states(rule, df):
    return {(r.model, r.bucket): r.state for r in evaluate(rule, df, AT)}


def test_prefill_drop_fires_prefill_only():
    df = frame(row("m", "8k-32k", "baseline"), row("m", "8k-32k", "current", prefill=600.0, queue=0.2),
               row("m", "0-512", "baseline"), row("m", "0-512", "current", prefill=100.0))
    assert states(PREFILL, df) == {("m", "8k-32k"): FIRING}  # 0-512 is not a prefill bucket
    assert states(DECODE, df) == {("m", "8k-32k"): OK, ("m", "0-512"): OK}
    (r,) = [r for r in evaluate(PREFILL, df, AT)]
    assert r.change == pytest.approx(-0.4) and r.queue_ratio == pytest.approx(4.0)
    # The queue grew 4x but is 2 % of TTFT, and engine prefill fell as much:
    # compute, not the queue (the case that used to send on-call to the queue).
    assert r.evidence == "engine prefill (queue excluded) -40%, queue 2% → 2% of TTFT → compute contention"
    assert r.engine_change == pytest.approx(-0.4) and r.queue_share == (0.02, 0.02)


def test_a_queue_that_eats_ttft_is_the_cause_when_engine_prefill_held():
    # The H200 trace's shape: queues of 100 s made up nearly all of TTFT.
    df = frame(row("m", "32k+", "baseline", share=0.1),
               row("m", "32k+", "current", prefill=200.0, queue=100.0, share=0.95, engine=1000.0))
    (r,) = evaluate(PREFILL, df, AT)
    assert r.state == FIRING
    assert r.evidence == "engine prefill steady (-2%), queue 10% → 95% of TTFT → queue/scheduler saturation"


def test_decode_drop_fires_decode_only():
    df = frame(row("m", "2k-8k", "baseline"), row("m", "2k-8k", "current", decode=20.0))
    assert states(PREFILL, df) == {("m", "2k-8k"): OK}
    assert states(DECODE, df) == {("m", "2k-8k"): FIRING}
    assert evaluate(DECODE, df, AT)[0].evidence == "decode slowed, prefill steady (+0%) → KV-cache/batch"


def test_both_drop_fires_both_and_says_deploy():
    df = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=500.0, decode=25.0))
    for rule in (PREFILL, DECODE):
        (r,) = evaluate(rule, df, AT)
        assert r.state == FIRING
        assert r.evidence.endswith("→ node fault / model swap / bad deploy")


def test_threshold_boundary_is_strict():
    at_edge = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=700.0))
    below = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=699.0))
    assert states(PREFILL, at_edge) == {("m", "32k+"): OK}
    assert states(PREFILL, below) == {("m", "32k+"): FIRING}


@pytest.mark.parametrize("cur_n, base_n", [(49, 300), (300, 199), (0, 300)])
def test_too_few_samples_is_insufficient_never_firing(cur_n, base_n):
    df = frame(row("m", "32k+", "baseline", n=base_n),
               row("m", "32k+", "current", prefill=10.0, decode=1.0, n=cur_n))
    assert states(PREFILL, df) == {("m", "32k+"): INSUFFICIENT}
    assert states(DECODE, df) == {("m", "32k+"): INSUFFICIENT}


def test_new_and_vanished_models_and_empty_percentiles():
    df = frame(row("new", "32k+", "current", prefill=1.0),
               row("gone", "32k+", "baseline"),
               row("nan", "32k+", "baseline"), row("nan", "32k+", "current", prefill=float("nan"), n=0))
    assert states(PREFILL, df) == {("new", "32k+"): INSUFFICIENT, ("gone", "32k+"): INSUFFICIENT,
                                   ("nan", "32k+"): INSUFFICIENT}
    gone = [r for r in evaluate(PREFILL, df, AT) if r.model == "gone"][0]
    assert (gone.n_current, gone.current, gone.change) == (0, None, None)
    assert evaluate(PREFILL, pd.DataFrame(), AT) == []


def test_root_cause_map():
    assert diagnose("prefill", 0.3, 1.1, -0.05, (0.03, 0.03), -0.45) == \
        "engine prefill (queue excluded) -45%, queue 3% → 3% of TTFT → compute contention"
    assert diagnose("prefill", 0.3, None, None) == (
        "prefill slowed; no queue_s reported, so waiting and computing cannot be told apart → compute contention")
    assert diagnose("prefill", 0.3, 2.6, 0.0, (0.02, 0.05), -0.7).endswith("→ compute contention")
    assert diagnose("prefill", 0.3, 1.5, 0.0, (0.6, 0.2), -0.1) == \
        "engine prefill steady (-10%), queue 20% → 60% of TTFT → queue/scheduler saturation"
    assert diagnose("decode", 0.3, 2.0, -0.1) == \
        "decode slowed, prefill steady (-10%) → KV-cache/batch; queue_s p95 also rose 2.0× (preemption?)"
    assert diagnose("decode", 0.3, 1.0, -0.3).startswith("both phases dropped (prefill -30%)")


def test_order_and_table():
    df = frame(*(row("m", b, p, prefill=(500.0 if p == "current" and b == "32k+" else 1000.0))
                 for b in ("32k+", "2k-8k", "8k-32k") for p in ("baseline", "current")))
    res = order(evaluate(DECODE, df, AT) + evaluate(PREFILL, df, AT),
                ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"], ["prefill-slow-tail", "decode-slow-tail"])
    assert [(r.rule.phase, r.bucket) for r in res][:3] == [("prefill", "2k-8k"), ("prefill", "8k-32k"),
                                                           ("prefill", "32k+")]
    text = table(res)
    assert "FIRING PhasemeterPrefillSlowTail [prefill] m 32k+: p5 prefill_tps -50%" in text
    assert "runbook: docs/runbooks/prefill.md" in text and "PhasemeterDecodeSlowTail" not in text


def test_episodes_rising_edges_and_durations():
    def at(i):
        return AT + timedelta(minutes=15 * i)
    ok = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current"))
    bad = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=400.0))
    worse = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=300.0))
    seq = [ok, bad, worse, ok, bad]
    eps = episodes([(at(i), evaluate(PREFILL, f, at(i))) for i, f in enumerate(seq)])
    assert [(e.started, e.ended, e.points, round(e.worst_change, 2)) for e in eps] == [
        (at(1), at(3), 2, -0.7), (at(4), None, 1, -0.6)]
    assert eps[0].duration_s(at(4)) == 1800 and eps[1].duration_s(at(4)) == 0


def test_webhook_payload_groups_by_alertname():
    df = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=500.0, decode=25.0),
               row("m", "8k-32k", "baseline"), row("m", "8k-32k", "current", prefill=500.0))
    firing = [r for rule in RULES.rules for r in evaluate(rule, df, AT) if r.state == FIRING]
    msgs = payloads(firing, RULES.runbook_url)
    assert [m["groupLabels"]["alertname"] for m in msgs] == ["PhasemeterPrefillSlowTail",
                                                            "PhasemeterDecodeSlowTail"]
    assert [len(m["alerts"]) for m in msgs] == [2, 1]
    assert msgs[0]["commonLabels"] == {"alertname": "PhasemeterPrefillSlowTail", "phase": "prefill", "model": "m",
                                       "severity": "page", "rule": "prefill-slow-tail"}
    assert msgs[0]["alerts"][0]["startsAt"] == "2026-03-02T12:00:00.000Z"


def test_safe_url_drops_credentials_and_query():
    assert safe_url("https://u:p@hooks.example:8443/x?token=abc") == "https://hooks.example:8443/x"


def test_a_baseline_with_little_history_says_how_little():
    # "previous 24h" with 45 minutes of data (a fresh deployment, or the demo).
    df = frame(row("m", "32k+", "baseline", covered_ms=45 * 60_000),
               row("m", "32k+", "current", prefill=500.0, covered_ms=600_000),
               row("m", "8k-32k", "baseline", covered_ms=23 * 3_600_000),
               row("m", "8k-32k", "current", covered_ms=600_000))
    results = evaluate(PREFILL, df, AT)
    thin = {r.bucket: r.thin_baseline for r in results}
    assert thin == {"32k+": True, "8k-32k": False}
    text = table(results)
    assert "(baseline covers 45m, n=300)" in text
    assert "note: 1 baseline(s) cover under half their span (shortest: prefill-slow-tail m 32k+, " \
           "baseline covers 45m, n=300 of previous 1d)" in text
    from phasemeter.alerts.evaluate import as_dict

    doc = as_dict([r for r in results if r.bucket == "32k+"][0])
    assert doc["baseline_covered_s"] == 2700 and doc["baseline_nominal_s"] == 86400 and doc["baseline_thin"]


def test_an_episode_whose_baseline_absorbed_the_incident_is_marked():
    from phasemeter.alerts import with_overlap
    from phasemeter.alerts.rules import override

    def at(i):
        return AT + timedelta(minutes=15 * i)
    ok = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current"))
    bad = frame(row("m", "32k+", "baseline"), row("m", "32k+", "current", prefill=400.0))
    short = override(RULES, baseline={"kind": "previous", "duration": "30m"}).rules[0]
    # 15 min window, 30 min baseline: fired at 1, resolved at 3. At 3 the
    # baseline [at(3) - 45m, at(3) - 15m) = [at(0), at(2)) holds the firing
    # data from at(0) (the first firing window's start): 30 min, all of it.
    [ep] = episodes([(at(i), evaluate(short, f, at(i))) for i, f in enumerate([ok, bad, bad, ok])])
    ep = with_overlap(ep, short, at(3))
    assert ep.baseline_overlap_s == 1800 and ep.baseline_overlap_share == 1.0 and ep.absorbed
    # The default 24h baseline holds the same 30 min: 2 % of it, under half of p5's 5 %.
    [ep] = episodes([(at(i), evaluate(PREFILL, f, at(i))) for i, f in enumerate([ok, bad, bad, ok])])
    ep = with_overlap(ep, PREFILL, at(3))
    assert ep.baseline_overlap_s == 1800 and not ep.absorbed


def stall_row(model, bucket, part, share, gap=0.05, n=300):
    return dict(model=model, input_bucket=bucket, part=part, n=n, verdict_n=n, stalled_n=int(share * n),
                stalled_share=share, gap_n=n, gap_q=gap, covered_ms=86_400_000)


def test_the_stall_family_fires_on_a_rise_past_its_floor_and_names_the_kv_cache_section():
    df = frame(stall_row("m", "0-512", "baseline", 0.0), stall_row("m", "0-512", "current", 0.05, gap=1.4),
               stall_row("m", "2k-8k", "baseline", 0.0), stall_row("m", "2k-8k", "current", 0.01),      # under the floor
               stall_row("m", "8k-32k", "baseline", 0.03), stall_row("m", "8k-32k", "current", 0.05),   # not doubled
               stall_row("m", "32k+", "baseline", 0.0, n=100), stall_row("m", "32k+", "current", 0.5, n=20))
    got = {(r.bucket): r for r in evaluate(STALLS, df, AT)}
    assert {b: r.state for b, r in got.items()} == {"0-512": FIRING, "2k-8k": OK, "8k-32k": OK,
                                                    "32k+": INSUFFICIENT}
    fired = got["0-512"]
    assert fired.change is None and "stalled share 0.0% → 5.0%" in fired.evidence
    assert "preemption / KV-cache pressure" in fired.evidence
    text = table(list(got.values()))
    assert "FIRING PhasemeterDecodeStalls [decode] m 0-512" in text and "decode.md#a-kv-cache" in text
    # A stall never reads as a throughput drop: the throughput rules ignore the stall frame's columns.
    assert all(r.state == INSUFFICIENT for r in evaluate(DECODE, df, AT))
    msg = payloads([fired], RULES.runbook_url)[0]
    assert msg["groupLabels"] == {"alertname": "PhasemeterDecodeStalls"}
    assert "stalled_share rose" in msg["alerts"][0]["annotations"]["summary"]
