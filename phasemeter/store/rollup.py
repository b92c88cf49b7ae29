"""The rollup's tiers, their backfill and their repair from raw rows.

Tiers: `generations_minute` (schema/0003) and the coarser `generations_hour`,
`generations_hour3`, `generations_day` (schema/0014, 0019, 0015), each fed by its own materialized view
from `generations`, never one tier from another: the crash repair below
deletes an unequal cell and rebuilds it from raw, and a view chained off the
minute table would count that rebuild again in the hour table.

A backfill that copied a view's SELECT could drift from it (a migration
changing the view would leave the backfill writing old-shaped states). So
there is one definition, each view in the store, and `backfill` wraps it:
sql/rollup_backfill.sql holds the window filter and the skip of cells the
tier already has, with a marker where the view's SELECT goes. The SELECT is
the store's own DDL text, never user input; every value, and the tier's
table name, stays a bound parameter ({table:Identifier}).

`repair` makes one tier equal to raw on a set of its cells (or on every
cell of a window): cells whose `n` differs from the raw count at the tier's
grain are deleted and rebuilt by the backfill, which fills only cells the
tier lacks. The worker runs it after a crash (stream_jobs/ledger.py) and
`phasemeter analytics backfill` runs it for the coarser tiers.

`repair_cells`, the worker's check of each re-read batch, first asks every
tier at once (`tier_mismatches`, one statement that reads raw once): after a
resume it runs on every batch of the re-read window, and almost always finds
all equal. Only a tier found unequal then gets `repair`, on all of its cells,
as when each tier was asked on its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta, timezone

from phasemeter.analytics.paths import TIER_GRAINS
from phasemeter.store.client import StoreError, load_sql
from phasemeter.store.slices import MAX_BOUND_CHARS, cell_chars, slices

_MARKER = "(/* the tier's materialized view SELECT */)"


@dataclass(frozen=True)
class Tier:
    name: str     # minute | hour | hour3 (3 hours) | day
    grain_s: int

    @property
    def table(self) -> str:
        return f"generations_{self.name}"

    @property
    def view(self) -> str:
        return f"generations_{self.name}_mv"

    def floor(self, t: datetime) -> datetime:
        """The start of t's cell (t naive or aware UTC; returns naive UTC)."""
        s = int(utc(t).timestamp()) // self.grain_s * self.grain_s
        return datetime.fromtimestamp(s, timezone.utc).replace(tzinfo=None)

    def ceil(self, t: datetime) -> datetime:
        lo = self.floor(t)
        return lo if lo == naive(t) else lo + timedelta(seconds=self.grain_s)


MINUTE = Tier("minute", 60)
TIERS: tuple[Tier, ...] = (MINUTE, *(Tier(name, grain) for name, grain in TIER_GRAINS))
COARSE: tuple[Tier, ...] = TIERS[1:]
_BY_GRAIN = {tier.grain_s: tier for tier in TIERS}

Cell = tuple[str, str, datetime]  # model, input_bucket, the cell's first minute


def utc(t: datetime) -> datetime:
    """A datetime in UTC; a naive one is taken as UTC (the store's DateTime columns are)."""
    return t.replace(tzinfo=timezone.utc) if t.tzinfo is None else t.astimezone(timezone.utc)


def naive(t: datetime) -> datetime:
    """`utc`, without its zone: as a DateTime parameter is bound."""
    return utc(t).replace(tzinfo=None)


def view_select(client, tier: Tier = MINUTE) -> str:
    """The SELECT of a tier's materialized view, as the store holds it."""
    return select_of(client, tier.view)


def select_of(client, view: str) -> str:
    """The SELECT of a materialized view (a tier's, or the SLO counts')."""
    rows = client.query(
        "SELECT as_select FROM system.tables WHERE database = currentDatabase() AND name = {name:String}",
        parameters={"name": view}).result_rows
    if not rows or not rows[0][0]:
        raise StoreError(f"the store has no {view}: run `phasemeter migrate`")
    return rows[0][0]


def wrapped(client, sql_name: str, view: str) -> str:
    """sql/<sql_name>.sql with the view's own SELECT in place of its marker
    `(/* <view> */)`: the SLO counts' repair (sql/slo_*.sql)."""
    marker = f"(/* {view} */)"
    wrapper = load_sql(sql_name)
    if wrapper.count(marker) != 1:
        raise AssertionError(f"sql/{sql_name}.sql must hold {marker} exactly once")
    return wrapper.replace(marker, f"({select_of(client, view)})")


def backfill_sql(client, tier: Tier = MINUTE) -> str:
    wrapper = load_sql("rollup_backfill")
    if wrapper.count(_MARKER) != 1:
        raise AssertionError(f"sql/rollup_backfill.sql must hold {_MARKER} exactly once")
    return wrapper.replace(_MARKER, f"({view_select(client, tier)})")


def backfill(client, start: datetime, end: datetime, settings: dict | None = None, tier: Tier = MINUTE) -> None:
    """Rebuild the cells of [start, end) (whole cells of the tier, naive UTC)
    that the tier lacks, from raw rows."""
    client.command(backfill_sql(client, tier), parameters={"table": tier.table, "start": start, "end": end},
                   settings=settings or {})


