"""A ClickHouse HTTP request read: query parts, parameters, settings,
credentials, compression flags."""

from __future__ import annotations

import base64

import pytest

from phasemeter.store.sql_guard import ChError
from phasemeter.store.sql_request import parse

CAPS = {"max_execution_time": 120, "max_memory_usage": 2e9, "max_result_rows": 1e8, "max_result_bytes": 2e9,
        "max_threads": 2}


def test_url_part_first_then_body_and_the_protocols_parameters():
    req = parse([("query", "SELECT {m:String}"), ("param_m", "it's"), ("database", "db1"),
                 ("default_format", "JSON"), ("query_id", "q1"), ("session_id", "s"), ("compress", "1"),
                 ("enable_http_compression", "1"), ("client_protocol_version", "54460")], "FROM t", {}, CAPS)
    assert req.sql == "SELECT {m:String}\nFROM t" and req.params == {"m": "it's"}
    assert (req.database, req.default_format, req.query_id) == ("db1", "JSON", "q1")
    assert (req.compression, req.native_compression, req.protocol_revision) == (True, True, 54460)
    plain = parse([], "SELECT 1", {}, CAPS)
    assert (plain.default_format, plain.database, plain.settings, plain.protocol_revision) == (
        "TabSeparated", None, {}, 0)


def test_output_settings_and_lowered_limits_are_applied():
    req = parse([("output_format_json_quote_64bit_integers", "0"), ("max_execution_time", "34"),
                 ("max_result_rows", "10"), ("readonly", "1")], "SELECT 1", {}, CAPS)
    assert req.settings == {"output_format_json_quote_64bit_integers": "0", "max_execution_time": "34",
                            "max_result_rows": "10"}


@pytest.mark.parametrize("name,value", [("readonly", "0"), ("max_execution_time", "0"),
                                        ("max_execution_time", "121"), ("max_result_rows", "x"),
                                        ("allow_ddl", "1"), ("format_schema", "/etc/passwd"),
                                        ("max_memory_usage", "-1")])
def test_settings_that_lift_a_limit_or_are_unknown_are_refused(name, value):
    with pytest.raises(ChError) as err:
        parse([(name, value)], "SELECT 1", {}, CAPS)
    assert err.value.code == 164 and name in err.value.message


def test_an_empty_query_is_a_syntax_error():
    with pytest.raises(ChError) as err:
        parse([("query", " ")], "\n", {}, CAPS)
    assert err.value.code == 62


def test_credentials_from_basic_auth_headers_or_url():
    basic = {"authorization": "Basic " + base64.b64encode(b"u:p:q").decode()}
    assert (parse([], "SELECT 1", basic, CAPS).user, parse([], "SELECT 1", basic, CAPS).password) == ("u", "p:q")
    headers = {"x-clickhouse-user": "h", "x-clickhouse-key": "k"}
    assert (parse([], "SELECT 1", headers, CAPS).user, parse([], "SELECT 1", headers, CAPS).password) == ("h", "k")
    url = parse([("user", "a"), ("password", "b")], "SELECT 1", {}, CAPS)
    assert (url.user, url.password) == ("a", "b")
    with pytest.raises(ChError) as err:
        parse([], "SELECT 1", {"authorization": "Basic !!!"}, CAPS)
    assert err.value.code == 516
