"""Hostile inputs against the real OTLP/HTTP receiver and a real Kafka
broker. For each: every span sent is stored, or refused to the sender with a
count (partial success) or a whole-request refusal the sender can act on
(4xx, or 503 to retry); nothing of a refused request is half-sent; the
receiver keeps serving, and a later good request flows."""

from __future__ import annotations

import gzip
import json
import socket
import time
import urllib.error
import urllib.request
import uuid
import zlib

import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from phasemeter.integrations.otlp_receiver import Receiver
from ports import free_port
from phasemeter.producers import Meter
from test_otlp_receiver import topic_messages

pytestmark = pytest.mark.integration

JS, PB = "application/json", "application/x-protobuf"
VLLM = {"gen_ai.response.model": "llama-3.1-8b", "gen_ai.usage.prompt_tokens": 1500,
        "gen_ai.usage.completion_tokens": 120, "gen_ai.latency.time_to_first_token": 0.21,
        "gen_ai.latency.e2e": 2.4}


def kv(key, value):
    if type(value) is int:
        return {"key": key, "value": {"intValue": str(value)}}
    if type(value) is float:
        return {"key": key, "value": {"doubleValue": value}}
    if type(value) is list:
        return {"key": key, "value": {"arrayValue": {"values": [{"stringValue": v} for v in value]}}}
    return {"key": key, "value": {"stringValue": value}}


def span(rid: str, start=None, **attrs) -> dict:
    start = time.time_ns() - 60 * 10**9 if start is None else start
    a = {**VLLM, "gen_ai.request.id": rid, **attrs}
    return {"traceId": "5b8efff798038103d269b633813fc60c", "spanId": uuid.uuid4().hex[:16], "name": "llm_request",
            "startTimeUnixNano": str(start), "endTimeUnixNano": str(start + 2_400_000_000) if type(start) is int
            else start, "attributes": [kv(k, v) for k, v in a.items()]}


def request(spans: list[dict], resource: dict | None = None) -> dict:
    res = {"attributes": [kv(k, v) for k, v in (resource or {}).items()]}
    return {"resourceSpans": [{"resource": res, "scopeSpans": [{"spans": spans}]}]}


def body_of(req: dict) -> bytes:
    # ensure_ascii: a lone surrogate travels as the escape "\ud800", as a JSON exporter writes it
    return json.dumps(req).encode()


def post(url: str, body: bytes, content_type: str = JS, **headers) -> tuple[int, dict, bytes]:
    req = urllib.request.Request(url, data=body, method="POST", headers={"Content-Type": content_type, **headers})
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, dict(resp.headers), resp.read()
    except urllib.error.HTTPError as exc:
        return exc.code, dict(exc.headers), exc.read()


def pb_request(rids: list[str]) -> bytes:
    from google.protobuf.json_format import ParseDict

    req = request([span(r) for r in rids])
    for s in req["resourceSpans"][0]["scopeSpans"][0]["spans"]:  # proto3 JSON: ids in base64, not OTLP's hex
        s["traceId"] = s["spanId"] = ""
    return ParseDict(req, ExportTraceServiceRequest()).SerializeToString()


def receiver(kafka_bootstrap, read_timeout_s: float):
    topic = f"hostile-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=200, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=200, max_spans=100, max_body_bytes=256 * 1024,
                  read_timeout_s=read_timeout_s, workers=4, log=lambda line: None).start()
    rx.topic, rx.bootstrap = topic, kafka_bootstrap
    return rx


@pytest.fixture
def rx(kafka_bootstrap):
    """A receiver whose read timeout no loaded machine reaches by accident."""
    r = receiver(kafka_bootstrap, 30.0)
    yield r
    r.stop()


@pytest.fixture
def rx_quick(kafka_bootstrap):
    """A receiver with a read timeout of 1 s, for the tests of the timeout."""
    r = receiver(kafka_bootstrap, 1.0)
    yield r
    r.stop()


def stored(rx) -> list[str]:
    assert rx.meter.flush(15)
    return sorted(e["request_id"] for e in topic_messages(rx.bootstrap, rx.topic))


