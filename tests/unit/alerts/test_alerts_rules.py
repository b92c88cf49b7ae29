"""Rules file: defaults, both baseline kinds, and errors that name the bad key."""

from __future__ import annotations

import pytest

from phasemeter.alerts.rules import RulesError, load_rules, override, parse_rules
from phasemeter.cli.main import main

GOOD = """
[[rule]]
name = "p"
phase = "prefill"
buckets = ["8k-32k"]
baseline = { kind = "same_hour", days = 3, duration = "30m" }
[[rule]]
name = "d"
phase = "decode"
"""


def write(tmp_path, text):
    path = tmp_path / "rules.toml"
    path.write_text(text)
    return path


def test_defaults_match_the_issue():
    p, d, st, kv = load_rules().rules
    assert (p.metric, p.percentile, p.buckets) == ("prefill_tps", 5.0, ("2k-8k", "8k-32k", "32k+"))
    assert (d.metric, d.buckets) == ("decode_tps", ())
    for r in (p, d):
        assert (r.window_s, r.baseline.kind, r.baseline.duration_s) == (900, "previous", 86400)
        assert (r.threshold, r.min_current, r.min_baseline) == (0.30, 50, 200)
    assert p.runbook == "docs/runbooks/prefill.md" and d.runbook == "docs/runbooks/decode.md"
    assert (p.alertname, d.alertname) == ("PhasemeterPrefillSlowTail", "PhasemeterDecodeSlowTail")
    assert p.covers("32k+") and not p.covers("0-512") and d.covers("0-512")
    # The stall family: decode, a rise of the stalled share past a floor, to the KV-cache section.
    assert (st.phase, st.metric, st.rises, st.threshold, st.floor) == ("decode", "stalled_share", True, 1.0, 0.02)
    assert st.alertname == "PhasemeterDecodeStalls" and st.runbook.startswith("docs/runbooks/decode.md#a-kv-cache")
    assert not p.rises and not d.rises
    assert kv.transfer and kv.alertname == "PhasemeterKvTransferSlow"  # the transfer family: test_alerts_transfer.py


@pytest.mark.parametrize("table, words", [
    ({"metric": "max_gap_s"}, None),
    ({"metric": "stalled_share", "threshold": 0}, ["rule[0].threshold", "relative rise"]),
    ({"metric": "decode_tps", "floor": 0.1}, ["rule[0].floor", "only the stall metrics"]),
    ({"metric": "stalled_share", "floor": -1.0}, ["rule[0].floor", ">= 0"]),
    ({"metric": "max_gap_s", "phase": "prefill"}, ["rule[0].metric", "does not belong to phase 'prefill'"]),
])
def test_stall_rules_are_checked(table, words):
    doc = {"rule": [{"name": "s", "phase": "decode", **table}]}
    if words is None:
        r = parse_rules(doc).rules[0]
        assert (r.percentile, r.floor, r.threshold, r.rises) == (99.0, 0.5, 1.0, True)
        return
    with pytest.raises(RulesError) as err:
        parse_rules(doc)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_both_baseline_kinds_give_the_right_spans(tmp_path):
    rs = load_rules(write(tmp_path, GOOD))
    p, d = rs.rules
    assert p.baseline.spans(1_000_000.0, 1_000_900.0) == [
        (1_000_900.0 - k * 86400 - 1800, 1_000_900.0 - k * 86400) for k in (1, 2, 3)]
    assert d.buckets == () and d.metric == "decode_tps"  # defaults fill in
    assert d.baseline.spans(1_000_000.0, 1_000_900.0) == [(1_000_000.0 - 86400, 1_000_000.0)]
    assert "same 30m of day, last 3 days" == p.baseline.describe()


