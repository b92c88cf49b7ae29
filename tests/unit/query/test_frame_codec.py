"""The worker's HTTP frame codec (runner.frame_to_json / frame_from_json):
any frame of the column types the named queries return, nulls included,
comes back equal, so a read through a running worker equals a direct read."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
from hypothesis import given, settings, strategies as st

from phasemeter.query.runner import encode_frame, frame_from_json, frame_to_json

finite = st.floats(allow_nan=False, allow_infinity=False, width=64, min_value=-1e15, max_value=1e15)


@st.composite
def frames(draw):
    n = draw(st.integers(0, 12))
    cols = {}
    cols["model"] = pd.array(draw(st.lists(st.one_of(st.none(), st.text(max_size=8)), min_size=n, max_size=n)),
                             dtype="str")
    cols["n"] = np.array(draw(st.lists(st.integers(0, 2**53), min_size=n, max_size=n)), dtype="uint64")
    cols["small"] = np.array(draw(st.lists(st.integers(0, 65535), min_size=n, max_size=n)), dtype="uint16")
    cols["maybe_n"] = pd.array(draw(st.lists(st.one_of(st.none(), st.integers(0, 2**53)), min_size=n, max_size=n)),
                               dtype="UInt64")
    cols["signed"] = pd.array(draw(st.lists(st.one_of(st.none(), st.integers(-2**53, 2**53)), min_size=n,
                                            max_size=n)), dtype="Int64")
    cols["p1"] = np.array(draw(st.lists(st.one_of(st.just(float("nan")), finite,
                                                  st.sampled_from([float("inf"), float("-inf")])),
                                        min_size=n, max_size=n)), dtype="float64")
    cols["flag"] = np.array(draw(st.lists(st.booleans(), min_size=n, max_size=n)), dtype="bool")
    secs = draw(st.lists(st.integers(946_684_800, 4_102_444_800), min_size=n, max_size=n))
    cols["t"] = pd.to_datetime(np.array(secs, dtype="int64"), unit="s")
    return pd.DataFrame(cols)


# What the worker sends (encode_frame: msgspec, or the standard library for
# a frame with an infinity) and the standard library's own output must both
# read back equal (the CLI's HttpRunner reads with json.loads).
ENCODERS = {"json": lambda df: json.dumps(frame_to_json(df)), "worker": encode_frame}


@settings(max_examples=150, deadline=None)
@given(frames(), st.sampled_from(sorted(ENCODERS)))
def test_any_frame_round_trips_equal_with_its_dtypes(df, encoder):
    back = frame_from_json(json.loads(ENCODERS[encoder](df)))
    assert list(back.columns) == list(df.columns)
    for col in df.columns:
        if col == "t":
            assert back[col].dt.tz is None
            assert list(back[col]) == list(df[col])
            continue
        assert str(back[col].dtype) == str(df[col].dtype), col
    pd.testing.assert_frame_equal(back.drop(columns="t"), df.drop(columns="t"), check_exact=True)


def test_the_rollup_paths_null_counts_survive():
    # The crash seen through a running worker: abandoned counts are null on
    # the rollup path, and an int64 cast of them failed.
    df = pd.DataFrame({"abandoned_prefill": pd.array([None, None], dtype="UInt64"), "n": [3, 4]})
    back = frame_from_json(json.loads(json.dumps(frame_to_json(df))))
    assert back["abandoned_prefill"].isna().all() and list(back["n"]) == [3, 4]
