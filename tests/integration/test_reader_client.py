"""A reader's client (phasemeter.query.runner.open_runner) on a real chDB
store: the named queries run, and nothing it sends can write."""

from __future__ import annotations

from datetime import datetime

import pytest
from stores import migrated_client

from phasemeter.query.runner import open_runner
from phasemeter.settings import Settings

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(tmp_path):
    with migrated_client(tmp_path, "pm"):
        pass  # migrated, then closed: a chDB path opens in one process client at a time
    return Settings(data_dir=str(tmp_path), database="pm")


def test_a_reader_reads_and_never_writes(settings):
    runner = open_runner(settings)
    try:
        assert int(runner.df("count_generations", {})["n"].iloc[0]) == 0
        assert runner.client.get_client_setting("readonly") == "2"
        for sql in ("INSERT INTO generations (request_id) VALUES ('x')", "CREATE TABLE t (a Int8) ENGINE = Memory",
                    "DROP TABLE generations", "TRUNCATE TABLE generations"):
            with pytest.raises(Exception, match="readonly"):
                runner.client.command(sql)
        # a named query's own SETTINGS clause stays allowed (readonly=2, not 1)
        assert runner.client.query("SELECT 1 SETTINGS max_threads = 1").result_rows == [(1,)]
        assert int(runner.df("count_generations", {})["n"].iloc[0]) == 0
    finally:
        runner.close()


def test_the_rollup_reads_split_small_reads_across_threads_on_chdb(settings):
    from phasemeter.query.runner import SPLIT_SMALL_READS

    runner = open_runner(settings)
    try:
        params = {"start": datetime(2026, 1, 1), "end": datetime(2026, 1, 2),
                  "step_s": 3600, "models": [], "buckets": []}
        tiers = {f"{t}_{e}": params["end"] for t in ("hour", "hour3", "day") for e in ("from", "to")}
        assert runner.df("bands_rollup", params | tiers).empty
        assert runner._settings["bands_rollup"] == SPLIT_SMALL_READS  # chDB lets them change: sent
    finally:
        runner.close()


def test_opening_a_reader_on_an_unmigrated_store_creates_nothing(tmp_path):
    """A reader (open_runner) that finds a store not yet migrated says so, and
    leaves it as it was: no table of the migrator's, no DDL at all (the
    worker's SQL interface refuses DDL, so a reader that sent any could not
    read through it)."""
    import clickhouse_connect

    from phasemeter.store.client import StoreError

    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path}/store")
    c.command("CREATE DATABASE pm")
    c.close()
    with pytest.raises(StoreError, match="pending migration"):
        open_runner(Settings(data_dir=str(tmp_path), database="pm"))
    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path}/store")
    try:
        assert c.query("SELECT name FROM system.tables WHERE database = 'pm'").result_rows == []
    finally:
        c.close()
