"""`phasemeter emit`: NDJSON files and stdin -> Kafka, checked line by line
with the worker's validation. Counts and file:line numbers are exact; one
test goes through the real broker and reads the topic back."""

from __future__ import annotations

import io
import json
import os
import socket
import subprocess
import sys
import uuid

import pytest
from corpus import event, phase  # tests/corpus.py: events valid apart from the flaw asked for

from phasemeter.cli.main import main
from ports import free_port


def j(obj) -> bytes:
    return json.dumps(obj).encode()


# line -> what the worker makes of it; line 9 ends in CRLF, line 12 has no newline.
MIXED_LINES = [
    j(event(request_id="g1")),                                                       # 1 valid
    b"",                                                                             # 2 blank
    j(phase("start", request_id="p1")),                                              # 3 valid
    b'{"schema_version": 1, "kind": ',                                               # 4 malformed_json
    j({"schema_version": 2, "kind": "batch",
       "events": [phase("first_token", request_id="p1"), event(request_id="g3")]}),  # 5 valid, 2 events
    b"   ",                                                                          # 6 blank
    b'{"model": "\xff\xfe"}',                                                        # 7 not_utf8
    j(event(request_id="g4", t0=...)),                                               # 8 missing_field
    j(event(request_id="g2")),                                                       # 9 valid (CRLF)
    j({"schema_version": 2, "kind": "batch",
       "events": [event(request_id="g5", model=""), phase("end", output_tokens=...)]}),  # 10 bad_value +1
    b"[1, 2]",                                                                       # 11 not_object
    j(phase("end", request_id="p1")),                                                # 12 valid, no newline
]
MIXED = b"".join(line + (b"\r\n" if i == 8 else b"\n" if i < 11 else b"")
                 for i, line in enumerate(MIXED_LINES))
VALID = [1, 3, 5, 9, 12]
REFUSED = [("4", "malformed_json"), ("7", "not_utf8"), ("8", "missing_field"), ("10", "bad_value"),
           ("11", "not_object")]


@pytest.fixture
def env(monkeypatch, tmp_path):
    """No broker unless a test names one; a topic of its own."""
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("PHASEMETER_TOPIC", f"emit-{uuid.uuid4().hex[:10]}")
    for name in ("KAFKA_BOOTSTRAP_SERVERS", "PHASEMETER_MAX_MESSAGE_BYTES", "PHASEMETER_BUCKET_EDGES"):
        monkeypatch.delenv(name, raising=False)
    return tmp_path


def emit(capsys, *argv) -> tuple[int, dict | str, str]:
    rc = main(["emit", *argv])
    out, err = capsys.readouterr()
    return rc, (json.loads(out) if "--format" in argv and "json" in argv else out), err


def write(tmp_path, name: str, data: bytes) -> str:
    path = tmp_path / name
    path.write_bytes(data)
    return str(path)


def test_good_file_dry_run_exit_0(env, capsys):
    path = write(env, "good.ndjson", b"".join(j(event(request_id=f"r{i}")) + b"\n" for i in range(50)))
    rc, s, _ = emit(capsys, path, "--dry-run", "--format", "json")
    assert rc == 0
    assert {k: s[k] for k in ("lines", "blank", "valid", "events", "refused", "sent", "failed")} == \
        {"lines": 50, "blank": 0, "valid": 50, "events": 50, "refused": 0, "sent": 0, "failed": 0}
    assert s["dry_run"] is True and s["refused_lines"] == [] and s["reasons"] == {}


def test_mixed_file_counts_and_line_numbers_are_exact(env, capsys):
    path = write(env, "mixed.ndjson", MIXED)
    rc, s, _ = emit(capsys, path, "--dry-run", "--format", "json")
    assert rc == 1
    assert (s["lines"], s["blank"], s["valid"], s["events"], s["refused"]) == (12, 2, 5, 6, 5)
    assert [(r["where"], r["reason"]) for r in s["refused_lines"]] == [(f"{path}:{n}", why) for n, why in REFUSED]
    assert s["refused_lines"][3]["more"] == 1 and s["refused_lines"][3]["detail"].startswith("events[0]")
    assert s["reasons"] == {"bad_value": 1, "malformed_json": 1, "missing_field": 2, "not_object": 1, "not_utf8": 1}


