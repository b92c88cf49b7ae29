"""phasemeter.cli.delegate: a read command sent to the worker that owns the
store, against a stand-in worker (the real one: tests/integration/test_read_paths.py)."""

from __future__ import annotations

import base64
import contextlib
import io
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from phasemeter.cli import delegate
from phasemeter.cli.main import build_parser, main, serve
from phasemeter.query import served
from phasemeter.query.remote import write_state
from phasemeter.settings import Settings


class StandIn:
    """Answers POST /query/command with `reply` (or `status`), records requests."""

    def __init__(self, reply: dict | None = None, status: int = 200):
        self.reply, self.status, self.requests = reply, status, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                size = int(self.headers.get("Content-Length") or 0)
                outer.requests.append((self.path, json.loads(self.rfile.read(size)) if size else None))
                body = json.dumps(outer.reply if outer.status == 200 else {"error": "no"}).encode()
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST  # HttpRunner's /query/named, when the CLI runs a command itself

            def log_message(self, *a):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()


@pytest.fixture
def owned(tmp_path, monkeypatch):
    """A data dir whose store a (stand-in) worker owns: this process's pid, its URL."""
    for k in list(os.environ):
        if k.startswith(("PHASEMETER_", "CLICKHOUSE_")):
            monkeypatch.delenv(k)
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "data"))
    stand_in = StandIn()
    write_state(tmp_path / "data", stand_in.url)
    yield stand_in
    stand_in.close()


def run(argv):
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def test_the_worker_answer_is_printed_and_its_files_written_here(owned, tmp_path):
    png = tmp_path / "out" / "c.png"
    owned.reply = {"rc": 0, "stdout": f"wrote {png} (0 rows)\n", "stderr": "note\n",
                   "files": {str(png): base64.b64encode(b"\x89PNG...").decode()}}
    assert run(["chart", "--from", "-2h", "--out", str(png)]) == (0, f"wrote {png} (0 rows)\n", "note\n")
    assert png.read_bytes() == b"\x89PNG..."
    path, request = owned.requests[0]
    assert path == "/query/command"
    assert request["argv"] == ["chart", "--from=-2h", "--out", str(png)]  # as typed, relative times glued
    assert request["settings"]["data_dir"] == str(tmp_path / "data")


def test_the_worker_exit_code_is_the_cli_exit_code_and_a_failed_flag_creates_nothing(owned, tmp_path):
    owned.reply = {"rc": 2, "stdout": "", "stderr": "phasemeter chart: error: --out x.txt: ...\n", "files": {}}
    assert run(["chart", "--out", "x.txt"]) == (2, "", "phasemeter chart: error: --out x.txt: ...\n")
    assert not (tmp_path / "x.txt").exists()


def test_files_named_by_flags_travel_with_the_command_and_secrets_do_not(owned, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.toml").write_text("[[slo]]\n")
    monkeypatch.setenv("KAFKA_SASL_PASSWORD", "hunter2")
    owned.reply = {"rc": 0, "stdout": "", "stderr": "", "files": {}}
    run(["slo", "--slos", "mine.toml"])
    run(["alerts", "check", "--rules", "gone.toml", "--slos", "example"])
    (_, slo), (_, alerts) = owned.requests
    assert slo["files"] == {"mine.toml": {"text": "[[slo]]\n"}}
    assert alerts["files"] == {"gone.toml": {"error": "No such file or directory"}}  # `example`: shipped
    assert "hunter2" not in json.dumps(owned.requests) and "kafka_sasl_password" not in slo["settings"]


def test_not_served_when_the_worker_cannot_the_command_runs_here_as_before(owned):
    owned.status = 404  # an older worker: no /query/command, and /query/named refused too
    code, out, err = run(["query", "bands"])
    assert code == 1 and "refused query" in err and out == ""  # HttpRunner's error, as before
    assert [p for p, _ in owned.requests][0] == "/query/command"


@pytest.mark.parametrize("argv", [["migrate"], ["analytics", "backfill", "--from=-1h"], ["kafka", "stop"],
                                  ["alerts", "check", "--webhook", "http://127.0.0.1:9/hook"], ["inflight"]])
def test_only_read_commands_are_sent_and_a_worker_runs_nothing_else(argv, capsys):
    assert not delegate.servable(build_parser().parse_args(argv))
    with served.serving(object(), {}) as capture:
        code = serve({"argv": argv, "settings": {}, "files": {}})
    assert code == 2 and "is not a read command a worker runs" in capture.stderr.getvalue()


def test_a_bad_flag_in_a_request_is_argparse_exit_2():
    with served.serving(object(), {}) as capture:
        assert serve({"argv": ["query", "bands", "--format", "xml"], "settings": {}, "files": {}}) == 2
    assert "invalid choice: 'xml'" in capture.stderr.getvalue()


def test_the_worker_builds_the_cli_settings_from_the_request():
    sent = delegate.request_for(build_parser().parse_args(["query", "bands"]), ["query", "bands"],
                                Settings(bucket_edges="0,100,1000", data_dir="/x"))
    assert delegate.settings_of(json.loads(json.dumps(sent))) == Settings(bucket_edges="0,100,1000", data_dir="/x")


@pytest.mark.parametrize("argv", [["query", "bands", "--from=-1m"], ["latency"], ["slo", "--slos", "example"],
                                  ["alerts", "check"], ["alerts", "backtest"], ["dlq", "inspect"],
                                  ["chart", "--out", "c.html"]], ids=" ".join)
def test_a_read_through_the_worker_imports_no_heavy_dependency(argv, tmp_path):
    """The goal (docs/reads-through-the-worker.md): with the store owned by a worker, the CLI
    process loads neither chDB, clickhouse-connect nor pandas/numpy/pyarrow
    (nor matplotlib for a chart: the worker draws it). The real worker's
    answer is checked the same way in tests/integration/test_read_paths.py."""
    from test_startup_imports import explain, probe

    stand_in = StandIn({"rc": 0, "stdout": "answer\n", "stderr": "", "files": {}})
    try:
        write_state(tmp_path / "data", stand_in.url)  # this process's pid: a live owner
        result = probe(argv, tmp_path)
    finally:
        stand_in.close()
    assert (result["code"], result["out"]) == (0, "answer\n"), result
    assert result["heavy"] == [], explain(result)
