"""The transfer alert family (alerts/transfer.py), pure: it fires only on
"TTFT rose, prefill compute flat, transfer up", is routed to the prefill
runbook's section D, and a store without P/D traffic gives it nothing."""

from __future__ import annotations

from datetime import datetime, timezone

import pandas as pd
import pytest

from phasemeter.alerts.evaluate import FIRING, INSUFFICIENT, OK, table
from phasemeter.alerts.rules import RulesError, TRANSFER_ALERT, load_rules, parse_rules
from phasemeter.alerts.transfer import TTFT_RISE, evaluate_transfer
from phasemeter.alerts.webhook import payloads

AT = datetime(2026, 3, 2, 12, 0, tzinfo=timezone.utc)
RULES = load_rules()
[TRANSFER] = [r for r in RULES.rules if r.metric == "kv_transfer_s"]


def row(part, kv=0.02, ttft=0.8, compute=9000.0, n=300, model="m", bucket="8k-32k"):
    return dict(model=model, input_bucket=bucket, part=part, kv_n=n, kv_q=kv, ttft_n=n, ttft_q=ttft,
                compute_p50=compute, covered_ms=86_400_000)


def states(df) -> dict:
    return {(r.model, r.bucket): r.state for r in evaluate_transfer(TRANSFER, df, AT)}


def test_the_default_rule():
    assert (TRANSFER.phase, TRANSFER.percentile, TRANSFER.threshold, TRANSFER.floor) == ("prefill", 95, 0.5, 0.05)
    assert TRANSFER.transfer and TRANSFER.rises and TRANSFER.alertname == TRANSFER_ALERT
    assert TRANSFER.runbook == "docs/runbooks/prefill.md#d-kv-transfer-disaggregated-serving"
    assert not any(r.transfer for r in RULES.rules if r is not TRANSFER)


CASES = {
    # (current kv, current ttft, current compute) against a baseline of (0.02 s, 0.8 s, 9000 tok/s)
    "transfer up, TTFT up, compute flat": ((0.30, 1.1, 8900.0), FIRING),
    "transfer up, TTFT flat": ((0.30, 0.82, 9000.0), OK),            # nobody felt it
    "transfer up, TTFT up, compute down too": ((0.30, 1.6, 4000.0), OK),  # the prefill rule's
    "transfer up under the floor": ((0.045, 1.1, 9000.0), OK),        # 20 ms -> 45 ms: no page
    "transfer flat, TTFT up": ((0.025, 1.1, 9000.0), OK),
    "transfer down": ((0.01, 0.9, 9000.0), OK),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_it_fires_only_on_the_whole_signature(case):
    (kv, ttft, compute), want = CASES[case]
    df = pd.DataFrame([row("baseline"), row("current", kv=kv, ttft=ttft, compute=compute)])
    assert states(df) == {("m", "8k-32k"): want}


def test_the_evidence_and_the_routing_of_a_firing_one():
    df = pd.DataFrame([row("baseline"), row("current", kv=0.30, ttft=1.1, compute=8900.0)])
    [r] = evaluate_transfer(TRANSFER, df, AT)
    assert r.firing and r.current == 0.30 and r.baseline == 0.02 and r.change == pytest.approx(14.0)
    assert r.engine_change == pytest.approx(8900 / 9000 - 1)
    assert "KV transfer p95 0.02s → 0.30s" in r.evidence and "TTFT p95 +38%" in r.evidence
    assert "section D" in r.evidence
    text = table([r])
    assert f"FIRING {TRANSFER_ALERT} [prefill] m 8k-32k" in text and TRANSFER.runbook in text
    [msg] = payloads([r], RULES.runbook_url)
    assert msg["groupLabels"]["alertname"] == TRANSFER_ALERT
    assert msg["alerts"][0]["annotations"]["runbook_url"] == TRANSFER.runbook
    assert "KV transfer" in msg["alerts"][0]["annotations"]["summary"]


def test_too_few_transfers_or_no_baseline_is_insufficient_never_firing():
    few = pd.DataFrame([row("baseline"), row("current", kv=0.5, ttft=2.0, n=10)])
    assert states(few) == {("m", "8k-32k"): INSUFFICIENT}
    new = pd.DataFrame([row("current", kv=0.5, ttft=2.0, model="new")])
    assert states(new) == {("new", "8k-32k"): INSUFFICIENT}


def test_a_store_without_transfers_gives_nothing():
    empty = pd.DataFrame(columns=["model", "input_bucket", "part", "kv_n", "kv_q", "ttft_n", "ttft_q",
                                  "compute_p50", "covered_ms"])
    assert evaluate_transfer(TRANSFER, empty, AT) == [] and evaluate_transfer(TRANSFER, None, AT) == []
    assert "(no generations in the evaluated windows)" in table([])


def test_ttft_must_rise_by_ttft_rise():
    base = pd.DataFrame([row("baseline"), row("current", kv=0.30, ttft=0.8 * (1 + TTFT_RISE) - 0.01)])
    assert states(base) == {("m", "8k-32k"): OK}
    base = pd.DataFrame([row("baseline"), row("current", kv=0.30, ttft=0.8 * (1 + TTFT_RISE) + 0.01)])
    assert states(base) == {("m", "8k-32k"): FIRING}


def test_the_metric_belongs_to_the_prefill_phase_and_takes_a_floor():
    rule = {"name": "t", "phase": "decode", "metric": "kv_transfer_s"}
    with pytest.raises(RulesError, match=r"rule\[0\]\.metric: 'kv_transfer_s' does not belong to phase 'decode'"):
        parse_rules({"rule": [rule]})
    [parsed] = parse_rules({"rule": [{**rule, "phase": "prefill", "floor": 0.1}]}).rules
    assert (parsed.floor, parsed.percentile, parsed.runbook) == (0.1, 99.0, TRANSFER.runbook)
