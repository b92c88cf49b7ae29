"""Named, parameterised queries over the store, returned as DataFrames.

SQL text lives in `sql/*.sql`; values are bound server-side by ClickHouse
({name:Type} placeholders), never formatted into the text.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING

from phasemeter.query.rows import Rows

if TYPE_CHECKING:  # imported where a frame is built: text outputs never need pandas
    import pandas as pd


PERCENTILES = ("p1", "p5", "p50", "p95", "p99")
PHASES = ("prefill", "decode")
BAND_COLUMNS = ["t", "model", "input_bucket", "n"] + [
    f"{phase}_{col}" for phase in PHASES for col in ("n",) + PERCENTILES]
# What each column means, for table headers and JSON consumers.
LEGEND = {
    "p1": "slow tail p1", "p5": "slow tail p5", "p50": "median", "p95": "p95 (fast side)",
    "p99": "p99 (fast side)",
}
METHOD = ('exact: ClickHouse quantilesExactInclusive == numpy.percentile(method="linear"); '
          "for throughput the slow tail is the LOW percentile (p1/p5)")


def bands(runner, start: datetime, end: datetime, step_s: int,
          models: list[str] | None = None, buckets: list[str] | None = None) -> pd.DataFrame:
    """`runner` is a phasemeter.query.runner.DirectRunner. The exact path's
    query with its defaults: abandoned generations included, prefill total."""
    import pandas as pd

    params = {"start": start, "end": end, "step_s": int(step_s),
              "models": list(models or []), "buckets": list(buckets or []),
              "abandoned": "include", "prefill": "total"}
    df = runner.df("bands_exact", params)
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in BAND_COLUMNS})
    if getattr(df["t"].dt, "tz", None) is not None:
        df["t"] = df["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    return df[BAND_COLUMNS]


def band_order(models: list, buckets: list, times: list, bucket_labels: list[str]) -> list[int]:
    """The row indices in band order: model, then buckets in edge order (not
    alphabetical: 512-2k < 2k-8k), then time; ties keep their order."""
    rank = {label: i for i, label in enumerate(bucket_labels)}
    other = len(rank)  # a bucket of no edge (re-bucketed away) after the known ones
    keys = [(m, rank.get(b, other), b, t) for m, b, t in zip(models, buckets, times)]
    return sorted(range(len(keys)), key=keys.__getitem__)


def order_bands(df: pd.DataFrame, bucket_labels: list[str]) -> pd.DataFrame:
    """A frame's rows in band order (band_order)."""
    if df.empty:
        return df
    order = band_order(df["model"].tolist(), df["input_bucket"].tolist(), df["t"].tolist(), bucket_labels)
    return df.iloc[order].reset_index(drop=True)


def order_rows(rows: Rows, bucket_labels: list[str]) -> Rows:
    """Rows in band order (band_order)."""
    if rows.empty:
        return rows
    return rows.take(band_order(rows.column("model"), rows.column("input_bucket"), rows.column("t"), bucket_labels))
