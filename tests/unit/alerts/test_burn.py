"""Burn-rate arithmetic on scripted histories, and which runbook a burning
budget routes to (alerts/burn.py, pure)."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from phasemeter.alerts import burn
from phasemeter.alerts.burn import FIRING, INSUFFICIENT, OK
from phasemeter.alerts.slo_rules import BurnRule, SLO_COUNTS, Slo, parse_slos

AT = datetime(2026, 11, 30, 12, tzinfo=timezone.utc)
SLO = Slo("chat", (), (), (("ttft_s", 2.0), ("decode_tps", 20.0)), 0.99)
PAGE = BurnRule("fast", "page", 3600, 300, 14.4)
TICKET = BurnRule("slow", "ticket", 21600, 1800, 6.0)


def counts(n: int, ttft: int = 0, decode: int = 0, failed: int = 0, both: int = 0) -> dict:
    """n generations; `ttft`/`decode` miss only that objective, `both` miss both."""
    c = {k: 0 for k in SLO_COUNTS}
    c.update(n=n, met_n=n - ttft - decode - failed - both, failed_n=failed,
             ttft_s_miss_n=ttft + both, decode_tps_miss_n=decode + both)
    return c


def states(long: dict, short: dict) -> tuple[str, str]:
    return (burn.evaluate(SLO, PAGE, "m", AT, long, short).state,
            burn.evaluate(SLO, TICKET, "m", AT, long, short).state)


def test_steady_within_budget_is_silent():
    assert states(counts(10_000, ttft=50), counts(1000, ttft=5)) == (OK, OK)  # burn 0.5


def test_a_fast_burn_pages():
    # 20 % misses against a 1 % budget: burn 20 in both windows.
    assert states(counts(10_000, ttft=2000), counts(1000, ttft=200)) == (FIRING, FIRING)


def test_a_slow_burn_opens_a_ticket_only():
    # 8 % misses: burn 8 >= 6 but < 14.4.
    r = burn.evaluate(SLO, TICKET, "m", AT, counts(10_000, decode=800), counts(1000, decode=80))
    assert r.state == FIRING and r.burn_long == pytest.approx(8.0)
    assert states(counts(10_000, decode=800), counts(1000, decode=80)) == (OK, FIRING)


def test_recovery_resets_through_the_short_window():
    # The long window still holds the burn; the short one is clean again.
    assert states(counts(10_000, ttft=2000), counts(1000, ttft=2)) == (OK, OK)


def test_a_short_spike_alone_does_not_page():
    assert states(counts(10_000, ttft=100), counts(1000, ttft=500)) == (OK, OK)


def test_insufficient_data_never_fires():
    assert states(counts(10, ttft=10), counts(10, ttft=10)) == (INSUFFICIENT, INSUFFICIENT)
    assert states(counts(0), counts(0)) == (INSUFFICIENT, INSUFFICIENT)
    assert burn.evaluate(SLO, PAGE, "m", AT, counts(10_000, ttft=9000), counts(19, ttft=19)).state == INSUFFICIENT


def test_a_prefill_burn_routes_to_prefill_and_a_decode_burn_to_decode():
    sloset = parse_slos({"slo": [{"name": "chat", "objectives": {"ttft_s": 2, "decode_tps": 20}, "target": 0.99}]})
    pre = burn.evaluate(SLO, PAGE, "m", AT, counts(10_000, ttft=1900, decode=30, both=20),
                        counts(1000, ttft=200))
    dec = burn.evaluate(SLO, PAGE, "m", AT, counts(10_000, decode=1900, ttft=30, both=20),
                        counts(1000, decode=200))
    assert (pre.state, pre.phase, pre.objective) == (FIRING, "prefill", "ttft_s")
    assert (dec.state, dec.phase, dec.objective) == (FIRING, "decode", "decode_tps")
    assert sloset.runbook_url(pre.phase) == "docs/runbooks/prefill.md"
    assert sloset.runbook_url(dec.phase) == "docs/runbooks/decode.md"
    assert "ttft_s missed by 19.2%" in pre.evidence() and "decode_tps missed by 0.5%" in pre.evidence()


def test_attribution_of_failures_and_of_end_to_end():
    assert burn.culprit(counts(100, failed=30, ttft=5), SLO) == ("errors", None)
    assert burn.culprit(counts(100), SLO) == ("none", None)
    e2e = Slo("e", (), (), (("ttft_s", 2.0), ("e2e_s", 30.0)), 0.9)
    c = {k: 0 for k in SLO_COUNTS} | {"n": 100, "met_n": 60, "e2e_s_miss_n": 40}
    assert burn.culprit(c, e2e) == ("decode", "e2e_s")      # first token in time: the rest was decode
    c["ttft_s_miss_n"] = 30
    assert burn.culprit(c, e2e) == ("prefill", "e2e_s")     # slow first tokens made them late
    only = Slo("o", (), (), (("e2e_s", 30.0),), 0.9)
    assert burn.culprit({k: 0 for k in SLO_COUNTS} | {"n": 10, "e2e_s_miss_n": 5}, only)[1] == "e2e_s"


def test_rows_and_rings():
    r = burn.row(SLO, counts(200, ttft=4, failed=2), span_s=100.0)
    assert r["attainment"] == pytest.approx(0.97) and r["burn_rate"] == pytest.approx(3.0)
    assert r["budget_left"] == pytest.approx(-2.0) and r["goodput_per_s"] == pytest.approx(1.94)
    assert r["ttft_s_miss_share"] == pytest.approx(0.02) and r["failed_share"] == pytest.approx(0.01)
    assert r["burning"] == "prefill"
    empty = burn.row(SLO, counts(0), span_s=60)
    assert empty["attainment"] is None and empty["burn_rate"] is None and empty["burning"] == "none"
    rings = {1: counts(10, ttft=1), 3: counts(5)}
    wins = burn.windows_from_rings(rings, [3600, 300, 1800])
    assert wins[300]["n"] == 10 and wins[1800]["n"] == 10 and wins[3600]["n"] == 15
    assert wins[3600]["ttft_s_miss_n"] == 1
    assert burn.unpack([3, 2, 1]) == {**{k: 0 for k in SLO_COUNTS}, "n": 3, "met_n": 2, "failed_n": 1}
