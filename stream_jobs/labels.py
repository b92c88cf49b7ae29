"""Labels from outside, bounded per model (docs/labels.md). Pure.

A label taking a new value per process or restart would add thousands of values a year to every per-replica
query and rollup. So per model the first K values of each BOUNDED label are kept, later ones stored as `other`
and counted (`folded`); stored values stay kept (`seed`), so a restart does not admit K more. Applied once, in
the ingest pipeline, to the columns of every source (columnar.Generations).
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import pyarrow as pa

OTHER = "other"
BOUNDED = ("replica", "gateway", "prefill_replica", "decode_replica")


class LabelBound:
    def __init__(self, k: int):
        self.k = k  # 0: unbounded
        self.kept: dict[tuple[str, str], set[str]] = {}   # (label, model) -> values kept
        self.folded: Counter = Counter()                   # label -> rows stored as `other`

    def seed(self, stored) -> None:
        """(label, model, value) the store already holds: kept, whatever K."""
        for label, model, value in stored:
            if value and value != OTHER:
                self.kept.setdefault((label, model), set()).add(value)

    def value(self, label: str, model: str, value: str) -> str:
        if not value or self.k <= 0:
            return value
        kept = self.kept.setdefault((label, model), set())
        if value in kept or (len(kept) < self.k and value != OTHER):
            kept.add(value)
            return value
        self.folded[label] += 1
        return OTHER

    def columns(self, gens) -> None:
        """Bound the label columns of a columnar batch, in place."""
        if self.k <= 0:
            return
        model = gens.columns["model"]
        at = pa.array(np.arange(len(model)))
        for label in BOUNDED:
            column = gens.columns[label]
            # Each distinct (model, value) once, in first-seen order: kept stays kept, refused stays refused.
            # Grouped in C: the rows' values as Python objects, counted in a Counter, took ~17 ms a label
            # on 90,000 rows (docs/performance/worker.md).
            grouped = pa.table({"model": model, "value": column, "at": at}).group_by(["model", "value"],
                                                                                     use_threads=False)
            pairs = grouped.aggregate([("at", "min"), ([], "count_all")]).sort_by("at_min")
            answer = {}
            for m, v, n in zip(*(pairs[c].to_pylist() for c in ("model", "value", "count_all")), strict=True):
                got = answer[m, v] = self.value(label, m, v)
                if got == OTHER and v:  # value() counted one row of the pair
                    self.folded[label] += n - 1
            if any(got != v for (_, v), got in answer.items()):
                rows = zip(model.to_pylist(), column.to_pylist())
                gens.columns[label] = pa.array([answer[pair] for pair in rows], type=column.type)
                gens._rows = None  # the dict view is rebuilt from the new columns
