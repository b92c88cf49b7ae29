"""Settings, time arguments and CLI errors that name the bad flag."""

from datetime import datetime, timezone

import pytest

from phasemeter.cli.main import main
from phasemeter.settings import Settings, redact
from phasemeter.timeparse import ArgError, auto_step, parse_duration, parse_time, window

NOW = datetime(2026, 11, 29, 12, 0, tzinfo=timezone.utc)


def test_env_and_overrides():
    s = Settings.from_env({"PHASEMETER_BATCH_ROWS": "77", "CLICKHOUSE_URL": "http://u:pw@h:8123/x"},
                          database="other")
    assert s.batch_rows == 77 and s.database == "other" and not s.is_embedded


def test_bad_env_value_names_the_variable():
    with pytest.raises(ValueError, match="PHASEMETER_BATCH_ROWS"):
        Settings.from_env({"PHASEMETER_BATCH_ROWS": "many"})


def test_embedded_default_is_absolute_chdb_path(tmp_path):
    s = Settings.from_env({"PHASEMETER_DATA_DIR": str(tmp_path)})
    assert s.store_dsn == f"chdb://{tmp_path}/store" and s.is_embedded


def test_secrets_are_masked_everywhere():
    assert redact("https://admin:hunter2@ch:8443/db") == "https://admin:***@ch:8443/db"
    s = Settings.from_env({"CLICKHOUSE_URL": "https://admin:hunter2@ch:8443/db",
                           "KAFKA_SASL_PASSWORD": "hunter2"})
    assert "hunter2" not in repr([v for _, v, _ in s.describe()])


def test_every_setting_has_env_and_doc():
    described = Settings().describe()
    assert len(described) > 10, "the Kafka, store and worker settings at least"
    for env, _, doc in described:
        assert env and len(doc) > 10


def test_time_parsing():
    assert parse_time("now", "--to", NOW) == NOW
    assert parse_time("-90m", "--from", NOW) == datetime(2026, 11, 29, 10, 30, tzinfo=timezone.utc)
    assert parse_time("2026-11-29T10:00:00Z", "--from").hour == 10
    assert parse_time("2026-11-29 10:00", "--from").tzinfo is not None  # naive means UTC
    assert parse_duration("5m", "--step") == 300


@pytest.mark.parametrize("start,end,flag", [("yesterday", "now", "--from"), ("-1h", "soon", "--to"),
                                            ("now", "-1h", "--to")])
def test_bad_window_names_flag(start, end, flag):
    with pytest.raises(ArgError, match=flag):
        window(start, end, NOW)


def test_auto_step_targets_a_few_hundred_points():
    for hours in (0.25, 1, 24, 24 * 7, 24 * 30, 24 * 90):
        t0 = NOW.replace(hour=0)
        t1 = t0.fromtimestamp(t0.timestamp() + hours * 3600, timezone.utc)
        points = (t1 - t0).total_seconds() / auto_step(t0, t1)
        assert 30 <= points <= 400, (hours, points)


@pytest.mark.parametrize("argv,needle", [
    (["query", "bands", "--from", "tuesday"], "--from 'tuesday'"),
    (["query", "bands", "--step", "7q"], "--step '7q'"),
    (["query", "bands", "--from", "-1h", "--to", "-2h"], "--to"),
    (["query", "bands", "--columns", "decode_p2,prefill_p1"], "--columns: unknown column(s) 'decode_p2'"),
    (["latency", "--columns", "ttft_p95"], "--columns: unknown column(s) 'ttft_p95'"),
])
def test_cli_errors_name_the_flag_and_exit_2(argv, needle, capsys, tmp_path):
    rc = main(argv + ["--data-dir", str(tmp_path / "data")])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err
    assert not (tmp_path / "data").exists()  # a refused command creates nothing


def test_cli_bad_choice_is_argparse_error(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["query", "bands", "--format", "xml"])
    assert exc.value.code == 2 and "--format" in capsys.readouterr().err
