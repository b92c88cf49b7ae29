"""Labels from outside bounded per model (stream_jobs/labels.py): the first
K values of each label per model are kept, the rest stored as `other`, on
dict rows and on columns alike."""

from __future__ import annotations

import pyarrow as pa

from phasemeter.stream_jobs.labels import OTHER, LabelBound


def rows(model: str, replicas) -> list[dict]:
    return [{"model": model, "replica": r, "gateway": "", "prefill_replica": "", "decode_replica": ""}
            for r in replicas]


def test_first_k_values_per_model_are_kept_the_rest_are_other():
    bound = LabelBound(3)
    batch = rows("a", [f"r{i}" for i in range(10)]) + rows("b", ["r9", "r8"])
    bound.rows(batch)
    assert len(batch) == 12
    assert [r["replica"] for r in batch] == ["r0", "r1", "r2"] + [OTHER] * 7 + ["r9", "r8"]
    assert bound.folded == {"replica": 7}
    # later batches: the kept values stay kept, new ones are other
    later = rows("a", ["r1", "r5", ""])
    bound.rows(later)
    assert [r["replica"] for r in later] == ["r1", OTHER, ""]


def test_a_10000_value_flood_leaves_k_plus_one_values():
    bound = LabelBound(8)
    batch = rows("m", [f"gpu-{i}" for i in range(10_000)])
    bound.rows(batch)
    assert len({r["replica"] for r in batch}) == 9


def test_seeded_values_stay_and_count_toward_k():
    bound = LabelBound(2)
    bound.seed([("replica", "a", "old-1"), ("replica", "a", "old-2"), ("replica", "a", "old-3")])
    batch = rows("a", ["old-3", "new"])
    bound.rows(batch)
    assert [r["replica"] for r in batch] == ["old-3", OTHER]


def test_zero_is_unbounded():
    batch = rows("a", [f"r{i}" for i in range(50)])
    LabelBound(0).rows(batch)
    assert len({r["replica"] for r in batch}) == 50


class Cols:
    """The part of columnar.Generations the bound touches."""

    def __init__(self, model, replica, gateway):
        self.columns = {"model": pa.array(model), "replica": pa.array(replica), "gateway": pa.array(gateway),
                        "prefill_replica": pa.array(replica), "decode_replica": pa.array(gateway)}
        self._rows = None


def test_columns_are_bounded_like_rows():
    models = ["a"] * 6 + ["b"] * 2
    reps = [f"r{i}" for i in range(6)] + ["x", "y"]
    gws = ["g1", "g2", "g3", "g1", "", "g4"] + ["g1", "g1"]
    cols = Cols(models, reps, gws)
    LabelBound(2).columns(cols)
    expect = [{"model": m, "replica": r, "gateway": g, "prefill_replica": r, "decode_replica": g}
              for m, r, g in zip(models, reps, gws, strict=True)]
    LabelBound(2).rows(expect)
    assert len(expect) == 8
    assert cols.columns["replica"].to_pylist() == [e["replica"] for e in expect]
    assert cols.columns["gateway"].to_pylist() == [e["gateway"] for e in expect]
    # the P/D pools are bounded as the replica and the gateway are
    assert cols.columns["prefill_replica"].to_pylist() == [e["prefill_replica"] for e in expect]
    assert cols.columns["decode_replica"].to_pylist() == [e["gateway"] for e in expect]
    assert cols.columns["prefill_replica"].to_pylist().count("other") == 4
    assert cols.columns["replica"].type == pa.string()
