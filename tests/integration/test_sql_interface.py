"""The worker's SQL interface speaks ClickHouse's HTTP protocol: the query in
the URL and/or the body, formats written by the engine, bound parameters,
the X-ClickHouse-* headers, errors in ClickHouse's form, compression, the
Host check; `phasemeter sql` gives the same bytes through the worker as with
the store opened directly; beyond loopback it asks for credentials.
"""

from __future__ import annotations

import gzip
import io
import json
import struct
import subprocess
import sys
import time
import zlib

import pytest
import sql_worker

pytestmark = [pytest.mark.integration]

# What `phasemeter sql` is asked, before and while a worker owns the store.
CLI_CASES = [
    (["SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model"], ""),
    (["SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model", "--format", "JSONCompactEachRow"], ""),
    (["SELECT count() FROM generations WHERE model = {m:String}", "--param", "m=qwen3-32b", "--format", "CSV"], ""),
    (["--format", "Parquet"], "SELECT request_id, model, input_tokens FROM generations ORDER BY request_id"),
    (["SELECT * FROM file('/etc/passwd', 'LineAsString')"], ""),
    (["SELECT throwIf(number = 1900000) FROM numbers(2000000)"], ""),  # an error after the answer began
]


def sql_cli(env, args, stdin=""):
    return subprocess.run([sys.executable, "-m", "phasemeter", "sql", *args], env=env, input=stdin.encode(),
                          capture_output=True, timeout=120)


