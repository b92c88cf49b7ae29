"""A query's answer as plain Python columns: what the text outputs read.

A read command that prints text (a table or JSON) has no use for a DataFrame,
and importing pandas cost 0.2-0.3 s of a 0.6 s command (BENCHMARKS.md,
cli-reads). clickhouse-connect's `query()` returns rows of Python values;
`Rows` holds them column by column (the renderers format a column at a time).
Unknown values are None or a float NaN (ClickHouse's quantiles of nothing),
never 0. A DataFrame is read into Rows (`of`) where a caller already has one,
so every renderer has one input.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone


@dataclass
class Rows:
    names: list[str]
    columns: list[list]  # one list per name, all of one length

    def __len__(self) -> int:
        return len(self.columns[0]) if self.columns else 0

    @property
    def empty(self) -> bool:
        return not len(self)

    def has(self, name: str) -> bool:
        return name in self.names

    def column(self, name: str) -> list:
        return self.columns[self.names.index(name)]

    def records(self) -> list[tuple]:
        return list(zip(*self.columns))

    def select(self, names: list[str]) -> Rows:
        return Rows(list(names), [self.column(n) for n in names])

    def take(self, order: list[int]) -> Rows:
        """The rows in `order` (row indices)."""
        return Rows(self.names, [[col[i] for i in order] for col in self.columns])


def from_result(result) -> Rows:
    """A clickhouse-connect QueryResult (`client.query`)."""
    names = list(result.column_names)
    records = result.result_rows
    columns = [list(c) for c in zip(*records)] if records else [[] for _ in names]
    return Rows(names, columns)


# pandas' missing values, known by their types' names: no pandas import, and
# no read of a pandas module that another thread may be importing (the
# worker's: a partly imported pandas has no `NA` yet).
_PANDAS_MISSING = ("NAType", "NaTType")


def missing(value) -> bool:
    """None, NaN, or pandas' NA/NaT."""
    if value is None or (isinstance(value, float) and value != value):
        return True
    kind = type(value)
    return kind.__name__ in _PANDAS_MISSING and kind.__module__.partition(".")[0] == "pandas"


def naive_utc(value):
    """A time as naive UTC (ClickHouse DateTime64 parameters, the outputs' times)."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(timezone.utc).replace(tzinfo=None)
    return value


def of(frame) -> Rows:
    """Rows of `frame`: Rows as they are, or a pandas DataFrame's columns with
    its missing values (NaN, NaT, pd.NA) as None, numbers as Python numbers."""
    if isinstance(frame, Rows):
        return frame
    columns = []
    for name in frame.columns:
        col = frame[name]
        values = col.tolist()
        if col.dtype.kind != "f":  # a float column keeps NaN (a float, as from the store)
            mask = col.isna().tolist()
            values = [None if m else v for v, m in zip(values, mask)]
        columns.append(values)
    return Rows([str(n) for n in frame.columns], columns)
