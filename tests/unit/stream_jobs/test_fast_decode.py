"""The worker's C decoder (stream_jobs/fast_decode.py), on the batch path's
code for one message (batch_decode.answer), against the full path
(derive.process_message): the same results for every message, and the
common message really decoded in C."""

from __future__ import annotations

import json
import random
from collections import Counter

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs.contract import PD_FIELDS, V2_ONLY, V2_OPTIONAL
from phasemeter.stream_jobs.derive import KNOWN, process_message
from phasemeter.stream_jobs.batch_decode import answer, decode
from phasemeter.stream_jobs.contract import MIN_T0, Rejection
from phasemeter.stream_jobs.fast_decode import PHASES, Generation, decoded_events, event_bytes, message_events
from phasemeter.stream_jobs.fast_decode import _TRIES, raw_events
from phasemeter.stream_jobs.phase_events import SPEC
from tests.corpus import NOW_REF, POISON, as_bytes
from tests.unit.stream_jobs.test_derive_properties import (BAD_VALUES, BUCKET, NOW, any_text_events, labels,
                                                           mutated, valid_events)

LIMIT = 1_000_000


def same(raw: bytes, now: float = NOW, max_batch: int = 10_000, internal: bool = False) -> list:
    full = process_message(raw, BUCKET, LIMIT, now, max_batch, internal)
    fast = answer(raw, BUCKET, LIMIT, now, max_batch, internal)
    assert fast == full, (raw[:300], full, fast)
    return fast


def in_c(raw: bytes, now: float = NOW, oldest: float = MIN_T0) -> bool:
    """Whether the message is the common one: every event decoded whole in C
    (`message_events` gives no full-path result) and none refused."""
    items, _ = message_events(raw, BUCKET, LIMIT, now, oldest=oldest)
    return all(type(x) in (Generation, *PHASES.values()) for x in items) and not any(
        type(r) is Rejection for r in answer(raw, BUCKET, LIMIT, now, oldest=oldest))


def envelope(events: list, version=1) -> bytes:
    return json.dumps({"schema_version": version, "kind": "batch", "events": events}).encode()


def test_the_struct_holds_the_v1_generation_fields_the_pd_fields_and_streamed():
    assert set(Generation.__struct_fields__) | {"kind"} == KNOWN | set(V2_ONLY)
    assert set(V2_ONLY) == set(PD_FIELDS) | {"streamed"}


PD_GEN = {"schema_version": 2, "kind": "generation", "request_id": "pd", "model": "m", "t0": NOW - 5,
          "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 5, "output_tokens": 9,
          "prefill_replica": "p-0", "decode_replica": "d-1", "kv_transfer_s": 0.25}


@pytest.mark.parametrize("change", [{}, {"kv_transfer_s": 0.5}, {"kv_transfer_s": None}, {"prefill_replica": None},
                                    {"ttft_s": None, "output_tokens": 0, "kv_transfer_s": 1.5}])
def test_a_v2_generation_with_pd_fields_is_decoded_in_c_with_the_same_row(change):
    event = {**PD_GEN, **change}
    for raw in (json.dumps(event).encode(), envelope([event], 2)):
        assert in_c(raw)
        row = same(raw)[0]
        assert isinstance(row, dict) and row["prefill_replica"] == (event["prefill_replica"] or "")
        assert row["kv_transfer_s"] == event["kv_transfer_s"]


@pytest.mark.parametrize("change,reason", [
    ({"kv_transfer_s": 0.51}, "inconsistent"),                              # longer than ttft_s
    ({"ttft_s": None, "output_tokens": 0, "kv_transfer_s": 2.5}, "inconsistent"),  # longer than e2e_s
    ({"kv_transfer_s": -0.1}, "negative"), ({"kv_transfer_s": "0.1"}, "wrong_type"),
    ({"decode_replica": ""}, "bad_value"), ({"decode_replica": "d\n"}, "control_character"),
])
def test_a_bad_pd_field_gets_the_full_paths_reason(change, reason):
    event = {**PD_GEN, **change}
    good = {**PD_GEN, "request_id": "ok"}
    assert [r.reason for r in same(json.dumps(event).encode())] == [reason]
    out = same(envelope([good, event, good], 2))
    assert len(out) == 3 and isinstance(out[0], dict) and out[1].reason == reason