def still_serves(rx, rid: str) -> None:
    status, _, body = post(rx.url, body_of(request([span(rid)])))
    assert (status, body) == (200, b"{}")


def test_more_spans_than_the_limit_are_refused_whole_with_413_and_nothing_is_sent(rx):
    status, headers, body = post(rx.url, body_of(request([span(f"big-{i}") for i in range(101)])))
    assert status == 413 and "Retry-After" not in headers
    assert "101 spans" in json.loads(body)["message"] and "100" in json.loads(body)["message"]
    status, _, _ = post(rx.url, pb_request([f"pb-{i}" for i in range(101)]), PB)
    assert status == 413
    still_serves(rx, "after-big")
    assert stored(rx) == ["after-big"]


def test_a_request_that_does_not_fit_the_queue_is_503_and_nothing_of_it_is_queued():
    """Kafka unreachable: 60 of 100 places taken; a request of 50 does not fit,
    and none of its 50 spans is queued or dropped; one of 40 does."""
    meter = Meter(f"127.0.0.1:{free_port()}", topic="unused", queue_size=100, flush_timeout_s=0.2)
    rx = Receiver(meter, port=0, queue_size=100, max_spans=100, log=lambda line: None).start()
    try:
        assert post(rx.url, body_of(request([span(f"a-{i}") for i in range(60)])))[0] == 200
        status, headers, _ = post(rx.url, body_of(request([span(f"b-{i}") for i in range(50)])))
        assert (status, headers.get("Retry-After")) == (503, "1")
        s = meter.stats()
        assert (s.enqueued, s.dropped) == (60, 0)
        assert post(rx.url, body_of(request([span(f"c-{i}") for i in range(40)])))[0] == 200
        assert meter.stats().enqueued == 100 and meter.stats().dropped == 0
    finally:
        rx.stop(flush_timeout_s=0.2)


@pytest.mark.parametrize("field", ["gen_ai.response.model", "gen_ai.request.id"])
def test_a_lone_surrogate_in_a_required_label_is_a_counted_rejection(rx, field):
    bad = span("bad-rid", **{field: "x\ud800"})
    status, _, body = post(rx.url, body_of(request([bad, span("good-1")])))
    partial = json.loads(body)["partialSuccess"]
    assert status == 200 and partial["rejectedSpans"] == "1" and "not_utf8=1" in partial["errorMessage"]
    assert stored(rx) == ["good-1"]
    still_serves(rx, "good-2")
    assert stored(rx) == ["good-1", "good-2"]


def test_a_lone_surrogate_in_an_optional_label_drops_that_label_and_says_so(rx):
    s = span("opt-1", **{"gen_ai.response.finish_reasons": ["stop\udfff"]})
    status, _, body = post(rx.url, body_of(request([s], resource={"service.instance.id": "gpu-\ud800"})))
    partial = json.loads(body)["partialSuccess"]
    assert status == 200 and partial.get("rejectedSpans", "0") == "0"
    assert "finish_reason=1" in partial["errorMessage"] and "replica=1" in partial["errorMessage"]
    [event] = topic_messages(rx.bootstrap, rx.topic) if rx.meter.flush(15) else [None]
    assert (event["request_id"], event["finish_reason"], event["replica"]) == ("opt-1", None, None)
    assert rx.labels_dropped == {"finish_reason": 1, "replica": 1}


def test_every_member_of_a_multi_member_gzip_body_is_read(rx):
    one, two = pb_request(["m-1"]), pb_request(["m-2"])  # protobuf: concatenated requests are one request
    status, _, body = post(rx.url, gzip.compress(one) + gzip.compress(two), PB, **{"Content-Encoding": "gzip"})
    assert (status, body) == (200, b"")
    assert stored(rx) == ["m-1", "m-2"]


def test_a_multi_member_gzip_bomb_is_413(rx):
    member = gzip.compress(b" " * (200 * 1024))  # each under the 256 KiB limit, together over it
    status, _, body = post(rx.url, member * 3 + gzip.compress(body_of(request([span("x")]))), JS,
                           **{"Content-Encoding": "gzip"})
    assert status == 413 and "decompressed" in json.loads(body)["message"]
    still_serves(rx, "after-bomb")
    assert stored(rx) == ["after-bomb"]


