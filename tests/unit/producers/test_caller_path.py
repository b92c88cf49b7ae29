"""The caller's path made cheaper without weakening a check: labels already
seen cost a set lookup (remembered only after the full rule passed, only
exact str, bounded), and request ids keep the uuid4 hex layout."""

from __future__ import annotations

import uuid

import pytest

from phasemeter.producers import checks as G
from phasemeter.producers.checks import BadArgument, check_outcome, check_request
from phasemeter.producers.encode import new_request_id


class Pretender:
    """Not a str, but hashes and compares equal to one."""

    def __init__(self, text):
        self.text = text

    def __hash__(self):
        return hash(self.text)

    def __eq__(self, other):
        return True


class Sly(str):
    """A str subclass that hashes and compares equal to a remembered label."""

    def __eq__(self, other):
        return True

    def __hash__(self):
        return hash("remembered-model")


def test_a_label_that_passed_is_remembered_per_field():
    check_request("caller-path-model", 1, None, None, "caller-path-replica")
    check_outcome(1, "ok", "caller-path-finish")
    assert "caller-path-model" in G._MODELS and "caller-path-replica" in G._REPLICAS
    assert "caller-path-finish" in G._FINISHES
    assert "caller-path-model" not in G._REPLICAS  # each field has its own limit, so its own set


@pytest.mark.parametrize("bad", ["gpu\x00", "gpu\x85x", "gpu\ud800", "", "x" * 10_000])
def test_a_refused_label_is_never_remembered_and_refused_every_time(bad):
    for _ in range(3):
        with pytest.raises(BadArgument):
            check_request(bad, 1, None, None, None)
    assert bad not in G._MODELS


def test_objects_equal_to_a_remembered_label_still_take_the_full_check():
    check_request("remembered-model", 1, None, None, None)
    assert "remembered-model" in G._MODELS
    with pytest.raises(BadArgument) as err:
        check_request(Pretender("remembered-model"), 1, None, None, None)
    assert err.value.reason == "wrong_type"
    with pytest.raises(BadArgument) as err:  # equal to everything, but its text has a control character
        check_request(Sly("bad\x1b"), 1, None, None, None)
    assert err.value.reason == "control_character"


def test_the_sets_are_bounded(monkeypatch):
    monkeypatch.setattr(G, "_SEEN_MAX", 3)
    monkeypatch.setattr(G, "_REPLICAS", set())
    for i in range(10):
        check_request("m", 1, None, None, f"bounded-replica-{i}")
    assert len(G._REPLICAS) == 3
    check_request("m", 1, None, None, "bounded-replica-9")  # past the bound: still checked, still admitted
    with pytest.raises(BadArgument):
        check_request("m", 1, None, None, "bounded\x7f")


def test_request_ids_are_uuid4_hex():
    ids = [new_request_id() for _ in range(2000)]
    assert len(set(ids)) == 2000
    for rid in ids:
        u = uuid.UUID(hex=rid)
        assert (u.hex, u.version, u.variant) == (rid, 4, uuid.RFC_4122)
