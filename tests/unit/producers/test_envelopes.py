"""Packing events into envelopes (producers/envelopes.py)."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st
from kafka.partitioner.default import DefaultPartitioner

from phasemeter.producers.envelopes import ENVELOPE_MAX_BYTES, pack, partition_of


class Cluster:
    """The three calls DefaultPartitioner makes on kafka-python's ClusterMetadata."""

    def __init__(self, partitions):
        self.p = set(partitions)

    def topics(self):
        return {"t"}

    def partitions_for_topic(self, topic):
        return self.p

    def available_partitions_for_topic(self, topic):
        return self.p


def ev(i: int, v2: bool = False, key: bytes | None = None, pad: int = 0):
    return (json.dumps({"i": i, "pad": "x" * pad}).encode(), v2, key)


def unpack(out):
    return [(part, json.loads(body), n) for part, body, n in out]


def test_partition_of_is_the_default_partitioners_choice():
    for n in (1, 3, 4, 12):
        parts = list(range(n))
        for rid in ("a", "req-1", "9f1c" * 8, "ü-ß"):
            key = rid.encode()
            assert partition_of(key, parts) == DefaultPartitioner().partition("t", rid, key, None, None,
                                                                              Cluster(parts))


def test_generations_go_unkeyed_in_order_up_to_size():
    out = unpack(pack([ev(i) for i in range(5)], 2, None))
    assert [(p, [e["i"] for e in b["events"]], n) for p, b, n in out] == [
        (None, [0, 1], 2), (None, [2, 3], 2), (None, [4], 1)]
    assert all(b["schema_version"] == 1 and b["kind"] == "batch" for _, b, _ in out)


def test_one_v2_event_makes_its_envelope_v2_only():
    out = unpack(pack([ev(0), ev(1, v2=True), ev(2)], 2, None))
    assert [b["schema_version"] for _, b, _ in out] == [2, 1]


def test_phase_events_keep_their_keys_partition_and_order():
    parts = [0, 1, 2, 3]
    keys = [b"r1", b"r2", b"r1", b"r3", b"r2", b"r1"]
    entries = [ev(i, True, k) for i, k in enumerate(keys)]
    got = {}
    for part, body, _ in unpack(pack(entries, 100, parts)):
        got.setdefault(part, []).extend(e["i"] for e in body["events"])
    for k in set(keys):
        mine = [i for i, kk in enumerate(keys) if kk == k]
        seq = got[partition_of(k, parts)]
        assert [i for i in seq if keys[i] == k] == mine  # this key's events, in order, in its partition


def test_bytes_bound_an_envelope_before_the_count_does():
    entries = [ev(i, pad=1000) for i in range(40)]
    out = list(pack(entries, 1000, None, max_bytes=10_000))
    assert all(len(body) <= 10_000 for _, body, _ in out)
    assert sum(n for _, _, n in out) == 40 and len(out) > 1


def test_an_event_over_the_bound_still_goes_alone():
    (only,) = list(pack([ev(0, pad=20_000)], 100, None, max_bytes=10_000))
    assert only[2] == 1 and json.loads(only[1])["events"][0]["i"] == 0


@settings(max_examples=200)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from([None, b"a", b"b", b"c", b"d"]),
                          st.integers(0, 3000)), max_size=60),
       st.integers(1, 7), st.integers(2_000, 30_000))
def test_every_event_once_each_group_in_order_each_envelope_bounded(spec, size, max_bytes):
    entries = [ev(i, v2, key, pad) for i, (v2, key, pad) in enumerate(spec)]
    out = unpack(pack(entries, size, [0, 1, 2], max_bytes))
    seen = [e["i"] for _, b, _ in out for e in b["events"]]
    assert sorted(seen) == list(range(len(entries)))
    for part, body, n in out:
        assert n == len(body["events"]) <= size
        assert body["schema_version"] == (2 if any(spec[e["i"]][0] for e in body["events"]) else 1)
        for e in body["events"]:
            key = spec[e["i"]][1]
            assert part == (None if key is None else partition_of(key, [0, 1, 2]))
    by_part = {}
    for part, body, _ in out:
        by_part.setdefault(part, []).extend(e["i"] for e in body["events"])
    assert all(seq == sorted(seq) for seq in by_part.values())
    raw = list(pack(entries, size, [0, 1, 2], max_bytes))
    assert all(len(body) <= max_bytes or n == 1 for _, body, n in raw)


def test_the_default_bound_is_under_the_workers_message_limit():
    from phasemeter.settings import Settings

    assert ENVELOPE_MAX_BYTES < Settings.from_env({}).max_message_bytes