@pytest.mark.parametrize("field", list(V2_ONLY))
@pytest.mark.parametrize("value", [None, "x", 0.1])
def test_a_v1_generation_naming_a_v2_only_field_is_the_full_paths_even_as_null(field, value):
    # That field alone: another one present would hide a miss of this one.
    event = {**{k: v for k, v in PD_GEN.items() if k not in V2_ONLY}, "schema_version": 1, field: value}
    for key in (field, "\\u00" + format(ord(field[0]), "x") + field[1:]):  # the name, and spelt with an escape
        raw = json.dumps(event).encode().replace(f'"{field}"'.encode(), f'"{key}"'.encode())
        assert not in_c(raw)
        assert [r.reason for r in same(raw)] == ["unknown_field"]
        out = same(envelope([{**PD_GEN, "schema_version": 1, **{f: None for f in V2_ONLY}} | {"request_id": "a"},
                             event], 1).replace(f'"{field}"'.encode(), f'"{key}"'.encode()))
        assert [getattr(r, "reason", None) for r in out] == ["unknown_field", "unknown_field"]


def test_the_phase_structs_hold_their_spec_fields_but_stall_and_pd_data():
    assert set(SPEC) == set(PHASES) == {"start", "first_token", "end"}
    for kind, (required, optional, either) in SPEC.items():
        names = {"schema_version", "request_id", *required, *optional, *either} - set(V2_OPTIONAL) - set(PD_FIELDS)
        assert set(PHASES[kind].__struct_fields__) == names


def test_kind_is_required_alone_and_in_an_envelope():
    event = {"schema_version": 1, "request_id": "r", "model": "m", "t0": NOW - 5, "ttft_s": 0.1, "e2e_s": 1.0,
             "input_tokens": 5, "output_tokens": 2}
    for raw in (json.dumps(event).encode(), envelope([event])):
        assert not in_c(raw)
        assert same(raw)[0].reason == "bad_kind"


@settings(max_examples=300)
@given(st.lists(valid_events(), min_size=1, max_size=5), st.sampled_from([1, 2]))
def test_common_messages_are_decoded_in_c_with_the_same_rows(events, version):
    for e in events:
        e["schema_version"] = version
    for raw in [json.dumps(e).encode() for e in events] + [envelope(events, version)]:
        assert in_c(raw), raw
        same(raw)


