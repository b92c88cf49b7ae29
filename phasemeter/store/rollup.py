"""The rollup backfill, built from the materialized view's own query.

A backfill that copied the view's SELECT could drift from it (a migration
changing the view would leave the backfill writing old-shaped states). So
there is one definition, the view in the store, and `backfill` wraps it:
sql/rollup_backfill.sql holds the window filter and the skip of cells the
rollup already has, with a marker where the view's SELECT goes. The SELECT
is the store's own DDL text, never user input; every value stays a bound
parameter.
"""

from __future__ import annotations

from datetime import datetime

from phasemeter.store.client import StoreError, load_sql

VIEW = "generations_minute_mv"


def view_select(client, view: str = VIEW) -> str:
    """The SELECT of a materialized view, as the store holds it."""
    rows = client.query(
        "SELECT as_select FROM system.tables WHERE database = currentDatabase() AND name = {name:String}",
        parameters={"name": view}).result_rows
    if not rows or not rows[0][0]:
        raise StoreError(f"the store has no {view}: run `phasemeter migrate`")
    return rows[0][0]


def wrapped(client, sql_name: str, view: str = VIEW) -> str:
    """sql/<sql_name>.sql with the view's own SELECT in place of its marker
    `(/* <view> */)`: the backfills and the SLO repair (sql/slo_*.sql)."""
    marker = f"(/* {view} */)"
    wrapper = load_sql(sql_name)
    if wrapper.count(marker) != 1:
        raise AssertionError(f"sql/{sql_name}.sql must hold {marker} exactly once")
    return wrapper.replace(marker, f"({view_select(client, view)})")


def backfill_sql(client) -> str:
    return wrapped(client, "rollup_backfill")


def backfill(client, start: datetime, end: datetime, settings: dict | None = None) -> None:
    """Rebuild the cells of [start, end) (whole minutes, naive UTC) that the
    rollup lacks, from raw rows."""
    client.command(backfill_sql(client), parameters={"start": start, "end": end}, settings=settings or {})
