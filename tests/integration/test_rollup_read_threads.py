"""The rollup's band and latency queries split even a small read across
threads (phasemeter.query.runner.SPLIT_SMALL_READS, sent with
sql/bands_rollup.sql and sql/latency_rollup.sql where the target allows it):
the answer must not change with it.

What it buys is speed, so its figures are in BENCHMARKS.md (docs/performance/queries.md), not
here. How the reads are shared out is decided while the query runs, so no
EXPLAIN shows it; the policy is checked in tests/unit/test_sql_files.py."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from stores import migrated_client

from phasemeter.analytics.core import tier_params
from phasemeter.analytics.paths import tier_plan
from phasemeter.query.runner import QUERY_SETTINGS
from phasemeter.store.client import load_sql

pytestmark = pytest.mark.integration
START = datetime(2026, 1, 1, tzinfo=timezone.utc)
QUERIES = ("bands_rollup", "latency_rollup")


@pytest.fixture(scope="module")
def client(tmp_path_factory):
    with migrated_client(tmp_path_factory.mktemp("read_threads"), "t_read_threads") as c:
        # One day, 4 models x 5 buckets, two generations a minute each: 28,800
        # minute cells, as a day of the 100M-row benchmark store has; written
        # by two inserts, so a cell's states come from two parts.
        for part in range(2):
            c.command("""
                INSERT INTO generations (ts, request_id, model, input_bucket, status, input_tokens, output_tokens,
                                         ttft_s, e2e_s, prefill_tps, decode_tps, tpot_s, queue_s, schema_version)
                SELECT {start:DateTime64(3)} + toIntervalMillisecond(intDiv(number, 20) * 60000 + {part:UInt32}),
                       concat(toString(number), '-', toString({part:UInt32})), concat('m', toString(number % 4)),
                       concat('b', toString(intDiv(number, 4) % 5)), 'ok', 100, 10, 0.1 + (number % 7) / 100, 1.0,
                       100 + (number * 7 + {part:UInt32}) % 97, 20 + number % 13, 0.05, 0.01, 2
                FROM numbers(28800)""", parameters={"start": START.replace(tzinfo=None), "part": part})
        yield c


def _params() -> dict:
    lo = int(START.timestamp())
    plan = tier_plan(lo, lo + 86400, 60, {})
    return {"start": START.replace(tzinfo=None), "end": (START + timedelta(days=1)).replace(tzinfo=None),
            "step_s": 60, "models": [], "buckets": [], **tier_params(plan)}


@pytest.mark.parametrize("name", QUERIES)
def test_the_answer_is_the_same_read_by_one_stream_or_two(client, name):
    sql = load_sql(name)
    two = client.query_df(sql, parameters=_params(), settings=QUERY_SETTINGS[name])
    one = client.query_df(sql, parameters=_params())
    assert len(two) == 28800
    assert (two["n"] == 2).all()
    assert two.equals(one)