@pytest.mark.parametrize("internal", [False, True])
@pytest.mark.parametrize("name,payload,reason", POISON, ids=[p[0] for p in POISON])
def test_poison_gets_the_full_paths_reason(name, payload, reason, internal):
    raw = as_bytes(payload)
    assert not in_c(raw, NOW_REF)
    out = same(raw, NOW_REF, internal=internal)
    if not internal:  # the joined topic's own records may say orphan or abandoned
        assert [r.reason for r in out] == [reason]
    if isinstance(payload, dict):  # inside an envelope, between good events: only it is refused, by index
        good = {"schema_version": 1, "kind": "generation", "request_id": "ok", "model": "m", "t0": NOW_REF - 60,
                "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
        out = same(envelope([good, payload, good]), NOW_REF, internal=internal)
        assert out[0] == out[2] and isinstance(out[0], dict)
        if not internal:
            assert (out[1].reason, out[1].detail[:10]) == (reason, "events[1]:"), out[1]


@settings(max_examples=500)
@given(mutated(), st.booleans())
def test_mutated_events_alone_or_in_an_envelope(case, wrap):
    event, _ = case
    good = json.loads(json.dumps({"schema_version": 1, "kind": "generation", "request_id": "a", "model": "m",
                                  "t0": NOW - 10, "ttft_s": 0.1, "e2e_s": 1.0, "input_tokens": 5,
                                  "output_tokens": 3}))
    same(envelope([good, event]) if wrap else json.dumps(event).encode())


@settings(max_examples=300)
@given(any_text_events(), st.booleans())
def test_any_text_alone_or_in_an_envelope(event, wrap):
    same(envelope([event]) if wrap else json.dumps(event).encode())


@st.composite
def valid_phases(draw) -> list[dict]:
    """The three phases of one generation, each as an emitter may send it."""
    rid, t0 = draw(st.text(labels, min_size=1, max_size=20)), NOW - draw(st.floats(0, 3600))
    ttft, decode = draw(st.floats(0, 60)), draw(st.floats(0, 600))
    n_in = draw(st.integers(1, 100_000))
    start = {"schema_version": 2, "kind": "start", "request_id": rid, "model": draw(st.text(labels, min_size=1, max_size=20)),
             "t0": t0, "input_tokens": n_in}
    for name, value in (("cached_input_tokens", st.integers(0, n_in)), ("queue_s", st.floats(0, 1)),
                        ("gateway", st.text(labels, min_size=1, max_size=8)), ("replica", st.none())):
        if draw(st.booleans()):
            start[name] = draw(value)
    first = {"schema_version": 2, "kind": "first_token", "request_id": rid}
    first.update({"ttft_s": ttft} if draw(st.booleans()) else {"t_first": t0 + ttft})
    end = {"schema_version": 2, "kind": "end", "request_id": rid, "output_tokens": draw(st.integers(0, 50_000))}
    end.update({"e2e_s": ttft + decode} if draw(st.booleans()) else {"t_end": t0 + ttft + decode})
    for name, value in (("status", st.sampled_from(["ok", "error", "cancelled", None])),
                        ("finish_reason", st.text(labels, min_size=1, max_size=8)), ("ttft_s", st.just(ttft)),
                        ("queue_s", st.floats(0, 0.5)), ("cached_input_tokens", st.integers(0, 10))):
        if draw(st.booleans()):
            end[name] = draw(value)
    if draw(st.integers(0, 5)) == 0:  # stall data: the full path's alone
        end.update({"chunks": 3, "max_gap_s": 0.1})
    return [start, first, end]


@settings(max_examples=300)
@given(valid_phases(), valid_events())
def test_phases_are_decoded_in_c_with_the_same_results(phases, event):
    stall = "chunks" in phases[2]
    messages = [(json.dumps(p).encode(), stall and p["kind"] == "end") for p in phases]
    for raw, full_path in messages + [(envelope(phases + [event], 2), stall)]:
        assert (not in_c(raw)) == full_path, raw
        same(raw)
        same(raw, internal=True)


@settings(max_examples=400)
@given(valid_phases(), st.integers(0, 2), st.sampled_from(["set", "drop", "add"]), st.data())
def test_mutated_phases_alone_or_in_an_envelope(phases, which, how, data):
    phase = phases[which]
    if how == "drop":
        phase.pop(data.draw(st.sampled_from(sorted(phase))))
    else:
        names = sorted(phase) + ["t_first", "ttft_s", "e2e_s", "t_end", "status", "model", "chunks", "kind"]
        key = data.draw(st.text(min_size=1, max_size=12) if how == "add" else st.sampled_from(names))
        phase[key] = data.draw(st.one_of(BAD_VALUES, st.sampled_from(["start", "end", "first_token", 2, 1])))
    same(json.dumps(phase).encode())
    same(envelope(phases, data.draw(st.sampled_from([1, 2]))))


# JSON spellings json.dumps never writes but a gateway in another language
# may: 5.0 or 5e0 for 5, exponents, \u escapes in names and strings, white
# space, a key given twice (the last one counts), -0.
def _spell(value, rnd: random.Random) -> str:
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return rnd.choice([str(value), f"{value}.0", f"{value}e0", f"{value}E+0", f"{value * 10}e-1"])
    if isinstance(value, float):
        return rnd.choice([repr(value), f"{value:.17e}", f"{value:.3f}", json.dumps(value)])
    if isinstance(value, str):
        if value and rnd.random() < 0.5:
            i = rnd.randrange(len(value))
            if not 0xD800 <= ord(value[i]) <= 0xDFFF and ord(value[i]) < 0x10000:
                return json.dumps(value[:i]) [:-1] + f"\\u{ord(value[i]):04x}" + json.dumps(value[i + 1:])[1:]
        return json.dumps(value, ensure_ascii=rnd.random() < 0.5)
    if isinstance(value, list):
        return "[" + ",".join(_spell(v, rnd) for v in value) + "]"
    ws = rnd.choice(["", " ", "\n\t "])
    parts = []
    for key, item in value.items():
        if rnd.random() < 0.1:  # the same key first with another value
            parts.append(f"{_spell(key, rnd)}:{_spell(rnd.choice([None, -1, 'x', 1.5, 0]), rnd)}")
        parts.append(f"{_spell(key, rnd)}{ws}:{ws}{_spell(item, rnd)}")
    return "{" + ws + ("," + ws).join(parts) + ws + "}"


# 200 examples: 600 took 27 s of the full suite on two busy cores.
@settings(max_examples=200)
@given(st.lists(st.one_of(valid_events(), mutated().map(lambda c: c[0]), valid_phases().map(lambda p: p[0]),
                          valid_phases().map(lambda p: p[2])), min_size=1, max_size=4),
       st.booleans(), st.randoms(use_true_random=False))
def test_other_spellings_of_the_same_json(events, wrap, rnd):
    text = _spell({"schema_version": 1, "kind": "batch", "events": events} if wrap else events[0], rnd)
    same(text.encode())


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(raw):
    same(raw)


@settings(max_examples=100)
@given(st.lists(valid_events(), min_size=1, max_size=6), valid_phases(), st.integers(1, 9))
def test_envelope_limits_and_clock(events, phases, max_batch):
    for raw in (envelope(events + phases), envelope(phases), envelope(events)):
        same(raw, max_batch=max_batch)
        # clocks behind the events: within a day (accepted), over a day (too far ahead)
        same(raw, now=NOW - 7200)
        same(raw, now=NOW - 90_000)


DEEP = 50_000


@pytest.mark.parametrize("raw", [
    b'{"a":' * DEEP + b"1" + b"}" * DEEP,                                        # objects: msgspec raised RecursionError
    b"[" * DEEP + b"]" * DEEP,
    b'{"schema_version":1,"kind":"batch","events":[' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"]}",
    b'{"schema_version":1,"kind":"generation","model":' + b'{"a":' * DEEP + b"1" + b"}" * DEEP + b"}",
], ids=["objects", "arrays", "in an envelope", "in a field"])
def test_json_nested_50000_deep_is_malformed_json_on_every_path(raw):
    from types import SimpleNamespace

    [result] = same(raw)
    assert result.reason == "malformed_json"
    message = SimpleNamespace(topic="t", partition=0, offset=0)
    assert decode([SimpleNamespace(value=raw, message=message)], BUCKET, LIMIT, NOW).refused == [(0, result)]


@pytest.mark.parametrize("wrap", [False, True])
def test_the_retention_bound_gives_the_full_paths_reason(wrap):
    """An event older than the store keeps (`oldest`) takes the full path,
    which names it outside_retention; a phase is not bound (its joined
    generation is)."""
    oldest = NOW - 90 * 86_400
    good = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": oldest,
            "ttft_s": 0.1, "e2e_s": 1.0, "input_tokens": 5, "output_tokens": 2}
    old = {**good, "request_id": "o", "t0": oldest - 0.001}
    for events, reasons in (([good], [None]), ([old], ["outside_retention"]), ([good, old], [None, "outside_retention"])):
        if not wrap and len(events) > 1:
            continue
        raw = envelope(events) if wrap else json.dumps(events[0]).encode()
        full = process_message(raw, BUCKET, LIMIT, NOW, oldest=oldest)
        fast = answer(raw, BUCKET, LIMIT, NOW, oldest=oldest)
        assert fast == full
        assert [getattr(r, "reason", None) for r in fast] == reasons
        assert (in_c(raw, oldest=oldest)) == (reasons == [None])


