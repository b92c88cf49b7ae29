"""Migrations, schema/derive agreement and bound parameters on a real chDB store."""

import clickhouse_connect
import pytest

from phasemeter.store import migrate as mig
from phasemeter.stream_jobs.derive import ROW_COLUMNS
from phasemeter.stream_jobs.sink import DLQ_COLUMNS

pytestmark = pytest.mark.integration


@pytest.fixture
def client(tmp_path):
    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path}/store")
    c.command("CREATE DATABASE IF NOT EXISTS t_store")
    c.database = "t_store"
    yield c
    c.close()


def columns(client, table):
    return [r[0] for r in client.query(
        "SELECT name FROM system.columns WHERE database = currentDatabase() AND table = {t:String} "
        "ORDER BY position", parameters={"t": table}).result_rows]


def test_migrate_applies_once_and_tables_match_the_code(client):
    first = mig.migrate(client)
    assert [m.version for m in first] == [m.version for m in mig.discover()]
    assert mig.migrate(client) == [] and mig.pending(client) == []
    assert columns(client, "generations") == list(ROW_COLUMNS) + ["ingested_at"]
    assert columns(client, "dead_letters") == list(DLQ_COLUMNS)


def test_edited_migration_is_refused(client, monkeypatch):
    mig.migrate(client)
    real = mig.discover()
    edited = [mig.Migration(m.version, m.name, m.sql.replace("UInt32", "UInt64", 1)) if m.version == 1 else m
              for m in real]
    monkeypatch.setattr(mig, "discover", lambda: edited)
    with pytest.raises(RuntimeError, match="changed after it was applied"):
        mig.migrate(client)


def test_a_reworded_comment_is_not_a_schema_change(client, monkeypatch):
    mig.migrate(client)
    real = mig.discover()
    reworded = [mig.Migration(m.version, m.name, "-- reworded\n" + m.sql + "\n-- and more") for m in real]
    monkeypatch.setattr(mig, "discover", lambda: reworded)
    assert mig.migrate(client) == []


def test_stores_migrated_with_whole_text_checksums_stay_valid(client):
    # Stores migrated before comments were exempt recorded a checksum of the
    # whole file, and two shipped files have had their comments reworded since.
    mig.migrate(client)
    client.command("TRUNCATE TABLE schema_migrations")
    legacy = {1: "371f2d7c3b68f346", 3: "16b5ecbbc8efdcb1"}
    rows = [[m.version, m.name, legacy.get(m.version, m.legacy_checksum)] for m in mig.discover()]
    client.insert("schema_migrations", rows, column_names=["version", "name", "checksum"])
    assert mig.migrate(client) == [] and mig.pending(client) == []


def test_filters_are_bound_not_spliced(tmp_path, capsys):
    from phasemeter.cli.main import main

    base = ["--data-dir", str(tmp_path / "d"), "--database", "inj"]
    assert main(["migrate", *base]) == 0
    for evil in ["x' OR 1=1 --", "'; DROP TABLE generations; --", "\\' OR ''='"]:
        for path in ("--exact", "--rollup"):
            capsys.readouterr()
            assert main(["query", "bands", "--from", "-1d", "--model", evil, path, "--format", "json", *base]) == 0
            assert '"rows": []' in capsys.readouterr().out
            # A bucket must be one of the labels: refused before any SQL runs.
            assert main(["query", "bands", "--from", "-1d", "--bucket", evil, path, *base]) == 2
            assert "not an input bucket" in capsys.readouterr().err
        capsys.readouterr()
        assert main(["latency", "--from", "-1d", "--model", evil, "--format", "json", *base]) == 0
        assert '"rows": []' in capsys.readouterr().out
    assert main(["migrate", "--status", *base]) == 0  # tables still there
    assert "0 pending" in capsys.readouterr().out


def test_migrate_sets_raw_retention_from_settings(tmp_path, capsys, monkeypatch):
    from phasemeter.cli.main import main

    assert main(["migrate", "--data-dir", str(tmp_path / "d"), "--database", "ttl"]) == 0
    monkeypatch.setenv("PHASEMETER_RAW_TTL_DAYS", "7")
    monkeypatch.setenv("PHASEMETER_ROLLUP_TTL_DAYS", "30")
    assert main(["migrate", "--data-dir", str(tmp_path / "d"), "--database", "ttl"]) == 0
    out = capsys.readouterr().out
    assert "raw generations kept 7 days" in out and "rollup generations kept 30 days" in out
    assert "per-minute SLO counts kept 30 days" in out
    c = clickhouse_connect.get_client(dsn=f"chdb://{tmp_path}/d/store")
    try:
        ddl = dict(c.query("SELECT name, create_table_query FROM system.tables WHERE database = 'ttl'").result_rows)
    finally:
        c.close()
    assert "toIntervalDay(_CAST(7, 'UInt32'))" in ddl["generations"]
    for tier in ("minute", "hour", "hour3", "day"):  # every tier of the rollup keeps the same days
        assert "toIntervalDay(_CAST(30, 'UInt32'))" in ddl[f"generations_{tier}"], tier
    assert "toIntervalDay(_CAST(30, 'UInt32'))" in ddl["slo_minute"]