def test_text_summary_caps_the_list_but_not_the_counts(env, capsys):
    path = write(env, "bad.ndjson", b"".join(j(event(request_id=f"r{i}", model="")) + b"\n" for i in range(30))
                 + j(event()) + b"\n")
    rc, out, _ = emit(capsys, path, "--dry-run", "--show", "5")
    assert rc == 1
    assert out.splitlines()[0] == \
        "phasemeter emit: 31 lines read (0 blank), 1 valid (dry run: nothing sent), 30 refused"
    listed = [ln for ln in out.splitlines() if ln.startswith(f"  {path}:")]
    assert [ln.split()[0] for ln in listed] == [f"{path}:{n}" for n in range(1, 6)]
    assert "  ... and 25 more (--show N lists more)" in out and "refused events by reason: bad_value=30" in out


@pytest.mark.parametrize("argv", [[], ["-"]])
def test_stdin_in_process(env, capsys, monkeypatch, argv):
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(MIXED)))
    rc, s, _ = emit(capsys, *argv, "--dry-run", "--format", "json")
    assert rc == 1 and (s["lines"], s["valid"], s["refused"]) == (12, 5, 5)
    assert [r["where"] for r in s["refused_lines"]] == [f"<stdin>:{n}" for n, _ in REFUSED]


def test_stdin_through_a_real_pipe(env):
    proc = subprocess.run([sys.executable, "-m", "phasemeter", "emit", "--dry-run", "--format", "json"],
                          input=MIXED, capture_output=True, timeout=60, env={**os.environ})
    assert proc.returncode == 1, proc.stderr
    s = json.loads(proc.stdout)
    assert (s["lines"], s["blank"], s["valid"], s["refused"]) == (12, 2, 5, 5)
    assert b"\r" not in proc.stderr  # stderr is a pipe here: no progress line


def test_several_files_in_order_with_their_own_line_numbers(env, capsys):
    a = write(env, "a.ndjson", b"\n" + j(event(model="")) + b"\n")
    b = write(env, "b.ndjson", j(event()) + b"\nnope\n")
    rc, s, _ = emit(capsys, a, b, "--dry-run", "--format", "json")
    assert rc == 1 and s["lines"] == 4 and s["valid"] == 1
    assert [r["where"] for r in s["refused_lines"]] == [f"{a}:2", f"{b}:2"]


def test_huge_line_is_oversize_and_the_count_goes_on(env, capsys, monkeypatch):
    monkeypatch.setenv("PHASEMETER_MAX_MESSAGE_BYTES", "2048")
    huge = j(event(model="m" * 3_000_000))
    path = write(env, "huge.ndjson", j(event(request_id="a")) + b"\n" + huge + b"\n" + j(event(request_id="b")))
    rc, s, _ = emit(capsys, path, "--dry-run", "--format", "json")
    assert rc == 1 and (s["lines"], s["valid"], s["refused"]) == (3, 2, 1)
    assert s["refused_lines"] == [{"where": f"{path}:2", "reason": "oversize",
                                   "detail": f"{len(huge)} bytes > limit 2048"}]


@pytest.mark.parametrize("argv, flag", [
    (["--show", "-1"], "--show"), (["--timeout", "0"], "--timeout"), (["--timeout", "inf"], "--timeout"),
    (["--topic", "no spaces"], "--topic"),
    (["-", "-"], "'-'"), (["{tmp}"], "is a directory"), (["{tmp}/good.ndjson", "{tmp}/missing.ndjson"], "missing"),
])
def test_bad_flags_and_missing_files_exit_2_before_anything_is_sent(env, capsys, argv, flag):
    write(env, "good.ndjson", j(event()) + b"\n")
    argv = [a.replace("{tmp}", str(env)) for a in argv]
    # A socket that listens and never answers in Kafka's protocol: the kernel
    # queues any connection to it, so an attempt to reach the broker would
    # be in its accept queue afterwards (seen by cause, not by a stopwatch).
    with socket.socket() as broker:
        broker.bind(("127.0.0.1", 0))
        broker.listen(8)
        nowhere = ["--bootstrap-servers", f"127.0.0.1:{broker.getsockname()[1]}"]
        rc = main(["emit", *argv, *nowhere, *([] if "--timeout" in argv else ["--timeout", "5"])])
        out, err = capsys.readouterr()
        assert rc == 2 and flag in err and out == ""
        broker.setblocking(False)
        with pytest.raises(BlockingIOError):
            broker.accept()  # nobody connected


