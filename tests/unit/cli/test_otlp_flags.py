"""`phasemeter otlp`'s limit flags: a bad value names its flag and exits 2
before anything is bound or connected."""

from __future__ import annotations

import pytest

from phasemeter.cli.main import main


@pytest.mark.parametrize("argv,flag", [
    (["--max-spans", "20000"], "--max-spans"),            # over the default --queue-size: could never be queued
    (["--max-spans", "0"], "--max-spans"),
    (["--queue-size", "100", "--max-spans", "101"], "--max-spans"),
    (["--workers", "0"], "--workers"),
    (["--workers", "5000"], "--workers"),
    (["--read-timeout", "0"], "--read-timeout"),
    (["--read-timeout", "nan"], "--read-timeout"),
    (["--read-timeout", "inf"], "--read-timeout"),
])
def test_a_bad_limit_names_its_flag_and_exits_2(argv, flag, capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:1")  # never reached
    assert main(["otlp", "--grpc-port", "0", "--port", "0", *argv]) == 2
    assert flag in capsys.readouterr().err
    assert not any(tmp_path.iterdir())