@pytest.fixture(scope="module")
def sqlw(kafka_bootstrap, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqliface")
    t0 = (time.time() - 3 * 3600) // 60 * 60
    env = sql_worker.sql_env(kafka_bootstrap, tmp)
    sql_worker.written(env, t0)
    direct = [sql_cli(env, args, stdin) for args, stdin in CLI_CASES]  # no worker yet: the store opened here
    w = sql_worker.start(env, tmp, None)
    w.models, w.direct = sql_worker.written_models(t0), direct
    yield w
    w.stop()


def test_formats_headers_and_parameters(sqlw):
    url = sqlw.sql_url
    status, headers, body = sql_worker.post(url, "SELECT model, count() AS n FROM generations GROUP BY model "
                                                 "ORDER BY model", default_format="JSONEachRow", query_id="q-1",
                                            wait_end_of_query="1")
    assert status == 200, body
    assert {d["model"]: int(d["n"]) for d in map(json.loads, body.splitlines())} == sqlw.models
    assert headers["X-ClickHouse-Format"] == "JSONEachRow" and headers["X-ClickHouse-Query-Id"] == "q-1"
    assert headers["X-ClickHouse-Timezone"] and headers["X-ClickHouse-Server-Display-Name"]
    assert int(json.loads(headers["X-ClickHouse-Summary"])["read_rows"]) >= sum(sqlw.models.values())
    # URL part first, then the body; the query's own FORMAT wins over default_format
    status, headers, body = sql_worker.post(url, "FROM generations FORMAT CSVWithNames", query="SELECT count() AS n",
                                            default_format="JSON")
    assert (status, headers["X-ClickHouse-Format"], body) == (200, "CSVWithNames",
                                                              f'"n"\n{sum(sqlw.models.values())}\n'.encode())
    status, _, body = sql_worker.post(url + "?query=SELECT+{s:String}+AS+s,+{n:UInt8}+%2B+1+AS+n&param_s=it%27s"
                                            "&param_n=41&default_format=TabSeparated")
    assert (status, body) == (200, b"it\\'s\t42\n")  # TabSeparated escapes the quote, as ClickHouse does
    import pyarrow.parquet as pq

    status, headers, body = sql_worker.post(url, "SELECT model, count() AS n FROM generations GROUP BY model",
                                            default_format="Parquet")
    table = pq.read_table(io.BytesIO(body))
    assert dict(zip(table["model"].to_pylist(), table["n"].to_pylist(), strict=True)) == sqlw.models


@pytest.mark.parametrize("sql,params,status,code", [
    ("SELECT * FROM no_such_table", {}, 404, 60),
    ("SELEC 1", {}, 400, 62),
    ("SELECT {x:UInt8}", {}, 400, 456),
    ("SELECT 1", {"default_format": "NoSuchFormat"}, 400, 73),
    ("SELECT 1", {"database": "no_such_db"}, 404, 81),
    ("SELECT * FROM numbers(10)", {"max_result_rows": "5"}, 500, 396),
])
def test_errors_in_clickhouse_form(sqlw, sql, params, status, code):
    got, headers, body = sql_worker.post(sqlw.sql_url, sql, **params)
    assert (got, headers["X-ClickHouse-Exception-Code"]) == (status, str(code)), body
    assert body.startswith(f"Code: {code}. DB::Exception: ".encode()) and b"(version " in body


@pytest.mark.parametrize("encoding", ["gzip", "deflate", "zstd", "lz4"])
def test_http_compression(sqlw, encoding):
    status, headers, body = sql_worker.post(sqlw.sql_url, "SELECT number FROM numbers(1000)",
                                            headers={"Accept-Encoding": encoding}, enable_http_compression="1")
    assert status == 200 and headers["Content-Encoding"] == encoding
    if encoding == "lz4":
        import lz4.frame
        plain = lz4.frame.decompress(body)
    elif encoding == "zstd":
        from clickhouse_connect.driver.compression import _zstd_decompress
        plain = _zstd_decompress(body)
    else:
        plain = gzip.decompress(body) if encoding == "gzip" else zlib.decompress(body)
    assert plain == "".join(f"{i}\n" for i in range(1000)).encode()


def test_clickhouse_compressed_blocks(sqlw):
    """compress=1: ClickHouse's checksummed LZ4 blocks, checked as a client does."""
    import lz4.block
    from clickhouse_cityhash.cityhash import CityHash128

    status, _, body = sql_worker.post(sqlw.sql_url, "SELECT number FROM numbers(300000)", compress="1")
    assert status == 200
    plain, pos, blocks = b"", 0, 0
    while pos < len(body):
        low, high = struct.unpack_from("<QQ", body, pos)
        method, size, raw = struct.unpack_from("<BII", body, pos + 16)
        block = body[pos + 16:pos + 16 + size]
        assert (method, (low << 64) | high) == (0x82, CityHash128(block))
        plain += lz4.block.decompress(block[9:], uncompressed_size=raw)
        pos, blocks = pos + 16 + size, blocks + 1
    assert blocks > 1 and plain == "".join(f"{i}\n" for i in range(300000)).encode()


def test_host_check_and_ping(sqlw):
    status, _, body = sql_worker.post(sqlw.sql_url + "ping")
    assert (status, body) == (200, b"Ok.\n")
    status, headers, body = sql_worker.post(sqlw.sql_url, "SELECT 1", headers={"Host": "rebound.example:80"})
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (403, "497"), body


def test_the_interface_splits_reads_itself_and_a_reader_cannot_change_it(sqlw):
    """The rollup's reading policy (phasemeter.store.read_tuning) is applied
    server-side to every query: readers cannot send it, as every setting but
    the output ones and lowered limits is refused in read-only mode."""
    from phasemeter.store.read_tuning import SPLIT_SMALL_READS

    names = sorted(SPLIT_SMALL_READS)
    assert len(names) == 2
    sql = "SELECT " + ", ".join(f"getSetting('{n}')" for n in names)
    status, _, body = sql_worker.post(sqlw.sql_url, sql, default_format="TabSeparated")
    assert (status, body.decode().split()) == (200, [str(SPLIT_SMALL_READS[n]) for n in names])
    for name in names:
        status, headers, body = sql_worker.post(sqlw.sql_url + f"?{name}=100000000", "SELECT 1")
        assert headers["X-ClickHouse-Exception-Code"] == "164", (status, body)
        status, headers, body = sql_worker.post(sqlw.sql_url, f"SELECT 1 SETTINGS {name} = 100000000")
        assert headers["X-ClickHouse-Exception-Code"] == "164", (status, body)


def test_worker_json_and_config_name_the_interface(sqlw):
    state = json.loads((sqlw.data_dir / "data" / "worker.json").read_text())
    assert state["sql_url"] == f"http://127.0.0.1:{sqlw.sql_port}"
    out = sqlw.run("config").stdout
    assert f"http://127.0.0.1:{sqlw.sql_port}/" in out and "PHASEMETER_SQL_PORT" in out


def test_phasemeter_sql_same_bytes_through_the_worker(sqlw):
    assert len(CLI_CASES) == len(sqlw.direct) == 6
    for (args, stdin), direct in zip(CLI_CASES, sqlw.direct, strict=True):
        through = sql_cli(sqlw.env, args, stdin)
        assert through.returncode == direct.returncode, (args, through.stderr)
        assert through.stderr.split(b"while executing")[0] == direct.stderr.split(b"while executing")[0]
        if args[0].startswith("SELECT throwIf"):  # how far an answer got before its error varies with the threads
            assert through.stdout.count(b"\n") > 1000 and set(through.stdout.split(b"\n")) == {b"0", b""}
        else:
            assert through.stdout == direct.stdout, args
    assert sqlw.direct[0].returncode == 0 and sqlw.direct[0].stdout.count(b"\n") == len(sqlw.models)
    refused, thrown = sqlw.direct[-2:]
    assert refused.returncode == 2 and b"Code: 497. DB::Exception" in refused.stderr
    assert thrown.returncode == 1 and b"Code: 395. DB::Exception" in thrown.stderr  # HTTP 500: exit 1
    assert thrown.stdout.count(b"\n") > 1000 and b"__exception__" not in thrown.stdout


def test_phasemeter_sql_flag_errors_create_nothing(sqlw, tmp_path):
    env = {**sqlw.env, "PHASEMETER_DATA_DIR": str(tmp_path / "none")}
    for args in (["--param", "novalue", "SELECT 1"], ["--file", str(tmp_path / "missing.sql")], ["SELECT 1"]):
        out = sql_cli(env, args)
        assert out.returncode == 2, out.stderr
    assert not (tmp_path / "none").exists()
    assert b"--param" in sql_cli(env, ["--param", "novalue", "SELECT 1"]).stderr


def test_beyond_loopback_credentials_are_required(kafka_bootstrap, tmp_path):
    env = sql_worker.sql_env(kafka_bootstrap, tmp_path, PHASEMETER_WEB_HOST="0.0.0.0")
    t0 = (time.time() - 3 * 3600) // 60 * 60
    sql_worker.written(env, t0)
    refused = subprocess.run([sys.executable, "-m", "phasemeter", "worker"], env=env, capture_output=True,
                             text=True, timeout=120)
    assert refused.returncode == 2 and "PHASEMETER_SQL_PASSWORD" in refused.stderr
    env.update(PHASEMETER_SQL_USER="reader", PHASEMETER_SQL_PASSWORD="s3cret")
    w = sql_worker.start(env, tmp_path, None)
    try:
        import base64
        basic = "Basic " + base64.b64encode(b"reader:s3cret").decode()
        for headers, params, status in [({}, {}, 401), ({"Authorization": basic}, {}, 200),
                                        ({"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "s3cret"}, {}, 200),
                                        ({}, {"user": "reader", "password": "s3cret"}, 200),
                                        ({"X-ClickHouse-User": "reader", "X-ClickHouse-Key": "wrong"}, {}, 401)]:
            got, hdrs, body = sql_worker.post(w.sql_url, "SELECT 1", headers=headers, **params)
            assert got == status, body
            if status == 401:
                assert hdrs["X-ClickHouse-Exception-Code"] == "516"
    finally:
        w.stop()


def test_streamed_answers_errors_mid_stream_and_clients_that_leave(sqlw):
    import http.client

    status, headers, body = sql_worker.post(sqlw.sql_url, "SELECT number FROM numbers(2000000)")
    assert (status, headers["Transfer-Encoding"]) == (200, "chunked")
    assert body == "".join(f"{i}\n" for i in range(2000000)).encode()
    # an error after the first blocks ends the body in ClickHouse's words, as a server's stream does
    status, headers, body = sql_worker.post(sqlw.sql_url, "SELECT throwIf(number = 1900000) FROM numbers(2000000)")
    tag = headers["X-ClickHouse-Exception-Tag"]
    assert status == 200 and body.count(b"\n") > 1000
    assert body.endswith(f" {tag}\r\n__exception__\r\n".encode())
    assert f"__exception__\r\n{tag}\r\nCode: 395. DB::Exception: ".encode() in body[-2000:]
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import StreamFailureError

    client = clickhouse_connect.get_client(host="127.0.0.1", port=sqlw.sql_port)
    rows = 0
    with pytest.raises(StreamFailureError, match="Code: 395"):  # the client's own mid-stream error
        with client.query_rows_stream("SELECT number, throwIf(number = 1900000) FROM numbers(2000000)") as stream:
            for _ in stream:
                rows += 1
    assert rows > 1000
    # clients that go away mid-stream give their turn back: more of them than PHASEMETER_SQL_CONCURRENCY
    for _ in range(4):
        conn = http.client.HTTPConnection("127.0.0.1", sqlw.sql_port, timeout=60)
        conn.request("POST", "/", body=b"SELECT number FROM numbers(50000000)")
        resp = conn.getresponse()
        assert resp.status == 200 and resp.read(1000)
        conn.close()
    status, _, body = sql_worker.post(sqlw.sql_url, "SELECT 1")
    assert (status, body) == (200, b"1\n")


def test_a_stopping_worker_cancels_the_queries_it_runs(kafka_bootstrap, tmp_path):
    """SIGTERM does not wait out a reader's scan (before: 119 s, its whole
    max_execution_time); the reader is told in ClickHouse's words."""
    import signal
    import threading

    limit_s = 100
    env = sql_worker.sql_env(kafka_bootstrap, tmp_path, PHASEMETER_SQL_MAX_EXECUTION_S=str(limit_s))
    w = sql_worker.start(env, tmp_path, (time.time() - 3 * 3600) // 60 * 60)
    got = {}
    scan = threading.Thread(target=lambda: got.update(answer=sql_worker.post(
        w.sql_url, "SELECT count() FROM numbers(100000000000) WHERE sipHash64(number) % 7 = 1 AND 'long-scan' != ''")))
    try:
        scan.start()
        deadline = time.monotonic() + 60
        running = b"0\n"
        while running == b"0\n" and time.monotonic() < deadline:
            running = sql_worker.post(w.sql_url, "SELECT count() FROM system.processes "
                                                 "WHERE query LIKE concat('%long', '-scan%')")[2]
        assert running == b"1\n"
        began = time.monotonic()
        w.proc.send_signal(signal.SIGTERM)
        w.proc.wait(limit_s + 60)
        took = time.monotonic() - began
        scan.join()
    finally:
        w.stop()
    assert w.proc.returncode == 0 and took < limit_s, took
    status, headers, body = got["answer"]
    assert (status, headers["X-ClickHouse-Exception-Code"]) == (500, "394"), body


def test_a_taken_sql_port_is_never_named_to_readers(kafka_bootstrap, tmp_path):
    """Another process holds PHASEMETER_SQL_PORT: the worker ingests on,
    says so in its log, and worker.json names no SQL interface, so a reader
    is told why instead of reading whatever answers on that port."""
    import http.server
    import threading

    asked: list[str] = []

    class Impostor(http.server.BaseHTTPRequestHandler):
        def _answer(self):
            asked.append(self.path)
            self.send_response(200)
            self.send_header("Content-Length", "9")
            self.end_headers()
            self.wfile.write(b"impostor\n")

        do_GET = do_POST = _answer

        def log_message(self, *args):
            pass

    impostor = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Impostor)
    threading.Thread(target=impostor.serve_forever, daemon=True).start()
    env = sql_worker.sql_env(kafka_bootstrap, tmp_path, PHASEMETER_SQL_PORT=str(impostor.server_address[1]))
    sql_worker.written(env, (time.time() - 3 * 3600) // 60 * 60)
    from conftest import WorkerProc

    w = WorkerProc(env, tmp_path, int(env["PHASEMETER_WEB_PORT"]))
    with open(w.log, "ab") as log:
        w.proc = subprocess.Popen([sys.executable, "-m", "phasemeter", "worker", "--loglevel", "warn"], env=env,
                                  stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 90
        while w.health() is None and time.monotonic() < deadline:
            assert w.proc.poll() is None, w.log.read_text()[-3000:]
            time.sleep(0.2)
        assert w.health() is not None, w.log.read_text()[-3000:]
        state = json.loads((tmp_path / "data" / "worker.json").read_text())
        assert state["pid"] == w.proc.pid and "sql_url" not in state, state
        assert f"PHASEMETER_SQL_PORT={impostor.server_address[1]}" in w.log.read_text()
        readers = [sql_cli(env, ["SELECT count() FROM generations"]),
                   subprocess.run([sys.executable, "-m", "phasemeter", "query", "bands", "--from", "-6h"], env=env,
                                  capture_output=True, timeout=120)]
        assert len(readers) == 2
        for out in readers:
            assert out.returncode != 0 and b"impostor" not in out.stdout, out
            assert b"PHASEMETER_SQL_PORT" in out.stderr, out.stderr
        assert asked == []
    finally:
        w.stop()
        impostor.shutdown()