def mismatches(client, start: datetime, end: datetime, cells=frozenset(), tier: Tier = MINUTE) -> list[tuple]:
    """[(model, bucket, cell start UTC, raw_n, tier_n)] where the tier != raw,
    in [start, end); `cells` (at the tier's grain) limits the check."""
    params = {"table": tier.table, "grain_s": tier.grain_s, "start": naive(start), "end": naive(end),
              "cells": [(m, b, naive(t)) for m, b, t in sorted(cells)]}
    rows = client.query(load_sql("rollup_mismatches"), parameters=params).result_rows
    return [(m, b, utc(t), int(r), int(n)) for m, b, t, r, n in rows]


def repair(client, tier: Tier, start: datetime, end: datetime, cells=frozenset(), attempts: int = 3) -> list[tuple]:
    """Make `tier` equal raw on `cells` of [start, end) (empty: every cell
    of the window); returns the mismatches found.

    Delete the unequal cells' states, then rebuild them from raw with the
    backfill query, which fills only cells the tier lacks (cells it lacks
    entirely need no delete). A crash between the two leaves the cell short,
    and the re-read batch finds it again: the repair converges.
    """
    def fix(bad):
        held = [(m, b, naive(t)) for m, b, t, _, n in bad if n]
        if held:
            client.command(load_sql("rollup_delete_cells"), parameters={"table": tier.table, "cells": held},
                           settings={"lightweight_deletes_sync": 2})
        lo = min(naive(t) for _, _, t, _, _ in bad)
        hi = max(naive(t) for _, _, t, _, _ in bad) + timedelta(seconds=tier.grain_s)
        # No block dedup here: an identical rebuild of this cell may already be
        # in the dedup window from an earlier repair whose states were deleted.
        backfill(client, lo, hi, settings={"insert_deduplicate": 0}, tier=tier)

    return converge(lambda: mismatches(client, start, end, cells, tier), fix, attempts, tier.table)


def converge(find, fix, attempts: int, what: str) -> list[tuple]:
    """find() -> unequal cells; fix(them); until none is left. Checked again
    after each pass, because another worker sharing a server store may insert
    into the same cell meanwhile. Returns every mismatch found."""
    found: list[tuple] = []
    for _ in range(attempts):
        bad = find()
        if not bad:
            return found
        found += bad
        fix(bad)
    raise RuntimeError(f"{what} still unequal to raw after {attempts} repairs: {bad[:5]}")


def repair_cells(client, cells: set[Cell], attempts: int = 3, limit: int = MAX_BOUND_CHARS) -> list[tuple]:
    """Repair every tier on the cells that minute cells `cells` fall in;
    returns [(tier, model, bucket, cell start, raw_n, tier_n)] found. The
    cells go a slice at a time (store/slices.py): a re-read batch can touch
    more cells than one bound value of a server holds."""
    found: list[tuple] = []
    for part in slices(sorted(cells), cell_chars, limit):
        found += _repair_cells(client, set(part), attempts)
    return found


def _repair_cells(client, cells: set[Cell], attempts: int) -> list[tuple]:
    """One statement for every tier; a tier it finds unequal is repaired on
    all its cells, found again there first: the check decides only which
    tiers to repair, each repair finds, fixes and converges as on its own."""
    unequal = {name for name, *_ in tier_mismatches(client, cells)}
    found: list[tuple] = []
    for tier in TIERS:
        if tier.name in unequal:
            found += _repair_tier(client, tier, cells, attempts)
    return found


def _repair_tier(client, tier: Tier, cells: set[Cell], attempts: int) -> list[tuple]:
    mine = {(m, b, tier.floor(t)) for m, b, t in cells}
    start = min(t for _, _, t in mine)
    end = max(t for _, _, t in mine) + timedelta(seconds=tier.grain_s)
    return [(tier.name, *bad) for bad in repair(client, tier, start, end, mine, attempts)]


def tier_mismatches(client, cells: set[Cell]) -> list[tuple]:
    """[(tier, model, bucket, cell start UTC, raw_n, tier_n)] where a tier !=
    raw, on the cells of each tier that minute cells `cells` fall in: what
    `mismatches` finds tier by tier, in one statement
    (sql/rollup_tier_mismatches.sql). Binds the minute cells, not each
    tier's, and their model x bucket pairs (fewer): the same slices fit a
    server's bound value."""
    listed = sorted({(m, b, MINUTE.floor(t)) for m, b, t in cells})
    if not listed:
        return []
    days = TIERS[-1]  # the coarsest: its cells hold every other tier's
    start = days.floor(min(t for _, _, t in listed))
    end = days.floor(max(t for _, _, t in listed)) + timedelta(seconds=days.grain_s)
    params = {"cells": listed, "pairs": sorted({(m, b) for m, b, _ in listed}), "start": start, "end": end}
    rows = client.query(load_sql("rollup_tier_mismatches"), parameters=params).result_rows
    return [(_BY_GRAIN[g].name, m, b, utc(t), int(r), int(n)) for g, m, b, t, r, n in rows]
