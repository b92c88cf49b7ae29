"""The worker's web port against hostile callers, and hostile labels in its
store, on a real worker over real sockets.

- A request naming a foreign Host (DNS rebinding) is refused on every route.
- A CORS "simple request" (a POST of text/plain or a form) runs nothing.
- A body nested too deeply to decode is a 400 with the reason, never a 500.
- 200 idle connections and a half-sent body do not stop a normal request, and
  are closed within the port's timeouts; requests over the concurrency bound
  get 503 with Retry-After.
- Labels holding ESC, OSC, NUL and CR/LF print escaped by every text output,
  with the store opened directly and through the worker.
"""

from __future__ import annotations

import http.client
import json
import os
import re
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import WorkerProc, wait_for, worker_env, write_store_in_subprocess

pytestmark = [pytest.mark.integration]

HOSTILE = ["evil\x1b[2J\x1b[H", "t\x1b]0;pwned\x07x", "t\x1b]2;x\x1b\\y", "nul\x00l", "cr\rlf\nx", "csi\x9b31m"]
RAW = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f]")  # a raw control byte, line breaks aside
SPAN_S = 30 * 60
GET_ROUTES = ["/", "/health", "/metrics", "/inflight", "/debug/tasks", "/live/live.js", "/api/bands", "/api/slo",
              "/api/alerts", "/api/pools"]


