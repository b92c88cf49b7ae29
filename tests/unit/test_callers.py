"""The Host check and the simple-request rule that every listener uses."""

from __future__ import annotations

import pytest

from phasemeter.callers import allowed_names, host_allowed, host_name, is_simple_request


@pytest.mark.parametrize("header,name", [
    ("127.0.0.1:6066", "127.0.0.1"), ("LOCALHOST", "localhost"), ("[::1]:80", "::1"), ("[::1]", "::1"),
    ("example.com", "example.com"), (None, None), ("", None), ("a:b", None), ("[::1", None), ("[::1]x", None),
])
def test_host_name(header, name):
    assert host_name(header) == name


def test_loopback_bind_answers_loopback_names_only():
    allowed = allowed_names("127.0.0.1", "")
    for ok in ("127.0.0.1:6066", "localhost:6066", "[::1]:6066", "127.0.0.2"):
        assert host_allowed(ok, allowed), ok
    for bad in ("evil.example:6066", "attacker.test", None, "", "localhost.evil.example"):
        assert not host_allowed(bad, allowed), bad


def test_configured_names_are_added():
    allowed = allowed_names("10.0.0.5", "metrics.internal, Grafana.Local")
    assert host_allowed("metrics.internal:8123", allowed)
    assert host_allowed("grafana.local", allowed)
    assert host_allowed("10.0.0.5:8123", allowed)
    assert not host_allowed("localhost", allowed)  # not on loopback: loopback names are not this listener
    assert not host_allowed("other.internal", allowed)


def test_star_allows_any_name():
    assert host_allowed("anything.example", allowed_names("0.0.0.0", "*"))


@pytest.mark.parametrize("method,ctype,simple", [
    ("POST", "text/plain", True), ("POST", "text/plain; charset=utf-8", True),
    ("POST", "application/x-www-form-urlencoded", True), ("POST", "multipart/form-data; boundary=x", True),
    ("POST", None, True), ("POST", "application/json", False), ("PUT", "text/plain", False),
    ("GET", None, True),
])
def test_simple_request(method, ctype, simple):
    assert is_simple_request(method, ctype) is simple
