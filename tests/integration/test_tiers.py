"""The rollup's tiers are one definition: the hour, 3-hour and day tables and
views (schema/0014, 0019, 0015) are the minute tier's (schema/0003) but for the time
function and the partition. Checked on the store, as the migrator left it,
so a later migration that changes one tier and not the others fails here."""

from __future__ import annotations

import pytest

from phasemeter.store import rollup
from stores import migrated_client

pytestmark = pytest.mark.integration
TIME_FUNCTION = {"minute": "toStartOfMinute(toDateTime(ts, 'UTC'))", "hour": "toStartOfHour(toDateTime(ts, 'UTC'))",
                 "hour3": "toStartOfInterval(toDateTime(ts, 'UTC'), toIntervalHour(3))",
                 "day": "toStartOfDay(toDateTime(ts, 'UTC'))"}


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with migrated_client(tmp_path_factory.mktemp("tiers"), "t_tiers") as c:
        yield c


def _columns(client, table: str) -> list[tuple]:
    return client.query("SELECT name, type, compression_codec FROM system.columns WHERE database = currentDatabase() "
                        "AND table = {t:String} ORDER BY position", parameters={"t": table}).result_rows


def _table(client, table: str) -> tuple:
    return client.query("SELECT engine, sorting_key, partition_key FROM system.tables WHERE database = "
                        "currentDatabase() AND name = {t:String}", parameters={"t": table}).result_rows[0]


def test_every_tier_has_the_minute_tiers_columns_key_and_engine(client):
    want = _columns(client, "generations_minute")
    assert len(want) == 25
    assert [t.name for t in rollup.COARSE] == ["hour", "hour3", "day"]
    for tier in rollup.COARSE:
        assert _columns(client, tier.table) == want, tier
        engine, key, _ = _table(client, tier.table)
        assert (engine, key) == _table(client, "generations_minute")[:2]


def test_every_tiers_view_is_the_minute_view_but_for_its_time_function(client):
    minute = rollup.view_select(client, rollup.MINUTE)
    assert minute.count(TIME_FUNCTION["minute"]) == 1
    assert [t.name for t in rollup.COARSE] == ["hour", "hour3", "day"]
    for tier in rollup.COARSE:
        select = rollup.view_select(client, tier)
        assert select.count(TIME_FUNCTION[tier.name]) == 1, tier
        assert select.replace(TIME_FUNCTION[tier.name], TIME_FUNCTION["minute"]) == minute, tier


def test_each_tiers_view_reads_raw_rows_not_another_tier(client):
    # Chained off the minute table, a tier would count a repaired (deleted
    # and rebuilt) minute cell twice: stream_jobs/ledger.py.
    def views_on(table: str) -> list[str]:
        return client.query("SELECT dependencies_table FROM system.tables WHERE database = currentDatabase() "
                            "AND name = {t:String}", parameters={"t": table}).result_rows[0][0]

    assert {t.view for t in rollup.TIERS} <= set(views_on("generations"))
    assert len(rollup.TIERS) == 4  # the minute tier and three coarse ones
    for tier in rollup.TIERS:
        assert views_on(tier.table) == [], tier


def test_the_code_knows_every_tier_the_store_holds(client):
    # A tier table the code does not list would never be repaired after a
    # crash nor given the retention; one it lists but the store lacks fails
    # every rollup query.
    held = {r[0] for r in client.query(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine = 'AggregatingMergeTree' "
        "AND startsWith(name, 'generations_')").result_rows}
    assert held == {t.table for t in rollup.TIERS} == {f"generations_{n}" for n in ("minute", "hour", "hour3", "day")}