@pytest.mark.parametrize("start", ["9" * 4300, "1" * 40, 10**400, "18446744073709551616"])
def test_an_overflowing_timestamp_is_400_with_a_reason_never_500(rx, start):
    raw = body_of(request([span("over", start=start)])) if type(start) is str else \
        body_of(request([span("over")])).replace(b'"startTimeUnixNano": "', b'"startTimeUnixNano": ' +
                                                 str(start).encode() + b', "x": "', 1)
    status, _, body = post(rx.url, raw)
    assert status == 400, body
    assert "startTimeUnixNano" in json.loads(body)["message"]
    still_serves(rx, "after-overflow")
    assert stored(rx) == ["after-overflow"]


def test_an_overflowing_double_is_no_500(rx):
    s = span("dbl")
    s["attributes"].append({"key": "gen_ai.latency.time_in_queue", "value": {"doubleValue": 10**400}})
    status, _, body = post(rx.url, body_of(request([s])))
    assert status in (200, 400) and status != 500, body
    if status == 200:
        assert json.loads(body)["partialSuccess"]["rejectedSpans"] == "1"


def test_another_host_name_is_refused_403(rx):
    status, _, body = post(rx.url, body_of(request([span("rebound")])), Host="evil.example:4318")
    assert status == 403 and "evil.example" in json.loads(body)["message"]
    status, _, _ = post(rx.url.replace("127.0.0.1", "localhost"), body_of(request([span("local")])))
    assert status == 200
    assert stored(rx) == ["local"]


def test_an_idle_connection_and_a_half_sent_body_are_dropped_after_the_read_timeout(rx_quick):
    rx = rx_quick
    host, port = rx.server.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as idle, \
            socket.create_connection((host, port), timeout=30) as half:
        half.sendall(b"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 1000\r\n\r\n{\"resourceSpans\":")
        # Each recv raises socket.timeout after our own 30 s: an answer at all
        # means the receiver closed them (its read timeout is shorter).
        assert idle.recv(1024) == b""
        answer = half.recv(4096)
        assert answer == b"" or answer.startswith(b"HTTP/1.1 408"), answer
    still_serves(rx, "after-idle")
    assert stored(rx) == ["after-idle"]


def test_connections_over_the_worker_pool_get_503_and_retry_after(rx):
    host, port = rx.server.server_address[:2]
    held = [socket.create_connection((host, port), timeout=30) for _ in range(4)]  # the pool of 4, idle
    try:
        deadline = time.monotonic() + 10
        while rx.busy_refusals == 0 and time.monotonic() < deadline:
            try:
                status, headers, _ = post(rx.url, body_of(request([span("over-pool")])))
            except (ConnectionError, urllib.error.URLError):
                continue
            if status == 503:
                assert headers.get("Retry-After") == "1"
        assert rx.busy_refusals >= 1
    finally:
        for s in held:
            s.close()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # the pool frees as the held connections close
        try:
            if post(rx.url, body_of(request([span("after-pool")])))[0] == 200:
                break
        except (ConnectionError, urllib.error.URLError):
            pass
    assert "after-pool" in stored(rx)


def raw_exchange(rx, data: bytes) -> bytes:
    """Send raw bytes, return the status code of the answer. A request line
    http.server cannot read gets an HTTP/0.9 answer, a page without a status
    line: its code is read from the page."""
    host, port = rx.server.server_address[:2]
    with socket.create_connection((host, port), timeout=30) as s:
        s.sendall(data)
        answer = b""
        while b"\r\n" not in answer:
            part = s.recv(4096)
            if not part:
                break
            answer += part
        if not answer.startswith(b"HTTP/1."):
            while b"</html>" not in answer and (part := s.recv(4096)):
                answer += part
            return answer.split(b"Error code: ", 1)[1][:3] if b"Error code: " in answer else answer
    return answer.split(b"\r\n", 1)[0].split()[1]


def head(lines: list[str], body: bytes = b"") -> bytes:
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + body


