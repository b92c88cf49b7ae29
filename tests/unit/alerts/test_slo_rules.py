"""The SLO file: every error names the key, the value and what is allowed."""

from __future__ import annotations

import pytest

from phasemeter.alerts.rules import RulesError
from phasemeter.alerts.slo_rules import DEFAULT_BURN, NONE, load_slos, parse_slos

BUCKETS = ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"]


def doc(**slo):
    base = {"name": "chat", "objectives": {"ttft_s": 2, "decode_tps": 20.0}, "target": 0.95}
    return {"slo": [{**base, **slo}]}


def test_defaults_and_shapes():
    s = parse_slos(doc(), bucket_labels=BUCKETS)
    slo = s.slos[0]
    assert slo.models == () and slo.buckets == () and slo.count_failed is True
    assert slo.objectives == (("ttft_s", 2.0), ("decode_tps", 20.0))
    assert [b.name for b in s.burn] == [b["name"] for b in DEFAULT_BURN]
    page, ticket = s.burn
    assert (page.severity, page.long_s, page.short_s, page.factor) == ("page", 3600, 300, 14.4)
    assert (ticket.severity, ticket.long_s, ticket.short_s, ticket.factor) == ("ticket", 21600, 1800, 6.0)
    assert s.period_s == 30 * 86400
    assert slo.params() == {"ttft_max": 2.0, "prefill_min": None, "tpot_max": None, "decode_min": 20.0,
                            "e2e_max": None, "slo_models": [], "slo_buckets": [], "count_failed": 1}
    assert "ttft_s ≤ 2 and decode_tps ≥ 20" in slo.describe()


def test_the_id_follows_what_decides_the_counts():
    a = parse_slos(doc()).slos[0]
    assert parse_slos(doc(name="other", target=0.99)).slos[0].slo_id == a.slo_id  # same counts
    assert parse_slos(doc(objectives={"ttft_s": 2.5, "decode_tps": 20})).slos[0].slo_id != a.slo_id
    assert parse_slos(doc(count_failed=False)).slos[0].slo_id != a.slo_id
    assert parse_slos(doc(models=["m"])).slos[0].slo_id != a.slo_id
    assert 0 < a.slo_id < 2 ** 63


@pytest.mark.parametrize("slo, words", [
    ({"objectives": {"ttft": 2}}, ["slo[0].objectives.ttft", "unknown metric", "ttft_s", "decode_tps", "e2e_s"]),
    ({"objectives": {"ttft_s": -1}}, ["slo[0].objectives.ttft_s", "-1", "positive number of seconds"]),
    ({"objectives": {"decode_tps": "fast"}}, ["slo[0].objectives.decode_tps", "'fast'", "tokens/s"]),
    ({"objectives": {}}, ["slo[0].objectives", "ttft_s = 2.0"]),
    ({"target": 95}, ["slo[0].target", "95", "(0, 1)"]),
    ({"target": "high"}, ["slo[0].target", "expected float", "'high'"]),
    ({"buckets": ["8k-32K"]}, ["slo[0].buckets", "'8k-32K'", "not an input bucket", "8k-32k"]),
    ({"buckets": "some"}, ["slo[0].buckets", "\"all\"", "'some'"]),
    ({"models": []}, ["slo[0].models", "non-empty list"]),
    ({"count_failed": "yes"}, ["slo[0].count_failed", "expected bool"]),
    ({"colour": 1}, ["slo[0].colour", "unknown key", "objectives", "target"]),
])
def test_bad_slos_name_key_value_and_allowed(slo, words):
    with pytest.raises(RulesError) as err:
        parse_slos(doc(**slo), bucket_labels=BUCKETS)
    for w in words:
        assert w in str(err.value), (w, str(err.value))


@pytest.mark.parametrize("rule, words", [
    ({"severity": "sms"}, ["burn_rate[0].severity", "'sms'", "page, ticket"]),
    ({"long": "5m", "short": "1h"}, ["burn_rate[0].short", "shorter than long"]),
    ({"long": "soon"}, ["burn_rate[0].long"]),
    ({"factor": 0}, ["burn_rate[0].factor", "0", "> 0"]),
    ({"min_samples": 0}, ["burn_rate[0].min_samples", ">= 1"]),
    ({"window": "1h"}, ["burn_rate[0].window", "unknown key", "long", "short"]),
])
def test_bad_burn_rules(rule, words):
    base = {"name": "b", "long": "1h", "short": "5m", "factor": 14.4}
    with pytest.raises(RulesError) as err:
        parse_slos({**doc(), "burn_rate": [{**base, **rule}]})
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_file_level_errors(tmp_path):
    with pytest.raises(RulesError, match="at least one"):
        parse_slos({"slo": []})
    with pytest.raises(RulesError, match="'chat' is used twice"):
        parse_slos({"slo": doc()["slo"] * 2})
    with pytest.raises(RulesError, match=r"slos\.budget: unknown key"):
        parse_slos({**doc(), "budget": 1})
    bad = tmp_path / "s.toml"
    bad.write_text("[[slo]\n")
    with pytest.raises(RulesError, match="not valid TOML"):
        load_slos(bad)
    with pytest.raises(RulesError, match="cannot read"):
        load_slos(tmp_path / "missing.toml")


def test_none_declared_by_default_and_the_example_is_valid():
    assert load_slos(None) is NONE and load_slos("") is NONE and NONE.slos == ()
    example = load_slos("example", BUCKETS)
    assert [s.name for s in example.slos] == ["interactive"] and len(example.burn) == 2
