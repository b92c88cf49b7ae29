"""Named, parameterised queries over the store, returned as DataFrames.

SQL text lives in `sql/*.sql`; values are bound server-side by ClickHouse
({name:Type} placeholders), never formatted into the text.
"""

from __future__ import annotations

from datetime import datetime

import numpy as np
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
    params = {"start": start, "end": end, "step_s": int(step_s),
              "models": list(models or []), "buckets": list(buckets or []),
              "abandoned": "include", "prefill": "total"}
    df = runner.df("bands_exact", params)
    if df.empty:
        return pd.DataFrame({c: pd.Series(dtype="float64") for c in BAND_COLUMNS})
    if getattr(df["t"].dt, "tz", None) is not None:
        df["t"] = df["t"].dt.tz_convert("UTC").dt.tz_localize(None)
    return df[BAND_COLUMNS]


def order_bands(df: pd.DataFrame, bucket_labels: list[str]) -> pd.DataFrame:
    """Model, then buckets in edge order (not alphabetical: 512-2k < 2k-8k), then time."""
    if df.empty:
        return df
    rank = {label: i for i, label in enumerate(bucket_labels)}
    # Ranked per distinct bucket, not per row: a 1-day answer at 1-minute steps has 28,800 rows
    # and a handful of buckets (a per-row lambda took 0.06 s of it).
    codes, uniques = pd.factorize(df["input_bucket"], use_na_sentinel=False)
    key = np.array([rank.get(b, len(rank)) for b in uniques], dtype=np.int64)[codes]
    return (df.assign(_rank=key).sort_values(["model", "_rank", "input_bucket", "t"], kind="stable")
            .drop(columns="_rank").reset_index(drop=True))