GOOD_HEAD = ["POST /v1/traces HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/json"]
# (name, raw request, expected status code)
RAW_CORPUS = [
    ("negative length", head(GOOD_HEAD + ["Content-Length: -1"]), 411),
    ("huge length", head(GOOD_HEAD + ["Content-Length: " + "9" * 40]), 411),
    ("chunked", head(GOOD_HEAD + ["Transfer-Encoding: chunked"], b"2\r\n{}\r\n0\r\n\r\n"), 411),
    ("no content type", head(["POST /v1/traces HTTP/1.1", "Host: 127.0.0.1", "Content-Length: 2"], b"{}"), 415),
    ("no host", head(["POST /v1/traces HTTP/1.1", "Content-Type: application/json", "Content-Length: 2"], b"{}"),
     403),
    ("empty json body", head(GOOD_HEAD + ["Content-Length: 0"]), 400),
    ("json null", head(GOOD_HEAD + ["Content-Length: 4"], b"null"), 400),
    ("json list", head(GOOD_HEAD + ["Content-Length: 2"], b"[]"), 400),
    ("json nested deep", head(GOOD_HEAD + [f"Content-Length: {200_000}"], b"[" * 100_000 + b"]" * 100_000), 400),
    ("spans not a list", head(GOOD_HEAD + ["Content-Length: 52"],
                              b'{"resourceSpans":[{"scopeSpans":[{"spans":7}]}]}    '), 400),
    ("deflate then junk", head(GOOD_HEAD + ["Content-Encoding: deflate", "Content-Length: 14"],
                               zlib.compress(b"{}") + b"junk"), 400),
    ("not gzip", head(GOOD_HEAD + ["Content-Encoding: gzip", "Content-Length: 4"], b"abcd"), 400),
    ("too many headers", head(GOOD_HEAD + [f"X-{i}: y" for i in range(150)] + ["Content-Length: 2"], b"{}"), 431),
    ("long request line", head(["POST /v1/traces?" + "a" * 70_000 + " HTTP/1.1", "Host: 127.0.0.1"]), 414),
    ("binary junk", b"\x00\x01\x02\xff\r\n\r\n", 400),
    ("protobuf junk", head(["POST /v1/traces HTTP/1.1", "Host: 127.0.0.1", "Content-Type: application/x-protobuf",
                            "Content-Length: 6"], b"\x0a\xff\xff\xff\xff\x0f"), 400),
]


def test_a_corpus_of_malformed_requests_is_refused_one_by_one_and_good_requests_still_flow(rx):
    assert len(RAW_CORPUS) == 16
    got = {name: raw_exchange(rx, data) for name, data, _ in RAW_CORPUS}
    for name, _, status in RAW_CORPUS:
        assert got[name] == str(status).encode(), (name, got[name])
    still_serves(rx, "after-corpus")
    status, _, body = post(rx.url, b"", PB)  # an empty protobuf request is a valid, empty export
    assert (status, body) == (200, b"")
    assert stored(rx) == ["after-corpus"]


def test_the_command_serves_the_names_in_phasemeter_allowed_hosts_and_refuses_others(kafka_bootstrap, tmp_path):
    import os

    from test_otlp_receiver import otlp_command

    topic, port = f"hostile-cli-{uuid.uuid4().hex[:10]}", free_port()
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "PHASEMETER_TOPIC": topic,
           "PHASEMETER_DATA_DIR": str(tmp_path), "PHASEMETER_ALLOWED_HOSTS": "otlp.internal"}
    with otlp_command(["--port", str(port), "--grpc-port", "0", "--max-spans", "10", "--workers", "2",
                       "--read-timeout", "5"], env, port) as proc:
        url = f"http://127.0.0.1:{port}/v1/traces"
        assert post(url, body_of(request([span("named")])), Host=f"otlp.internal:{port}")[0] == 200
        assert post(url, body_of(request([span("rebound")])), Host=f"evil.example:{port}")[0] == 403
        assert post(url, body_of(request([span(f"many-{i}") for i in range(11)])))[0] == 413
        proc.terminate()
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0, out
    assert "otlp.internal" in out.splitlines()[1]  # the names served, said at start
    assert sorted(e["request_id"] for e in topic_messages(kafka_bootstrap, topic)) == ["named"]