def test_override_revalidates():
    rs = override(load_rules(), baseline={"kind": "previous", "duration": "30m"})
    assert [r.baseline.duration_s for r in rs.rules] == [1800, 1800, 1800, 1800]
    assert [r.buckets for r in rs.rules] == [r.buckets for r in load_rules().rules]
    with pytest.raises(RulesError, match=r"baseline\.duration"):
        override(load_rules(), baseline={"kind": "previous", "duration": "soon"})


@pytest.mark.parametrize("text, key", [
    ('[[rule]]\nname="a"\nphase="prefill"\nwindw="15m"', "rule[0].windw"),
    ('[[rule]]\nname="a"\nphase="both"', "rule[0].phase"),
    ('[[rule]]\nname="a"\nphase="prefill"\nmetric="decode_tps"', "rule[0].metric"),
    ('[[rule]]\nname="a"\nphase="decode"\nwindow="15 minutes"', "rule[0].window"),
    ('[[rule]]\nname="a"\nphase="decode"\nbaseline={kind="weekly"}', "rule[0].baseline.kind"),
    ('[[rule]]\nname="a"\nphase="decode"\nbaseline={kind="previous", days=3}', "rule[0].baseline.days"),
    ('[[rule]]\nname="a"\nphase="decode"\nthreshold=30', "rule[0].threshold"),
    ('[[rule]]\nname="a"\nphase="decode"\nthreshold="30%"', "rule[0].threshold"),
    ('[[rule]]\nname="a"\nphase="decode"\npercentile=0', "rule[0].percentile"),
    ('[[rule]]\nname="a"\nphase="decode"\nmin_samples={current="50"}', "rule[0].min_samples.current"),
    ('[[rule]]\nname="a"\nphase="decode"\nmin_samples={now=5}', "rule[0].min_samples.now"),
    ('[[rule]]\nname="a"\nphase="decode"\nbuckets="long"', "rule[0].buckets"),
    ('[[rule]]\nphase="decode"', "rule[0].name"),
    ('[[rule]]\nname="a"\nphase="decode"\n[[rule]]\nname="a"\nphase="prefill"', "rule[].name"),
    ('[[rules]]\nname="a"', "rules.rules"),
    ('title = "x"', "rules.title"),
    ('[[rule]\n', "not valid TOML"),
])
def test_errors_name_the_key(tmp_path, text, key):
    with pytest.raises(RulesError) as err:
        load_rules(write(tmp_path, text))
    assert key in str(err.value)


def test_missing_file_names_the_flag(tmp_path):
    with pytest.raises(RulesError, match="--rules"):
        load_rules(tmp_path / "nope.toml")


def test_parse_rules_requires_a_rule():
    with pytest.raises(RulesError, match=r"rules\.rule"):
        parse_rules({})


def test_cli_bad_rules_file_exits_2_naming_the_key(tmp_path, capsys):
    # Rules are validated before any store is opened.
    path = write(tmp_path, '[[rule]]\nname="a"\nphase="decode"\nthreshold=1.5')
    code = main(["alerts", "check", "--rules", str(path), "--data-dir", str(tmp_path)])
    assert code == 2
    assert "rule[0].threshold" in capsys.readouterr().err


def test_a_bucket_label_the_store_does_not_have_is_an_error(tmp_path):
    from phasemeter.alerts.rules import RulesError, load_rules

    path = tmp_path / "rules.toml"
    path.write_text('[[rule]]\nname = "p"\nphase = "prefill"\nbuckets = ["2k-8k", "8k-32K"]\n')
    labels = ["0-512", "512-2k", "2k-8k", "8k-32k", "32k+"]
    with pytest.raises(RulesError, match=r"rule\[0\]\.buckets: '8k-32K' is not an input bucket \(the buckets are "):
        load_rules(path, labels)
    path.write_text('[[rule]]\nname = "p"\nphase = "prefill"\nbuckets = ["2k-8k", "8k-32k"]\n')
    assert load_rules(path, labels).rules[0].buckets == ("2k-8k", "8k-32k")
    assert load_rules(None, labels).rules  # the shipped defaults name real buckets
