"""A dead letter keeps the reason, the field names and the values of the
contract's fields only: no prompt or response text, whatever was sent."""

from __future__ import annotations

import base64
import json

import pytest

from phasemeter.stream_jobs import dead_letter
from phasemeter.stream_jobs import reasons as R

SECRET = "SECRET prompt text: tell me everything"
SOURCE = {"src_topic": "t", "src_partition": 0, "src_offset": 4}


def kept(raw: bytes, cap: int = 100_000) -> str:
    return base64.b64decode(dead_letter.payload(raw, cap)).decode()


def test_unknown_fields_keep_their_names_and_lose_their_values():
    event = {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m", "t0": 1.5,
             "input_tokens": 3, "prompt": SECRET, "messages": [{"role": "user", "content": SECRET}],
             "completion": {"text": SECRET}}
    got = json.loads(kept(json.dumps(event).encode()))
    assert got == {**{k: event[k] for k in ("schema_version", "kind", "request_id", "model", "t0", "input_tokens")},
                   "prompt": None, "messages": None, "completion": None}


def test_an_envelope_and_the_joins_records_are_redacted_inside():
    envelope = {"schema_version": 2, "kind": "batch",
                "events": [{"kind": "start", "request_id": "a", "model": "m", "prompt": SECRET}, SECRET, [SECRET]]}
    got = json.loads(kept(json.dumps(envelope).encode()))
    assert got["events"] == [{"kind": "start", "request_id": "a", "model": "m", "prompt": None}, None, [None]]
    orphan = {"kind": "orphan", "reason": "orphan_phase", "detail": "end without start",
              "phases": {"end": {"output_tokens": 3, "text": SECRET}}}
    assert json.loads(kept(json.dumps(orphan).encode()))["phases"] == {"end": {"output_tokens": 3, "text": None}}
    phases = {"phases": [[1.0, {"kind": "end", "request_id": "a", "note": SECRET}]]}
    assert SECRET not in kept(json.dumps(phases).encode())


@pytest.mark.parametrize("value", [
    {"model": SECRET * 20},                      # longer than the label's limit (200)
    {"model": {"prompt": SECRET}},               # an object where a label belongs
    {"model": [SECRET]},                         # a list where a label belongs
    {"kinds": [SECRET]},                         # only phase kinds are kept in a note's kinds
    {SECRET * 10: 1},                            # a name is kept, cut at 64 characters
])
def test_a_known_field_keeps_only_a_short_scalar(value):
    text = kept(json.dumps(value).encode())
    assert SECRET not in text
    assert json.loads(kept(b'{"model": "m", "gateway": "' + b"g" * 200 + b'"}')) == {"model": "m", "gateway": "g" * 200}


@pytest.mark.parametrize("raw", [
    b'{"prompt": "' + SECRET.encode() + b'", "model": ',   # malformed JSON: nothing of it is kept
    b'["' + SECRET.encode() + b'"]', b'"' + SECRET.encode() + b'"',
    b"\xff" + SECRET.encode(), b'{"a":' * 50_000 + b"1" + b"}" * 50_000, b"", None,
    b'{"prompt": "\\ud800 ' + SECRET.encode() + b'"}',
])
def test_what_does_not_parse_as_an_object_keeps_nothing_but_its_size(raw):
    record = dead_letter.record(R.MALFORMED_JSON, "detail", raw, SOURCE, 1.0, 4096)
    assert SECRET not in base64.b64decode(record["payload"]).decode(errors="replace")
    assert record["payload_size"] == len(raw or b"")
    if raw is None or raw[:1] != b"{" or raw.startswith(b'{"prompt": "' + SECRET.encode() + b'", "model": '):
        assert record["payload"] == ""


