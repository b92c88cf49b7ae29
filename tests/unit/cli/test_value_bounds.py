"""The CLI's value parsers: every out-of-range value is a clear error naming
the flag (exit 2, nothing created), and any string gives either a value within
the documented bounds or that error, never another exception (hypothesis)."""

from __future__ import annotations

import string
from datetime import datetime, timezone

import pytest
from hypothesis import given, settings as hsettings, strategies as st

from phasemeter.analytics.core import step_from
from phasemeter.cli.main import main
from phasemeter.stream_jobs.buckets import parse_edges
from phasemeter.timeparse import (MAX_DURATION_S, TIME_MAX, TIME_MIN, ArgError, parse_duration, parse_time,
                                  window)

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


@pytest.mark.parametrize("argv,needle", [
    (["query", "bands", "--from=-99999999999d"], "--from '-99999999999d'"),
    (["query", "bands", "--from=-1" + "0" * 400 + "s"], "--from"),
    (["query", "bands", "--to", "9999-12-31T23:59:59-01:00"], "--to"),
    (["query", "bands", "--from", "0001-01-01"], "--from '0001-01-01'"),
    (["query", "bands", "--step", "99999999999999999999d"], "--step '99999999999999999999d'"),
    (["query", "bands", "--step", "200000d"], "--step '200000d'"),
    (["latency", "--from=-99999999999d"], "--from"),
    (["slo", "--slos", "example", "--from=-99999999999d"], "--from"),
    (["dlq", "inspect", "--from=-99999999999d"], "--from"),
    (["alerts", "check", "--at=-99999999999d"], "--at"),
    (["alerts", "backtest", "--every", "99999999999999999999d"], "--every"),
])
def test_out_of_range_values_name_the_flag_and_exit_2(argv, needle, capsys, tmp_path):
    rc = main(argv + ["--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "data").exists()  # a refused command creates nothing


def test_bounds_are_inclusive_and_documented():
    assert parse_duration(f"{MAX_DURATION_S}s", "--step") == MAX_DURATION_S
    with pytest.raises(ArgError, match="--step"):
        parse_duration(f"{MAX_DURATION_S + 1}s", "--step")
    assert parse_time(TIME_MIN.isoformat(), "--from") == TIME_MIN
    with pytest.raises(ArgError, match="--to"):
        parse_time(TIME_MAX.isoformat(), "--to")


# Strings a user could type: durations, signs, digits, ISO-looking text, junk.
_typed = st.one_of(
    st.text(max_size=40),
    st.from_regex(r"\A-?[0-9]{1,30}(\.[0-9]{1,10})?[smhdwq]?\Z"),
    st.from_regex(r"\A[0-9]{1,6}-[0-9]{1,2}-[0-9]{1,2}([T ][0-9]{1,2}:[0-9]{2}(:[0-9]{2})?)?(Z|[+-][0-9]{2}:[0-9]{2})?\Z"),
    st.text(alphabet=string.digits + "-+.:TZsmhdw e", max_size=30),
)


@hsettings(max_examples=400)
@given(_typed)
def test_any_time_is_a_bounded_time_or_an_arg_error(text):
    try:
        value = parse_time(text, "--from", NOW)
    except ArgError as exc:
        assert "--from" in str(exc)
        return
    assert TIME_MIN <= value < TIME_MAX


@hsettings(max_examples=400)
@given(_typed)
def test_any_duration_is_bounded_or_an_arg_error(text):
    try:
        value = parse_duration(text, "--every")
    except ArgError as exc:
        assert "--every" in str(exc)
        return
    assert 0 < value <= MAX_DURATION_S


@hsettings(max_examples=300)
@given(_typed, _typed)
def test_any_window_and_step_is_valid_or_an_arg_error(start, step):
    try:
        t0, t1 = window(start, "now", NOW)
        step_s = step_from(step, t0, t1)
    except ArgError as exc:
        assert str(exc).startswith(("--from", "--to", "--step")), exc
        return
    assert TIME_MIN <= t0 < t1 < TIME_MAX
    assert isinstance(step_s, int) and 1 <= step_s <= MAX_DURATION_S < 2**32  # the queries bind a UInt32


@hsettings(max_examples=300)
@given(st.one_of(st.text(max_size=40), st.text(alphabet=string.digits + ",. -+e", max_size=40)))
def test_any_bucket_edges_are_edges_or_a_value_error(text):
    try:
        edges = parse_edges(text)
    except ValueError:
        return
    assert list(edges) == sorted(set(edges)) and all(isinstance(e, int) and e >= 0 for e in edges)


@pytest.mark.parametrize("query,param", [({"from": "-99999999999d"}, "from"), ({"to": "0001-01-01"}, "to"),
                                         ({"step": "99999999999999999999d"}, "step")])
def test_the_web_api_answers_400_naming_the_parameter(query, param):
    """/api/bands, /api/slo and /api/pools parse with the same functions: out of range is a
    400 naming the URL's parameter, before any store is asked (runner None)."""
    from phasemeter.analytics.live import bands, slo
    from phasemeter.analytics.live_pools import pools
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.stream_jobs.buckets import PRESETS, labels

    status, doc = bands(None, query, "default", NOW)
    assert status == 400 and doc["param"] == param, doc
    status, doc = slo(None, query, load_slos("example", labels(PRESETS["default"])), "default", NOW)
    assert status == 400 and doc["param"] == param, doc
    status, doc = pools(None, query, "default", NOW)
    assert status == 400 and doc["param"] == param, doc


@hsettings(max_examples=300)
@given(st.dictionaries(st.sampled_from(["from", "to", "step", "model", "bucket", "path", "abandoned", "prefill",
                                        "slo", "by", "x"]), _typed, max_size=6))
def test_any_web_api_query_is_parsed_or_a_bad_request_naming_a_parameter(query):
    """/api/bands', /api/slo's and /api/pools' query strings: a request for run_query, or a
    BadRequest naming the parameter (the endpoint's 400), nothing else."""
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.analytics.live import BadRequest, parse, parse_slo
    from phasemeter.analytics.live_pools import parse_pools
    from phasemeter.stream_jobs.buckets import PRESETS, labels

    sloset = load_slos("example", labels(PRESETS["default"]))
    for fn, args in ((parse, (query, NOW)), (parse_slo, (query, sloset, NOW)), (parse_pools, (query, NOW))):
        try:
            req = fn(*args)
        except BadRequest as exc:
            assert exc.param in set(query) | {"from", "to", "step", "path", "by", "slo"}, (exc.param, exc)
            continue
        assert TIME_MIN <= req["start"] < req["end"] < TIME_MAX
        assert req["step_s"] is None or 1 <= req["step_s"] <= MAX_DURATION_S


@pytest.mark.parametrize("argv,flag", [
    (["demo", "--seconds", "inf"], "--seconds"), (["demo", "--seconds", "nan"], "--seconds"),
    (["demo", "--seconds", "-5"], "--seconds"), (["demo", "--rate", "0"], "--rate"),
    (["demo", "--rate", "1e300"], "--rate"), (["worker", "--web-port", "70000"], "--web-port"),
    (["worker", "--web-port", "0"], "--web-port"), (["kafka", "start", "--port", "-1"], "--port"),
])
def test_numbers_out_of_range_are_argparse_errors_naming_the_flag(argv, flag, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(argv + ["--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and f"argument {flag}" in err and "from" in err, err
    assert not (tmp_path / "data").exists()


@hsettings(max_examples=300)
@given(st.one_of(st.text(max_size=30), st.from_regex(r"\A-?[0-9_]{0,400}(\.[0-9]*)?(e-?[0-9]{1,4})?\Z"),
                 st.sampled_from(["nan", "inf", "-inf", "1e309", "0x10", "1_0"])))
def test_any_number_flag_is_in_bounds_or_an_argparse_error(text):
    from phasemeter.cli.main import build_parser

    parser = build_parser()
    for argv, dest, lo, hi in ((["demo", "--rate", text], "rate", 1, 1_000_000),
                               (["demo", "--seconds", text], "seconds", 1, 86_400),
                               (["worker", "--web-port", text], "web_port", 1, 65_535)):
        try:
            value = getattr(parser.parse_args(argv), dest)
        except SystemExit as exc:
            assert exc.code == 2
            continue
        assert lo <= value <= hi


@pytest.mark.parametrize("edges", ["0,99999999999", "0,512,4294967296", "5,10", "0,10,10", "0,x", "0," + "9" * 5000])
def test_bucket_edges_out_of_range_are_argparse_errors_naming_the_flag(edges, capsys, tmp_path):
    with pytest.raises(SystemExit) as exc:
        main(["query", "bands", "--buckets", edges, "--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert exc.value.code == 2 and "argument --buckets" in err, err
    assert not (tmp_path / "data").exists()


@hsettings(max_examples=300)
@given(st.one_of(st.text(max_size=40), st.text(alphabet=string.digits + ",. -+e", max_size=60)))
def test_any_buckets_flag_is_bounded_edges_or_an_argparse_error(text):
    from phasemeter.cli.main import build_parser

    try:
        spec = build_parser().parse_args(["query", "bands", "--buckets", text]).buckets
    except SystemExit as exc:
        assert exc.code == 2
        return
    edges = parse_edges(spec)
    assert edges[0] == 0 and edges[-1] < 2**32  # input_tokens is a UInt32, and so are the query's edges
