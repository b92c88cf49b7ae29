"""Hostile NDJSON through `phasemeter emit` to a real Kafka broker: every
line is sent (and on the topic) or refused with a reason and counted; the
command exits 1 when any was refused, and a later good file flows."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from kafka_events import records_in, unwrap
from phasemeter.cli.main import main

pytestmark = pytest.mark.integration


def event(rid: str, **changes) -> dict:
    return {"schema_version": 1, "kind": "generation", "request_id": rid, "model": "m", "t0": time.time() - 60,
            "ttft_s": 0.1, "e2e_s": 1.0, "queue_s": None, "input_tokens": 10, "output_tokens": 5,
            "cached_input_tokens": None, "status": "ok", "finish_reason": None, "gateway": None, "replica": None,
            **changes}


def line(doc) -> bytes:
    return json.dumps(doc).encode()


# (line, refused?) in file order
CORPUS = [
    (b"\xef\xbb\xbf" + line(event("good-bom")), False),
    (line(event("bad-surrogate", model="m\ud800")), True),
    (line(event("bad-replica", replica="gpu\udfff")), True),
    (b'{"schema_version":1,"kind":"generation","t0":' + b"9" * 5000 + b"}", True),
    (b"[" * 50_000 + b"]" * 50_000, True),
    (b"\xff\xfe\x00garbage", True),
    (line(event("good-crlf")) + b"\r", False),
    (line(event("bad-prompt", prompt="never stored")), True),
    (line({"schema_version": 2, "kind": "batch", "events": [event("env-1"), event("env-2", input_tokens=-1)]}),
     True),
    (b"x" * 300_000, True),  # over PHASEMETER_MAX_MESSAGE_BYTES below
    (b"   ", False),  # blank: skipped, counted
    (line(event("good-last")), False),
]


def emit(capsys, monkeypatch, kafka_bootstrap, topic, path) -> tuple[int, dict]:
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    monkeypatch.setenv("PHASEMETER_TOPIC", topic)
    monkeypatch.setenv("PHASEMETER_MAX_MESSAGE_BYTES", "200000")
    rc = main(["emit", str(path), "--format", "json", "--timeout", "30", "--no-progress"])
    return rc, json.loads(capsys.readouterr().out)


def test_hostile_lines_are_refused_with_reasons_and_the_rest_is_stored(kafka_bootstrap, tmp_path, monkeypatch,
                                                                       capsys):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "data"))
    topic = f"emit-hostile-{uuid.uuid4().hex[:10]}"
    path = tmp_path / "hostile.ndjson"
    path.write_bytes(b"\n".join(data for data, _ in CORPUS) + b"\n")
    rc, s = emit(capsys, monkeypatch, kafka_bootstrap, topic, path)
    refused = sum(1 for _, bad in CORPUS if bad)
    assert rc == 1
    assert (s["lines"], s["blank"], s["refused"], s["sent"], s["failed"]) == (len(CORPUS), 1, refused, 3, 0)
    assert sum(s["reasons"].values()) == refused and set(s["reasons"]) <= {
        "not_utf8", "malformed_json", "absurd", "unknown_field", "negative", "oversize"}
    assert s["reasons"]["not_utf8"] >= 2 and s["reasons"]["unknown_field"] == 1 and s["reasons"]["oversize"] == 1
    stored = sorted(e["request_id"] for r in records_in(kafka_bootstrap, topic, at_least=3) for e in unwrap(r.value))
    assert stored == ["good-bom", "good-crlf", "good-last"]

    later = tmp_path / "later.ndjson"  # the command, and the topic, still take good input
    later.write_bytes(line(event("later-1")) + b"\n")
    rc, s = emit(capsys, monkeypatch, kafka_bootstrap, topic, later)
    assert (rc, s["sent"], s["refused"]) == (0, 1, 0)
    stored = sorted(e["request_id"] for r in records_in(kafka_bootstrap, topic, at_least=4) for e in unwrap(r.value))
    assert stored == ["good-bom", "good-crlf", "good-last", "later-1"]
