"""phasemeter.query.runner: where a reader reads. One protocol (ClickHouse SQL
through clickhouse-connect); only the address differs."""

from __future__ import annotations

import json
import os

import pytest

from phasemeter.query.remote import worker_state, write_state
from phasemeter.query.runner import read_settings
from phasemeter.settings import Settings
from phasemeter.store.client import StoreError


def _state(tmp_path, **info):
    (tmp_path / "worker.json").write_text(json.dumps(info))


def test_without_a_worker_the_embedded_store_is_read_directly(tmp_path):
    settings = Settings(data_dir=str(tmp_path))
    assert read_settings(settings).store_dsn == f"chdb://{tmp_path / 'store'}"


def test_a_live_worker_is_read_through_its_sql_interface_as_a_server_is(tmp_path):
    write_state(tmp_path, "http://127.0.0.1:6066", sql_url="http://127.0.0.1:8124")
    got = read_settings(Settings(data_dir=str(tmp_path), database="pm"))
    assert (got.store_dsn, got.is_embedded, got.database) == ("http://127.0.0.1:8124", False, "pm")


def test_a_dead_worker_state_is_not_followed(tmp_path):
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _state(tmp_path, pid=int(done.stdout), url="http://127.0.0.1:6066", sql_url="http://127.0.0.1:8124")
    assert worker_state(tmp_path) is None
    assert read_settings(Settings(data_dir=str(tmp_path))).is_embedded


def test_a_worker_without_an_sql_interface_is_an_error_naming_it(tmp_path):
    _state(tmp_path, pid=os.getpid(), url="http://127.0.0.1:6066")
    with pytest.raises(StoreError, match=rf"a worker \(pid {os.getpid()}\) holds the store .* no ClickHouse HTTP"):
        read_settings(Settings(data_dir=str(tmp_path)))


def test_via_and_a_server_dsn_win_over_the_worker_state(tmp_path):
    write_state(tmp_path, "http://127.0.0.1:6066", sql_url="http://127.0.0.1:8124")
    settings = Settings(data_dir=str(tmp_path))
    assert read_settings(settings, via="http://10.0.0.5:8123").store_dsn == "http://10.0.0.5:8123"
    server = Settings(data_dir=str(tmp_path), clickhouse_url="https://ch.example:8443")
    assert read_settings(server).store_dsn == "https://ch.example:8443"


class _Setting:
    def __init__(self, readonly: int):
        self.readonly = readonly


class _Target:
    """What clickhouse-connect learned of a target's settings at connect (its
    system.settings rows): the worker's interface reports every one fixed."""

    def __init__(self, readonly: int):
        self.server_settings = {"merge_tree_min_rows_for_concurrent_read": _Setting(readonly),
                                "merge_tree_min_bytes_for_concurrent_read": _Setting(readonly)}


def test_query_tuning_is_sent_only_where_the_target_lets_it_change():
    from phasemeter.query.runner import SPLIT_SMALL_READS, changeable

    assert changeable(_Target(readonly=0), SPLIT_SMALL_READS) == SPLIT_SMALL_READS
    assert changeable(_Target(readonly=1), SPLIT_SMALL_READS) == {}


def test_the_worker_state_names_its_database_and_a_read_of_another_one_stops(tmp_path, monkeypatch):
    """The reader checks its database against the worker's state file, without
    a round trip: the worker's web URL here answers nothing."""
    from phasemeter.cli.main import build_parser, check_worker_database
    from phasemeter.timeparse import ArgError

    write_state(tmp_path, "http://127.0.0.1:9", database="theirs", sql_url="http://127.0.0.1:9")
    assert worker_state(tmp_path)["database"] == "theirs"
    monkeypatch.setenv("PHASEMETER_DATABASE", "mine")
    args = build_parser().parse_args(["query", "bands", "--data-dir", str(tmp_path)])
    with pytest.raises(ArgError, match="reads database 'theirs'"):
        check_worker_database(args, Settings(data_dir=str(tmp_path), database="mine"))
    check_worker_database(args, Settings(data_dir=str(tmp_path), database="theirs"))


def test_reads_through_the_local_worker_ask_for_uncompressed_answers(tmp_path):
    from phasemeter.query.runner import client_options, read_settings

    def options(settings, via=None):
        return client_options(settings, read_settings(settings, via), via)

    settings = Settings(data_dir=str(tmp_path))
    assert options(settings) == {}  # the store opened here: nothing goes over HTTP
    write_state(tmp_path, "http://127.0.0.1:6066", sql_url="http://127.0.0.1:8124")
    assert options(settings) == {"compress": False}  # the worker on this machine
    assert options(settings, via="http://10.0.0.5:8123") == {}  # elsewhere: the library's default
    server = Settings(data_dir=str(tmp_path), clickhouse_url="https://ch.example:8443")
    assert options(server) == {}