def test_stop_does_not_wait_out_the_read_timeout_of_kept_alive_connections(kafka_bootstrap):
    topic = f"hostile-stop-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=10, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=10, read_timeout_s=120.0, workers=2, log=lambda line: None).start()
    host, port = rx.server.server_address[:2]
    kept = socket.create_connection((host, port), timeout=30)
    try:
        kept.sendall(head(GOOD_HEAD + ["Content-Length: 2"], b"{}"))
        answer = b""
        while not answer.endswith(b"\r\n\r\n{}"):  # the whole answer, headers and body
            part = kept.recv(4096)
            assert part, answer
            answer += part
        assert answer.startswith(b"HTTP/1.1 200")  # answered, and kept alive for a next request
        t = time.monotonic()
        rx.stop()
        assert time.monotonic() - t < rx.read_timeout_s / 4
        assert kept.recv(4096) == b""  # the receiver ended it
    finally:
        kept.close()


def test_headers_sent_a_byte_at_a_time_are_cut_off_after_the_read_timeout(rx_quick):
    """Each byte comes well within the read timeout, so only a deadline on the
    whole request, not a timeout per read, frees the worker."""
    rx = rx_quick
    host, port = rx.server.server_address[:2]
    headers = head(GOOD_HEAD + ["X-Slow: " + "y" * 200, "Content-Length: 2"], b"{}")
    with socket.create_connection((host, port), timeout=30) as slow:
        slow.settimeout(rx.read_timeout_s / 4)
        t = time.monotonic()
        closed = False
        for byte in headers:  # one byte per read_timeout / 4: ~65 s to send them all
            try:
                slow.sendall(bytes([byte]))
                if slow.recv(4096) == b"":
                    closed = True
                    break
            except TimeoutError:  # nothing came back within the pause: keep sending
                continue
            except OSError:  # reset: closed too
                closed = True
                break
        assert closed and time.monotonic() - t < 10 * rx.read_timeout_s
    still_serves(rx, "after-slow")
    assert stored(rx) == ["after-slow"]


def test_requests_are_decoded_two_at_a_time_and_one_that_waits_too_long_gets_503(kafka_bootstrap):
    topic = f"hostile-dec-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, queue_size=10, flush_timeout_s=10)
    rx = Receiver(meter, port=0, queue_size=10, read_timeout_s=2.0, log=lambda line: None).start()
    try:
        assert rx.decoding.acquire(timeout=5) and rx.decoding.acquire(timeout=5)  # both decoders taken
        try:
            assert rx.decoding.acquire(blocking=False) is False
            status, headers, body = post(rx.url, body_of(request([span("waited")])))
            assert (status, headers.get("Retry-After")) == (503, "1") and b"decod" in body
        finally:
            rx.decoding.release()
            rx.decoding.release()
        still_serves(rx, "after-wait")
        assert rx.meter.flush(15)
        assert sorted(e["request_id"] for e in topic_messages(kafka_bootstrap, topic)) == ["after-wait"]
    finally:
        rx.stop()


def test_the_header_limits_are_the_receivers_own_whatever_http_client_was_told(rx, monkeypatch):
    """clickhouse_connect raises http.client's process-wide header count to
    10,000 when imported; the receiver keeps its own bounds."""
    import http.client

    monkeypatch.setattr(http.client, "_MAXHEADERS", 10_000)
    many = head(GOOD_HEAD + [f"X-{i}: y" for i in range(150)] + ["Content-Length: 2"], b"{}")
    assert raw_exchange(rx, many) == b"431"
    big = head(GOOD_HEAD + [f"X-{i}: " + "y" * 5000 for i in range(60)] + ["Content-Length: 2"], b"{}")
    answer = raw_exchange(rx, big)  # 300 KB of headers
    assert answer in (b"431", b""), answer
    still_serves(rx, "after-headers")
    assert stored(rx) == ["after-headers"]
