"""--abandoned and --prefill: flag validation, routing, and the bound parameters
the SQL receives (a fake runner records them; no store)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pandas as pd
import pytest

from phasemeter.analytics.core import BANDS_COLUMNS, LATENCY_COLUMNS, run_query
from phasemeter.analytics.paths import choose_path
from phasemeter.analytics.variants import exact_only, header_lines
from phasemeter.cli.main import build_parser, main
from phasemeter.timeparse import ArgError

T0 = datetime(2026, 11, 1, tzinfo=timezone.utc)
DAY = timedelta(days=1)


class FakeRunner:
    """Records (name, params); answers like an empty store (no tier has a cell)
    whose path rule (sql/read_path.sql) says `rule` (every window here is a
    day or longer at whole minutes: the store says "window", the rollup)."""

    def __init__(self, rule: str = "window"):
        self.calls, self.rule = [], rule

    def rows(self, name, params):  # what the reads ask for: the frame below as plain columns
        from phasemeter.query.rows import of

        return of(self.df(name, params))

    def df(self, name, params):
        self.calls.append((name, dict(params)))
        if name == "read_path":
            return pd.DataFrame([{"rule": self.rule, "rollup": 1, "window_s": 86400.0, "step_s": params["step_s"],
                                  "raw_rows": None, "grain_s": 60, "rollup_window_s": 21600,
                                  "rollup_raw_rows": 5_000_000}])
        return pd.DataFrame()

    def query(self):
        # The path rule and the tiers' first cells help choose; the rest is the query.
        return [c for c in self.calls if c[0] not in ("read_path", "rollup_tier_first_cells")]


def boom():
    raise AssertionError("the store's rule asked although the flags decide")


@pytest.mark.parametrize("cmd", [["query", "bands"], ["chart"], ["latency"]])
def test_flags_parse_with_defaults(cmd):
    a = build_parser().parse_args(cmd)
    assert a.abandoned == "include" and a.prefill == "total"
    a = build_parser().parse_args(cmd + ["--abandoned", "exclude", "--prefill", "uncached"])
    assert a.abandoned == "exclude" and a.prefill == "uncached"


@pytest.mark.parametrize("flag,bad", [("--abandoned", "maybe"), ("--prefill", "fast"), ("--prefill", "TOTAL")])
def test_bad_values_name_the_flag(flag, bad, capsys):
    with pytest.raises(SystemExit) as exc:
        main(["query", "bands", flag, bad])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}" in err and bad in err


@pytest.mark.parametrize("kw,flag", [({"abandoned": "maybe"}, "--abandoned"), ({"prefill": "fast"}, "--prefill")])
def test_library_bad_values_name_the_flag_before_any_query(kw, flag):
    runner = FakeRunner()
    with pytest.raises(ArgError, match=flag):
        run_query(runner, T0, T0 + DAY, 600, **kw)
    assert runner.calls == []


def test_latency_rejects_a_prefill_variant(capsys):
    with pytest.raises(ArgError, match="--prefill engine"):
        run_query(FakeRunner(), T0, T0 + DAY, 600, kind="latency", prefill="engine")
    assert main(["latency", "--prefill", "engine"]) == 2
    assert "--prefill engine" in capsys.readouterr().err


@pytest.mark.parametrize("argv,flags", [
    (["--abandoned", "exclude"], ["--abandoned exclude"]),
    (["--prefill", "engine"], ["--prefill engine"]),
    (["--prefill", "uncached", "--abandoned", "exclude"], ["--abandoned exclude", "--prefill uncached"]),
])
@pytest.mark.parametrize("cmd", [["query", "bands"], ["chart"]])
def test_rollup_with_an_exact_only_choice_fails_naming_both_flags(cmd, argv, flags, capsys):
    # fails before any store is opened: no --data-dir needed
    assert main(cmd + ["--from", "-30d", "--step", "1h", "--rollup", *argv]) == 2
    err = capsys.readouterr().err
    assert "--rollup" in err and all(f in err for f in flags), err


def test_latency_rollup_with_exclusion_fails(capsys):
    assert main(["latency", "--from", "-30d", "--step", "1h", "--rollup", "--abandoned", "exclude"]) == 2
    err = capsys.readouterr().err
    assert "--rollup" in err and "--abandoned exclude" in err


def test_choose_path_routes_exact_only_choices():
    why = exact_only("exclude", "engine")
    assert list(why) == ["--abandoned exclude", "--prefill engine"]
    assert exact_only("include", "total") == {}
    auto = choose_path(30 * 86400, 3600, rule=boom, exact_only=why)
    assert auto.path == "exact" and "--abandoned exclude" in auto.reason and "--prefill engine" in auto.reason
    assert choose_path(30 * 86400, 3600, force="exact", exact_only=why).path == "exact"
    assert choose_path(30 * 86400, 3600, rule=FakeRunner().df("read_path", {"step_s": 3600}).iloc[0].to_dict()).path \
        == "rollup"
    with pytest.raises(ArgError, match=r"--prefill uncached cannot be answered with --rollup"):
        choose_path(30 * 86400, 3600, force="rollup", exact_only=exact_only("include", "uncached"))


@pytest.mark.parametrize("kind", ["bands", "latency"])
def test_defaults_include_abandoned_and_long_windows_still_use_the_rollup(kind):
    runner = FakeRunner()
    df, meta = run_query(runner, T0, T0 + 30 * DAY, 3600, kind=kind)
    assert meta["path"] == "rollup" and meta["abandoned"] == "include" and meta["prefill"] == "total"
    assert meta["abandoned_split"] is False
    [(name, params)] = runner.query()
    assert name == f"{kind}_rollup" and "abandoned" not in params and "prefill" not in params
    assert list(df.columns) == (BANDS_COLUMNS if kind == "bands" else LATENCY_COLUMNS)


@pytest.mark.parametrize("kw,reason", [({"abandoned": "exclude"}, "--abandoned exclude"),
                                       ({"prefill": "engine"}, "--prefill engine"),
                                       ({"prefill": "uncached"}, "--prefill uncached")])
def test_exact_only_choices_route_to_the_exact_path_with_bound_params(kw, reason):
    runner = FakeRunner()
    _, meta = run_query(runner, T0, T0 + 30 * DAY, 3600, **kw)
    assert meta["path"] == "exact" and reason in meta["reason"] and meta["abandoned_split"] is True
    [(name, params)] = runner.query()
    assert name == "bands_exact"
    assert params["abandoned"] == kw.get("abandoned", "include") and params["prefill"] == kw.get("prefill", "total")


def test_rebucket_and_latency_exact_get_the_abandoned_param():
    runner = FakeRunner()
    run_query(runner, T0, T0 + DAY, 600, edges="litellm", abandoned="exclude", prefill="engine")
    run_query(runner, T0, T0 + DAY, 600, kind="latency", force="exact", abandoned="exclude")
    (b_name, b), (l_name, lat) = runner.query()
    assert b_name == "bands_rebucket" and (b["abandoned"], b["prefill"]) == ("exclude", "engine")
    assert l_name == "latency" and lat["abandoned"] == "exclude" and "prefill" not in lat


def test_header_lines_say_what_is_included():
    base = {"kind": "bands", "prefill": "engine", "abandoned": "exclude", "abandoned_split": True}
    text = "\n".join(header_lines(base))
    assert "prefill = engine" in text and "queue" in text and "EXCLUDED" in text and "abandoned_prefill" in text
    text = "\n".join(header_lines({**base, "kind": "latency", "abandoned": "include", "abandoned_split": False}))
    assert "prefill =" not in text and "INCLUDED" in text and "not kept by the rollup" in text
