"""Labels from outside bounded per model (stream_jobs/labels.py): the first
K values of each label per model are kept, the rest stored as `other`, on
the batch's columns."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs.labels import BOUNDED, OTHER, LabelBound


def rows(model: str, replicas) -> list[dict]:
    return [{"model": model, "replica": r, "gateway": "", "prefill_replica": "", "decode_replica": ""}
            for r in replicas]


class Cols:
    """The part of columnar.Generations the bound touches."""

    def __init__(self, columns: dict):
        self.columns = {k: pa.array(v) for k, v in columns.items()}
        self._rows = None


def bound_rows(bound: LabelBound, batch: list[dict]) -> None:
    """Bound the labels of `batch` through its columns, written back in place."""
    cols = Cols({k: [r[k] for r in batch] for k in ("model", *BOUNDED)})
    bound.columns(cols)
    for label in BOUNDED:
        for row, value in zip(batch, cols.columns[label].to_pylist(), strict=True):
            row[label] = value


def test_first_k_values_per_model_are_kept_the_rest_are_other():
    bound = LabelBound(3)
    batch = rows("a", [f"r{i}" for i in range(10)]) + rows("b", ["r9", "r8"])
    bound_rows(bound, batch)
    assert len(batch) == 12
    assert [r["replica"] for r in batch] == ["r0", "r1", "r2"] + [OTHER] * 7 + ["r9", "r8"]
    assert bound.folded == {"replica": 7}
    # later batches: the kept values stay kept, new ones are other
    later = rows("a", ["r1", "r5", ""])
    bound_rows(bound, later)
    assert [r["replica"] for r in later] == ["r1", OTHER, ""]


def test_a_10000_value_flood_leaves_k_plus_one_values():
    bound = LabelBound(8)
    batch = rows("m", [f"gpu-{i}" for i in range(10_000)])
    bound_rows(bound, batch)
    assert len({r["replica"] for r in batch}) == 9


def test_seeded_values_stay_and_count_toward_k():
    bound = LabelBound(2)
    bound.seed([("replica", "a", "old-1"), ("replica", "a", "old-2"), ("replica", "a", "old-3")])
    batch = rows("a", ["old-3", "new"])
    bound_rows(bound, batch)
    assert [r["replica"] for r in batch] == ["old-3", OTHER]


def test_zero_is_unbounded():
    batch = rows("a", [f"r{i}" for i in range(50)])
    bound_rows(LabelBound(0), batch)
    assert len({r["replica"] for r in batch}) == 50


def test_every_bounded_label_is_bounded_per_model():
    models = ["a"] * 6 + ["b"] * 2
    reps = [f"r{i}" for i in range(6)] + ["x", "y"]
    gws = ["g1", "g2", "g3", "g1", "", "g4"] + ["g1", "g1"]
    cols = Cols({"model": models, "replica": reps, "gateway": gws, "prefill_replica": reps, "decode_replica": gws})
    LabelBound(2).columns(cols)
    replicas = ["r0", "r1", OTHER, OTHER, OTHER, OTHER, "x", "y"]
    gateways = ["g1", "g2", OTHER, "g1", "", OTHER, "g1", "g1"]  # an empty label is no value
    assert cols.columns["replica"].to_pylist() == replicas
    assert cols.columns["gateway"].to_pylist() == gateways
    # the P/D pools are bounded as the replica and the gateway are
    assert cols.columns["prefill_replica"].to_pylist() == replicas
    assert cols.columns["decode_replica"].to_pylist() == gateways
    assert cols.columns["prefill_replica"].to_pylist().count("other") == 4


def test_each_row_folded_is_counted_also_a_repeated_value_and_one_sent_as_other():
    bound = LabelBound(1)
    batch = rows("a", ["r0", "r1", "r1", OTHER, "r2", "r1", OTHER, "r0", ""])
    bound_rows(bound, batch)
    assert len(batch) == 9
    assert [r["replica"] for r in batch] == ["r0", OTHER, OTHER, OTHER, OTHER, OTHER, OTHER, "r0", ""]
    assert bound.folded == {"replica": 6}  # every row stored as `other`, r1's three and the two sent as it


@settings(max_examples=200)
@given(st.integers(0, 3),
       st.lists(st.tuples(st.sampled_from("ab"), st.sampled_from(["", "x", "y", "z", OTHER, "w", None])), max_size=30),
       st.lists(st.sampled_from(["x", "y", OTHER]), max_size=2))
def test_a_batch_is_bounded_as_its_rows_one_by_one_in_order(k, pairs, seeded):
    """Each distinct (model, value) is decided once: the same answers and
    counts as `value` asked for every row in the batch's order."""
    one_by_one, batched = LabelBound(k), LabelBound(k)
    for b in (one_by_one, batched):
        b.seed([("replica", "a", v) for v in seeded])
    expect = [one_by_one.value("replica", m, v) for m, v in pairs]
    batch = [{"model": m, "replica": v, "gateway": "", "prefill_replica": "", "decode_replica": ""} for m, v in pairs]
    bound_rows(batched, batch)
    assert len(batch) == len(expect)
    assert [r["replica"] for r in batch] == expect
    assert +batched.folded == +one_by_one.folded
