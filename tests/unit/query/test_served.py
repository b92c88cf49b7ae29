"""phasemeter.query.served: one CLI read command run in a worker thread."""

from __future__ import annotations

import io
import sys
import threading

import pytest

from phasemeter.query import served
from phasemeter.query.runner import open_runner
from phasemeter.settings import Settings
from phasemeter.timeparse import ArgError


class FakeRunner:
    def __init__(self):
        self.closed = False

    def df(self, name, params):
        return (name, params)

    def close(self):
        self.closed = True


def test_a_served_command_gets_the_worker_runner_and_cannot_close_it(tmp_path):
    runner = FakeRunner()
    with served.serving(runner, {}):
        lent = open_runner(Settings(data_dir=str(tmp_path)), via="http://ignored:1")
        assert lent.df("q", {"a": 1}) == ("q", {"a": 1})
        lent.close()
    assert not runner.closed
    assert served.current() is None


def test_output_and_files_are_captured_for_the_serving_thread_only(tmp_path, capsys):
    seen = {}

    def other_thread():
        print("worker's own line")

    with served.serving(FakeRunner(), {}) as capture:
        print("table")
        print("warning", file=sys.stderr)
        t = threading.Thread(target=other_thread)
        t.start()
        t.join()
        path = served.write_file(tmp_path / "sub" / "c.png", b"\x89PNG")
        seen["path"] = path
    assert capture.stdout.getvalue() == "table\n" and capture.stderr.getvalue() == "warning\n"
    assert capture.files == {str(tmp_path / "sub" / "c.png"): b"\x89PNG"}
    assert not (tmp_path / "sub").exists()  # the worker writes nothing: the CLI writes the file
    assert seen["path"] == tmp_path / "sub" / "c.png"
    assert "worker's own line" in capsys.readouterr().out


def test_outside_a_served_command_files_go_to_disk_and_a_bad_path_names_the_flag(tmp_path):
    assert served.write_file(tmp_path / "a" / "b.html", b"<!DOCTYPE html>").read_bytes() == b"<!DOCTYPE html>"
    (tmp_path / "f").write_text("a file, not a folder")
    with pytest.raises(ArgError, match=r"^--out .*f/x.png: cannot write it"):
        served.write_file(tmp_path / "f" / "x.png", b"")



def test_the_stream_stand_in_answers_like_the_stream_it_replaced():
    class Terminal(io.StringIO):
        def fileno(self):
            return 7

        def isatty(self):
            return True

    stream = served._PerThread("stdout", Terminal())
    stream.write("worker's own line\n")
    assert stream.fileno() == 7 and stream.isatty()  # faulthandler, colour checks: as before
    assert stream._fallback.getvalue() == "worker's own line\n"
