"""Percentile analytics at scale (docs/analytics.md).

* `fetch(args, settings) -> (DataFrame, meta)`: bands or latency, exact or
  rollup path chosen automatically (meta["path"], meta["method"]).
* `fetch_rows(args, settings)`, `run_rows(...)`: the same as plain Python
  columns (phasemeter.query.rows), what text outputs read without pandas.
* `run_query(runner, start, end, step_s, ...)`: the same without argparse;
  `abandoned="include"|"exclude"`, `prefill="total"|"engine"|"uncached"`
  (variants.py); every frame counts the abandoned generations per row.
* `render(df, fmt, meta)`, `write_chart(df, meta, out)`: text and charts
  (`.html` -> phasemeter.render.html, else PNG).
* `backfill(client, start, end)`: fill the rollup's tiers (minute, hour, day) from raw rows.

Attributes load lazily, so `phasemeter --help` does not import pandas.
"""

from importlib import import_module

_WHERE = {"fetch": "core", "fetch_rows": "core", "run_query": "core", "run_rows": "core", "LATENCY_COLUMNS": "core", "BANDS_COLUMNS": "core",
          "PREFILL_VARIANTS": "variants", "ABANDONED_COLUMNS": "variants", "render": "present",
          "write_chart": "present", "backfill": "maintain", "choose_path": "paths", "PathChoice": "paths"}
__all__ = sorted(_WHERE)


def __getattr__(name):
    if name in _WHERE:
        return getattr(import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