def write_store(t0: float) -> None:
    """In a subprocess (a chDB path opens in one process): rows whose labels
    a hostile sender chose, and dead letters whose detail holds the same."""
    from stores import migrated_client

    from phasemeter.demo.rows import synthetic_rows
    from phasemeter.settings import Settings
    from phasemeter.stream_jobs.sink import Sink

    settings = Settings.from_env()
    rows = synthetic_rows(300, t0, SPAN_S, seed=5)
    for i, row in enumerate(rows):
        row["model"] = HOSTILE[i % len(HOSTILE)]
        row["input_bucket"] = HOSTILE[(i // 7) % len(HOSTILE)]
    dead = [{"ts": t0 + 60 + i, "reason": "malformed_json", "detail": label, "payload": "{", "payload_size": 1,
             "src_topic": "t", "src_partition": 1, "src_offset": 500_000 + i} for i, label in enumerate(HOSTILE)]
    with migrated_client(settings.data_path, settings.database) as client:
        Sink.over(client, settings.store_dsn).write(rows, dead)


def _iso(t: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def outputs(env: dict, t0: float) -> dict[str, tuple[int, str, str]]:
    """Every text output of the stored labels: (rc, stdout, stderr) per command."""
    window = ["--from", _iso(t0), "--to", _iso(t0 + SPAN_S)]
    cmds = {"bands table": ["query", "bands", *window, "--exact", "--wide"],
            "bands csv": ["query", "bands", *window, "--exact", "--format", "csv"],
            "latency table": ["latency", *window, "--exact"],
            "slo table": ["slo", "--slos", "example", *window],
            "slo csv": ["slo", "--slos", "example", *window, "--format", "csv"],
            "dlq": ["dlq", "inspect", *window]}
    got = {}
    for name, argv in cmds.items():
        done = subprocess.run([sys.executable, "-m", "phasemeter", *argv], env=env, capture_output=True,
                              timeout=180)
        got[name] = (done.returncode, done.stdout.decode("utf-8", "replace"), done.stderr.decode("utf-8", "replace"))
    return got


@pytest.fixture(scope="module")
def port(kafka_bootstrap, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("webport")
    t0 = (time.time() - 40 * 60) // 60 * 60
    env = worker_env(kafka_bootstrap, tmp / "data",
                     pythonpath=(Path(__file__).parent, Path(__file__).parents[1]))
    write_store_in_subprocess(env, "test_worker_web_port", t0)
    direct = outputs(env, t0)  # before the worker owns the store
    w = WorkerProc(env, tmp, int(env["PHASEMETER_WEB_PORT"])).start()
    yield w, env, t0, direct
    w.stop()


def request(w, method: str, route: str, host: str | None = None, body: bytes | None = None,
            ctype: str | None = None) -> tuple[int, dict | bytes, dict]:
    conn = http.client.HTTPConnection("127.0.0.1", w.port, timeout=60)
    headers = {"Host": host if host is not None else f"127.0.0.1:{w.port}"}
    if ctype:
        headers["Content-Type"] = ctype
    try:
        conn.request(method, route, body=body, headers=headers)
        resp = conn.getresponse()
        raw = resp.read()
        kind = resp.getheader("Content-Type", "")
        return resp.status, json.loads(raw) if kind.startswith("application/json") else raw, dict(resp.getheaders())
    finally:
        conn.close()


def test_a_foreign_host_is_refused_on_every_route(port):
    w = port[0]
    assert len(GET_ROUTES) == 10
    for route in GET_ROUTES:
        status, doc, _ = request(w, "GET", route, host=f"rebound.example:{w.port}")
        assert status == 403, (route, status, doc)
        assert "rebound.example" in doc["error"] and "PHASEMETER_ALLOWED_HOSTS" in doc["error"], doc
        for host in (f"127.0.0.1:{w.port}", f"localhost:{w.port}"):
            status, doc, _ = request(w, "GET", route, host=host)
            assert status != 403, (route, host, doc)
    status, doc, _ = request(w, "POST", "/query/command", host="rebound.example",
                             body=b"{}", ctype="application/json")
    assert status == 403, doc


@pytest.mark.parametrize("ctype", ["text/plain", "application/x-www-form-urlencoded", "multipart/form-data; b=x",
                                   None])
def test_a_simple_cross_site_request_runs_nothing(port, ctype):
    w, env = port[0], port[1]
    body = json.dumps({"argv": ["query", "bands"], "settings": {"database": env["PHASEMETER_DATABASE"]},
                       "files": {}}).encode()
    status, doc, _ = request(w, "POST", "/query/command", body=body, ctype=ctype)
    assert status == 415, (status, doc)
    assert "application/json" in doc["error"]


def test_a_deeply_nested_body_or_parameter_is_never_a_500(port):
    """No route of the web port decodes a body any more (reads go to the SQL
    interface): a deep one is answered as any body there is, never a 500; a
    deep parameter of the page's API is a 400 naming it."""
    w = port[0]
    deep = b"[" * 100_000 + b"]" * 100_000
    paths = ("/api/bands", "/health", "/query/command")
    assert len(paths) == 3
    for path in paths:
        status, doc, _ = request(w, "POST", path, body=deep, ctype="application/json")
        assert status in (404, 405), (path, status, doc)
    from urllib.parse import quote

    status, doc, _ = request(w, "GET", "/api/bands?from=" + quote("[" * 2_000))  # under aiohttp's 8 KiB line
    assert status == 400 and "from" in doc["error"], (status, doc)
    status, _, _ = request(w, "GET", "/api/bands?from=" + quote("[" * 50_000))  # over it: aiohttp's own 400
    assert status == 400


def _half_open(w, n: int) -> list[socket.socket]:
    socks = []
    for _ in range(n):
        s = socket.create_connection(("127.0.0.1", w.port), timeout=5)
        socks.append(s)
    return socks


def _closed(s: socket.socket) -> bool:
    """True once the server closed the connection (EOF, or reset)."""
    s.setblocking(False)
    try:
        return s.recv(65536) == b""  # any answer (a 408) is read; EOF next time
    except BlockingIOError:
        return False
    except OSError:
        return True


def test_idle_connections_and_a_half_sent_body_cost_nothing_and_are_dropped(port):
    from phasemeter.stream_jobs.web_guard import BODY_READ_S, IDLE_S

    w = port[0]
    started = time.monotonic()
    idle = _half_open(w, 200)
    half = socket.create_connection(("127.0.0.1", w.port), timeout=5)
    half.sendall(f"POST /query/command HTTP/1.1\r\nHost: 127.0.0.1:{w.port}\r\nContent-Type: application/json\r\n"
                 "Content-Length: 1000\r\n\r\n{\"argv\": [".encode())
    slow_head = socket.create_connection(("127.0.0.1", w.port), timeout=5)
    slow_head.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")  # the head never ends
    try:
        status, doc, _ = request(w, "GET", "/health")
        assert status == 200 and "ready" in doc
        answered = time.monotonic() - started
        assert answered < IDLE_S, answered  # answered while all of them are open
        lingering = [half, slow_head, *idle]
        assert len(lingering) == 202
        # Every one closed by the server within its timeout (plus scheduling slack).
        wait_for(lambda: all(_closed(s) for s in lingering), IDLE_S + BODY_READ_S + 10,
                 "the server to close idle and half-sent connections", w.diagnose)
        closed_after = time.monotonic() - started
        assert closed_after >= min(IDLE_S, BODY_READ_S)  # the timeouts closed them, not something sooner
        status, doc, _ = request(w, "GET", "/health")
        assert status == 200
    finally:
        for s in [half, slow_head, *idle]:
            s.close()


def test_requests_over_the_bound_get_503_with_retry_after(port):
    from phasemeter.stream_jobs.web_guard import MAX_IN_FLIGHT

    w = port[0]
    held = []
    try:
        for _ in range(MAX_IN_FLIGHT):  # each holds a slot while its body does not arrive
            s = socket.create_connection(("127.0.0.1", w.port), timeout=5)
            s.sendall(f"POST /query/command HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: 100\r\n\r\n{".encode())
            held.append(s)
        assert len(held) == MAX_IN_FLIGHT

        def refused():
            status, doc, headers = request(w, "GET", "/inflight")
            return (status, doc, headers) if status == 503 else None

        status, doc, headers = wait_for(refused, 10, "a request over the bound to be refused")
        assert headers.get("Retry-After") == "1" and "busy" in doc["error"]
        # Monitoring answers all the same: a probe must not read a busy worker as a dead one.
        for route in ("/health", "/metrics"):
            assert request(w, "GET", route)[0] == 200, route
    finally:
        for s in held:
            s.close()
    wait_for(lambda: request(w, "GET", "/inflight")[0] == 200, 30, "the port to answer again once they left")


def test_hostile_labels_print_escaped_direct_and_through_the_worker(port):
    from phasemeter.query.remote import worker_url
    from phasemeter.textgrid import printable

    w, env, t0, direct = port
    assert worker_url(Path(env["PHASEMETER_DATA_DIR"]))  # the CLI now reads through the worker
    via = outputs(env, t0)
    assert direct.keys() == via.keys() and len(direct) == 6
    for name in direct:
        for how, (rc, out, err) in (("direct", direct[name]), ("worker", via[name])):
            assert rc == 0, (name, how, err[-2000:])
            assert RAW.search(out) is None, (name, how, out[:2000])
            assert RAW.search(err) is None, (name, how, err[:2000])
        assert direct[name][1] == via[name][1], name
    assert printable(HOSTILE[0]) in via["bands table"][1]
    assert any(printable(label) in via["dlq"][1] for label in HOSTILE)  # one example per reason
    assert len(via["bands csv"][1].splitlines()) > 1


def test_a_database_the_worker_does_not_read_is_an_error_naming_the_flag(port):
    """Through a worker, a read can only see the worker's database: naming
    another one is refused (exit 2, the flag named), never silently ignored."""
    w, env, t0 = port[0], port[1], port[2]
    window = ["--from", _iso(t0), "--to", _iso(t0 + SPAN_S)]
    status, doc, _ = request(w, "GET", "/health")
    assert doc["database"] == env["PHASEMETER_DATABASE"]
    # Found from the data dir, the worker's own database is named beside the refusal; asked
    # directly (--via its SQL interface), the interface reads the database named, and has none.
    cases = {("query", "bands", *window, "--database", "other"): ("--database 'other'", env["PHASEMETER_DATABASE"]),
             ("slo", "--slos", "example", *window, "--database", "other"):
                 ("--database 'other'", env["PHASEMETER_DATABASE"]),
             ("dlq", "inspect", "--database", "other"): ("--database 'other'", env["PHASEMETER_DATABASE"]),
             ("query", "bands", *window, "--via", w.sql_url, "--data-dir", "/nonexistent", "--database", "other"):
                 ("--database='other'", "no such database")}
    assert len(cases) == 4
    for argv, needles in cases.items():
        done = subprocess.run([sys.executable, "-m", "phasemeter", *argv], env=env, capture_output=True, text=True,
                              timeout=120)
        assert done.returncode == 2 and all(n in done.stderr for n in needles), \
            (argv, done.returncode, done.stderr[-2000:])
        assert done.stdout == ""
    other = {**env, "PHASEMETER_DATABASE": "other"}
    done = subprocess.run([sys.executable, "-m", "phasemeter", "query", "bands", *window], env=other,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "PHASEMETER_DATABASE='other'" in done.stderr, done.stderr[-2000:]
    same = subprocess.run([sys.executable, "-m", "phasemeter", "query", "bands", *window, "--database",
                           env["PHASEMETER_DATABASE"]], env=env, capture_output=True, text=True, timeout=120)
    assert same.returncode == 0, same.stderr[-2000:]


def test_faust_s_own_table_and_router_routes_are_not_served(port):
    """Faust serves its tables' contents (/table/NAME/KEY/) and its partition
    router by default; the worker needs neither, and the join's table holds
    request ids."""
    w = port[0]
    routes = ["/router/", "/table/phases/x/", "/table/x/y/"]
    assert len(routes) == 3
    for route in routes:
        status, doc, _ = request(w, "GET", route)
        assert status == 404, (route, status, doc)


def test_out_of_range_values_are_400s_naming_the_parameter(port):
    from urllib.parse import urlencode

    w = port[0]
    cases = [("/api/bands", {"from": "-99999999999d"}, "from"), ("/api/bands", {"step": "99999999999999999999d"}, "step"),
             ("/api/slo", {"to": "9999-12-31T23:59:59-01:00"}, "to"), ("/api/bands", {"from": "0001-01-01"}, "from"),
             ("/api/pools", {"step": "99999999999999999999d"}, "step")]
    assert len(cases) == 5
    for route, query, param in cases:
        status, doc, _ = request(w, "GET", f"{route}?{urlencode(query)}")
        assert status == 400 and doc["param"] == param, (route, query, status, doc)