@pytest.mark.parametrize("argv", [["--format", "xml"], ["--show", "many"], ["--nope"]])
def test_argparse_errors_exit_2(env, capsys, argv):
    with pytest.raises(SystemExit) as exc:
        main(["emit", *argv])
    assert exc.value.code == 2 and argv[0] in capsys.readouterr().err


def test_no_broker_configured_or_reachable_exit_1_nothing_read(env, capsys):
    path = write(env, "good.ndjson", j(event()) + b"\n")
    rc, out, err = emit(capsys, path)
    assert rc == 1 and "no Kafka" in err and out == ""
    rc, out, err = emit(capsys, path, "--bootstrap-servers", f"127.0.0.1:{free_port()}", "--timeout", "0.2")
    assert rc == 1 and "cannot connect to Kafka" in err and "nothing sent" in err and out == ""


def test_progress_line_only_on_a_terminal(env, capsys, monkeypatch):
    path = write(env, "good.ndjson", j(event()) + b"\n")

    class Tty(io.StringIO):
        def isatty(self):
            return True

    for stream, shown in ((Tty(), True), (io.StringIO(), False)):
        monkeypatch.setattr(sys, "stderr", stream)
        assert main(["emit", path, "--dry-run"]) == 0
        text = stream.getvalue()
        assert ("\r" in text and "1 lines" in text and "100.0%" in text) is shown
        assert text.endswith("\r\x1b[K") is shown
    monkeypatch.setattr(sys, "stderr", tty := Tty())
    main(["emit", path, "--dry-run", "--no-progress"])
    assert tty.getvalue() == ""


@pytest.mark.integration
def test_round_trip_through_the_real_broker(env, capsys, monkeypatch, kafka_bootstrap):
    from kafka import KafkaConsumer, TopicPartition

    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", kafka_bootstrap)
    topic = os.environ["PHASEMETER_TOPIC"]
    path = write(env, "mixed.ndjson", MIXED)
    assert main(["emit", path, str(env / "missing.ndjson")]) == 2  # refused whole: nothing sent
    capsys.readouterr()
    rc, s, _ = emit(capsys, path, "--format", "json")
    assert rc == 1 and (s["valid"], s["sent"], s["failed"], s["refused"]) == (5, 5, 0, 5)
    assert s["topic"] == topic and s["dry_run"] is False

    keys = {1: b"g1", 3: b"p1", 5: None, 9: b"g2", 12: b"p1"}  # request_id, none for an envelope
    want = [(keys[n], MIXED_LINES[n - 1]) for n in VALID]  # byte for byte, without the CRLF
    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    try:
        got = []
        for record in consumer:
            got.append((record.key, record.value))
            if len(got) == len(want):
                break
        parts = [TopicPartition(topic, p) for p in consumer.partitions_for_topic(topic)]
        in_topic = sum(consumer.end_offsets(parts).values())
    finally:
        consumer.close()
    assert sorted(got, key=repr) == sorted(want, key=repr) and in_topic == len(want)


def test_a_line_the_store_would_not_keep_is_refused_before_sending(env, capsys, monkeypatch):
    """The worker dead-letters an event older than the raw TTL
    (outside_retention); emit says so at once, dry run or not, instead of
    "sent" for an event that can never be stored."""
    import time

    monkeypatch.setenv("PHASEMETER_RAW_TTL_DAYS", "30")
    old = time.time() - 31 * 86_400
    path = write(env, "backfill.ndjson", j(event(request_id="kept")) + b"\n"
                 + j(event(request_id="gone", t0=old)) + b"\n"
                 + j({"schema_version": 2, "kind": "batch",
                      "events": [event(request_id="e1"), event(request_id="e2", t0=old)]}) + b"\n")
    rc, s, _ = emit(capsys, path, "--dry-run", "--format", "json")
    assert rc == 1 and (s["valid"], s["refused"]) == (1, 2)
    assert [(r["where"], r["reason"]) for r in s["refused_lines"]] == \
        [(f"{path}:2", "outside_retention"), (f"{path}:3", "outside_retention")]
    monkeypatch.setenv("PHASEMETER_RAW_TTL_DAYS", "60")  # kept 60 days: every line is valid
    rc, s, _ = emit(capsys, path, "--dry-run", "--format", "json")
    assert rc == 0 and (s["valid"], s["refused"]) == (3, 0)