CONTROLS = ["\x00", "\x1b[2J", "\x1b]0;pwned\x07", "\r\n", "\t", "\x7f", "\x85", "\x9b31m"]
GOOD_GEN = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": NOW - 60,
            "ttft_s": 0.1, "e2e_s": 1.0, "input_tokens": 5, "output_tokens": 2, "finish_reason": "stop",
            "gateway": "gw", "replica": "r1"}
GOOD_START = {"schema_version": 2, "kind": "start", "request_id": "p", "model": "m", "t0": NOW - 60,
              "input_tokens": 5, "gateway": "gw", "replica": "r1"}


@pytest.mark.parametrize("control", CONTROLS, ids=repr)
@pytest.mark.parametrize("field", ["model", "request_id", "finish_reason", "gateway", "replica"])
def test_a_label_with_a_control_character_is_refused_on_every_path(field, control):
    from types import SimpleNamespace

    bad = {**GOOD_GEN, "request_id": "b", field: "x" + control + "y"}
    for raw in (json.dumps(bad).encode(), json.dumps(bad, ensure_ascii=False).encode(),
                envelope([GOOD_GEN, bad])):
        out = same(raw)
        assert out[-1].reason == "control_character" and field in out[-1].detail
        message = SimpleNamespace(topic="t", partition=0, offset=0)
        assert decode([SimpleNamespace(value=raw, message=message)], BUCKET, LIMIT, NOW).refused[-1][1] == out[-1]
    if field != "finish_reason":
        phase = {**GOOD_START, field: "x" + control + "y"}
        for raw in (json.dumps(phase).encode(), envelope([GOOD_START, phase], version=2)):
            assert same(raw)[-1].reason == "control_character"