def test_a_message_of_another_encoding_keeps_nothing_and_the_cap_holds():
    raw = json.dumps({"model": "m", "t0": 1.0, "x": SECRET}).encode()
    assert dead_letter.record(R.MALFORMED_OTLP, "d", raw, SOURCE, 1.0, 4096, parse=False)["payload"] == ""
    assert len(base64.b64decode(dead_letter.payload(raw, 10))) == 10
    cut = base64.b64decode(dead_letter.payload(json.dumps({"model": "é✓" * 20}).encode(), 11))
    assert cut.decode("ascii") == '{"model":"\\'  # cut anywhere, still text


def test_a_row_the_store_refused_keeps_its_contract_fields():
    row = {"ts": 5.0, "t0": 5.0, "request_id": "r", "model": "m", "prefill_tps": 3.0, **SOURCE}
    record = dead_letter.refused_row(row, 53, "Code: 53. Type mismatch", 9.0)
    assert record["reason"] == R.STORE_REFUSED and "code 53" in record["detail"]
    assert json.loads(base64.b64decode(record["payload"])) == {"t0": 5.0, "request_id": "r", "model": "m"}
    assert {k: record[k] for k in SOURCE} == SOURCE


def test_a_detail_never_carries_a_control_character():
    record = dead_letter.record(R.UNKNOWN_FIELD, "fields not in the v1 contract: \x1b]0;pwned\x07, a\nb",
                                None, SOURCE, 1.0, 0)
    assert record["detail"] == "fields not in the v1 contract: \\x1b]0;pwned\\x07, a\\nb".replace("\\n", "\\x0a")


def test_the_payload_is_the_cut_of_the_whole_message_redacted_whatever_parses_it():
    """Only the part of a message the cut keeps is parsed and redacted (an
    envelope's events one by one, msgspec where it can): the bytes are
    those of json.loads, redact and json.dumps of the whole, on what msgspec
    refuses too (NaN, 1E400, a lone surrogate) and on repeated keys."""
    event = {"schema_version": 1, "kind": "generation", "request_id": "r", "model": "m" * 201, "t0": 1.5,
             "prompt": SECRET, "finish_reason": "s" * 65, "gateway": "g", "input_tokens": 10 ** 30}
    messages = [json.dumps({"schema_version": 1, "kind": "batch", "events": [dict(event, request_id=f"r{i}")
                                                                          for i in range(60)]}).encode(),
                b'{"events":[{"t0":NaN,"model":"\\ud800"},{"t0":1E400}],"kind":"batch","kind":"x","x y":1}',
                json.dumps({"kinds": ["start", SECRET], "phases": {"end": event}, "detail": SECRET}).encode()]
    assert len(messages) == 3
    for raw in messages:
        whole = json.dumps(dead_letter.redact(json.loads(raw)), ensure_ascii=True, separators=(",", ":")).encode()
        for cap in (1, 7, 300, 4096, 100_000):
            assert base64.b64decode(dead_letter.payload(raw, cap)) == whole[:cap], (raw[:40], cap)


def test_an_event_refused_in_an_envelope_keeps_that_event_alone_redacted():
    """The dead letter of an envelope's event keeps that event, not the
    envelope's first bytes, which rarely reach it (events[37] starts ~10 kB in)."""
    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": 1.5,
               "prompt": SECRET, "input_tokens": 3} for i in range(60)]
    raw = json.dumps({"schema_version": 1, "kind": "batch", "events": events, "note": SECRET}).encode()
    assert raw.index(b'"r37"') > 4096
    kept = dead_letter.payloads(raw, 4096, [37, None, 59])
    assert len(kept) == 3 and kept[1] == dead_letter.payload(raw, 4096)  # None: the whole message's
    got = json.loads(base64.b64decode(kept[0]))
    assert got == {**{k: v for k, v in events[37].items() if k != "prompt"}, "prompt": None}
    assert json.loads(base64.b64decode(kept[2]))["request_id"] == "r59"
    record = dead_letter.record(R.IMPOSSIBLE_ORDER, "events[37]: x", raw, SOURCE, 1.0, 4096, kept=kept[0])
    assert record["payload"] == kept[0] and record["payload_size"] == len(raw)
    assert len(base64.b64decode(dead_letter.payloads(raw, 10, [37])[0])) == 10  # the cap still holds
    assert dead_letter.payloads(raw, 4096, [37], parse=False) == [""]


def test_a_messages_refused_events_locate_its_envelope_once(monkeypatch):
    """10,000 refused events of one envelope, each located in it alone,
    would walk the whole envelope 10,000 times."""
    events = [{"request_id": f"r{i}", "t0": 1.5, "prompt": SECRET} for i in range(300)]
    raw = json.dumps({"schema_version": 1, "kind": "batch", "events": events}).encode()
    walks = []
    located = dead_letter._events_of
    monkeypatch.setattr(dead_letter, "_events_of", lambda r: walks.append(1) or located(r))
    kept = dead_letter.payloads(raw, 4096, list(range(300)))
    assert len(kept) == 300 and len(walks) == 1
    assert [json.loads(base64.b64decode(k))["request_id"] for k in kept] == [f"r{i}" for i in range(300)]
    assert SECRET not in "".join(base64.b64decode(k).decode() for k in kept)


@pytest.mark.parametrize("raw, i, kept_any", [
    # what msgspec refuses (NaN, 1E400, a lone surrogate) is parsed as json.loads parses it
    (b'{"kind":"batch","events":[{"t0":NaN,"model":"\\ud800","x y":1},{"t0":1E400}]}', 0, True),
    (b'{"kind":"batch","events":[{"t0":1},{"t0":1E400,"prompt":"' + SECRET.encode() + b'"}]}', 1, True),
    (b'{"kind":"batch","events":["' + SECRET.encode() + b'"]}', 0, False),   # not an object: nothing kept
    (b'{"kind":"batch","events":[{"t0":1}]}', 3, False),                     # no such event
    (b'{"kind":"batch","events":{"0":{"t0":1}}}', 0, False),                # events not a list
    (b'{"kind":"batch","events":[{"t0":1}', 0, False),                       # malformed
])
def test_an_envelopes_event_is_kept_as_json_loads_reads_it_or_not_at_all(raw, i, kept_any):
    text = base64.b64decode(dead_letter.payloads(raw, 4096, [i])[0]).decode()
    assert SECRET not in text
    if kept_any:
        event = json.loads(raw)["events"][i]
        assert text == json.dumps(dead_letter.redact(event), ensure_ascii=True, separators=(",", ":"))
    else:
        assert text == ""


def test_a_generation_the_c_decoder_took_is_found_without_a_walk(monkeypatch):
    """Refused on columns (a range, an order), a Generation is found by its
    request_id: the same payloads, and the envelope is walked only for an
    event not found so (here, a brace in a text before the key)."""
    from phasemeter.stream_jobs.fast_decode import decoded_events

    events = [{"schema_version": 1, "kind": "generation", "request_id": f"r{i}", "model": "m", "t0": 1.8e9,
               "ttft_s": -1, "e2e_s": 1.0, "input_tokens": 3, "output_tokens": 2} for i in range(50)]
    events[7] = {"gateway": "a{b", **events[7]}
    raw = json.dumps({"schema_version": 1, "kind": "batch", "events": events}, separators=(",", ":")).encode()
    structs = decoded_events(raw, 10_000)
    walks = []
    located = dead_letter._events_of
    monkeypatch.setattr(dead_letter, "_events_of", lambda r: walks.append(1) or located(r))
    places = [3, None, 49]
    found = dead_letter.payloads(raw, 4096, places, taken=[structs[3], None, structs[49]])
    assert not walks
    assert found == dead_letter.payloads(raw, 4096, places) and len(walks) == 1
    assert dead_letter.payloads(raw, 4096, [7, 8], taken=[structs[7], structs[8]]) == \
        dead_letter.payloads(raw, 4096, [7, 8])
    assert len(walks) == 3
    assert dead_letter.payloads(raw, 0, [3], taken=[structs[3]]) == [""]
    assert dead_letter.payloads(raw, 4096, [3], parse=False, taken=[structs[3]]) == [""]