def test_printable_text_in_every_script_is_a_label():
    for label in ("llama-3.1-8b", "modèle é", "模型", "emoji 🧪‍🔬", "a b", "\u00a0nbsp", "zero\u200dwidth"):
        raw = json.dumps({**GOOD_GEN, "model": label}).encode()
        assert isinstance(same(raw)[0], dict), label
        assert in_c(raw)  # and still decoded in C


BRACES = st.text(st.sampled_from('ab{}"\\ :,é'), min_size=1, max_size=12)


@settings(max_examples=300)
@given(st.lists(st.tuples(valid_events(), st.one_of(st.none(), BRACES), st.booleans()), min_size=1, max_size=8),
       st.data())
def test_an_envelopes_generation_is_found_by_its_request_id_or_not_at_all(drawn, data):
    """event_bytes gives the bytes raw_events gives for that event, or an event
    equal to it, or None: never another event's. Texts may hold braces and
    quotes, copies of a request_id may differ, and spacing may vary."""
    events = []
    for event, text, copy in drawn:
        if text is not None:
            event["model"] = text
        if copy and events:  # the same request_id as an earlier event, with other values
            event["request_id"] = events[-1]["request_id"]
        events.append(event)
    spaced = data.draw(st.booleans())
    raw = json.dumps({"schema_version": 1, "kind": "batch", "events": events},
                     separators=(", ", ": ") if spaced else (",", ":"), ensure_ascii=data.draw(st.booleans())).encode()
    structs, parts = decoded_events(raw, 10_000), raw_events(raw)
    assert structs is not None and len(parts) == len(events)
    found = 0
    for e, part in zip(structs, parts, strict=True):
        span = event_bytes(raw, e)
        if span is not None:
            found += 1
            assert span == bytes(part) or msgspec.json.decode(span, type=Generation) == e, (span, bytes(part))
    plain = all(v.isascii() and not set(v) & set('{}"\\') for e in events for v in e.values() if type(v) is str)
    copies = max(Counter(e["request_id"] for e in events).values())
    if plain and not spaced and copies <= _TRIES:
        assert found == len(events)  # plain texts, compact JSON, each copy within the tries: every event is found


def test_a_brace_in_a_text_or_a_spaced_key_is_left_to_raw_events():
    event = {"schema_version": 1, "kind": "generation", "request_id": "r", "model": "m", "t0": NOW - 5,
             "e2e_s": 1.0, "input_tokens": 1, "output_tokens": 1, "gateway": "g"}

    def sent(e: dict, colon: str = ":") -> bytes:
        return json.dumps({"schema_version": 1, "kind": "batch", "events": [e]}, separators=(",", colon)).encode()
    before = {"gateway": "a{b", **{k: v for k, v in event.items() if k != "gateway"}}
    # a `{` in a text before the key, a `}` in a text after it, a space after a colon
    for raw in (sent(before), sent({**event, "gateway": "a}b"}), sent(event, ": ")):
        (e,) = decoded_events(raw, 10_000)
        assert event_bytes(raw, e) is None, raw
    for e in (event, {**event, "gateway": "a{b"}, {**before, "gateway": "a}b"}):  # a brace on the other side
        (struct,) = decoded_events(sent(e), 10_000)
        assert json.loads(event_bytes(sent(e), struct)) == e
