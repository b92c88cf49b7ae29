"""docs/sql.md against a real chDB store: every table and view of its public
schema has the columns and types the page lists, and every cookbook query
(each defined once, in the page's code blocks) runs on known rows and gives
the answer computed here from those rows (exact percentiles as numpy's linear
method)."""

from __future__ import annotations

import json
import random
import re
import time
from collections import defaultdict
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np
import pytest
from clock import days_ago
from stores import migrated_client

from phasemeter.alerts.slo_rules import parse_slos
from phasemeter.store import slo_defs
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import process
from phasemeter.stream_jobs.sink import Sink

pytestmark = pytest.mark.integration
DOC = Path(__file__).resolve().parents[2] / "docs" / "sql.md"
T0 = days_ago(2)  # two days ago, midnight UTC: within every TTL
START = datetime.fromtimestamp(T0, timezone.utc).replace(tzinfo=None)
END = START + timedelta(hours=3)
N = 1500
SLOS = parse_slos({"slo": [{"name": "chat", "objectives": {"ttft_s": 1.0, "decode_tps": 40.0}, "target": 0.9}]})


def cookbook() -> dict[str, str]:
    """name -> SQL of each ```sql block of the page that starts `-- cookbook: name`."""
    blocks = re.findall(r"```sql\n(.*?)```", DOC.read_text(), re.S)
    out = {}
    assert blocks, f"{DOC} has no sql code block"
    for block in blocks:
        m = re.match(r"-- cookbook: (\w+)\n", block)
        if m:
            assert m.group(1) not in out, m.group(1)
            out[m.group(1)] = block
    return out


def _events() -> list[dict]:
    rng = random.Random(7)
    out = []
    for i in range(N):
        model = ("m-a", "m-b")[i % 2]
        ttft = rng.uniform(0.05, 2.5) * (1.6 if model == "m-b" else 1.0)
        out_tokens = rng.choice([0, 1, rng.randrange(2, 600)]) if i % 23 == 0 else rng.randrange(2, 600)
        ev = {"schema_version": 2, "kind": "generation", "request_id": f"r{i:05d}", "model": model,
              "replica": f"{model}-{i % 3}", "t0": T0 + i * (3 * 3600 - 60) / N,
              "input_tokens": rng.choice([80, 700, 3000, 12000, 40000]) + rng.randrange(60),
              "output_tokens": out_tokens, "ttft_s": ttft, "e2e_s": ttft + out_tokens * rng.uniform(0.01, 0.04)}
        if i % 3 == 0:
            ev["cached_input_tokens"] = rng.choice([0, ev["input_tokens"] // 2])
        if i % 4:
            ev["queue_s"] = rng.uniform(0, ttft * 0.9)
        if i % 5 == 0 and out_tokens > 1:
            gap = rng.uniform(0.05, 3.0)
            ev["e2e_s"] += gap  # the gap is inside the stream
            ev.update(chunks=10, max_gap_s=gap, gaps_over=int(gap > 1.0), gap_threshold_s=1.0)
        if i % 29 == 0:  # an error before the first token
            ev.update(status="error", output_tokens=0, e2e_s=0.3)
            for k in ("ttft_s", "queue_s", "chunks", "max_gap_s", "gaps_over", "gap_threshold_s"):
                ev.pop(k, None)
        out.append(ev)
    return out


def known_rows() -> list[dict]:
    bucket, rows = Bucketer(parse_edges("default")), []
    for i, ev in enumerate(_events()):
        row = process(json.dumps(ev).encode(), bucket, 1_000_000, now=time.time())
        assert isinstance(row, dict), (ev, row)
        if i % 31 == 7:  # never ended, as the join records it: before or after the first token
            if i % 2:
                row.update(status="abandoned", finish_reason="expired_in_prefill", output_tokens=0, ttft_s=None,
                           prefill_tps=None, prefill_tps_uncached=None, decode_s=None, decode_tps=None, tpot_s=None)
            else:
                row.update(status="abandoned", finish_reason="expired_in_decode", output_tokens=0,
                           decode_tps=None, tpot_s=None)
        rows.append({**row, "src_topic": "t", "src_partition": 0, "src_offset": i})
    assert len(rows) == len(_events()), "every known event is a row"
    return rows


DEAD = [{"ts": T0 + 100 + i, "reason": (R.MALFORMED_JSON, R.NEGATIVE, R.NEGATIVE)[i % 3], "detail": f"case {i}",
         "payload": "{", "payload_size": 1, "src_topic": "t", "src_partition": 1, "src_offset": 10_000 + i}
        for i in range(7)]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    with migrated_client(tmp_path_factory.mktemp("cookbook"), "pm") as client:
        slo_defs.register(client, SLOS, at=datetime.fromtimestamp(T0 - 86400, timezone.utc))
        rows = known_rows()
        Sink.over(client, "chdb://t").write(rows, DEAD)
        yield client, rows


def run(client, name: str, **params) -> list[dict]:
    res = client.query(cookbook()[name], parameters={"start": START, "end": END, **params})
    return [dict(zip(res.column_names, r, strict=True)) for r in res.result_rows]


def pct(values, q: float) -> float:
    vals = [v for v in values if v is not None]
    return float(np.percentile(vals, q, method="linear")) if vals else float("nan")


def group(rows, *keys) -> dict[tuple, list[dict]]:
    out = defaultdict(list)
    for r in rows:
        out[tuple(k(r) if callable(k) else r[k] for k in keys)].append(r)
    return dict(sorted(out.items()))


def hour(r) -> datetime:
    return datetime.fromtimestamp(r["ts"] // 3600 * 3600, timezone.utc).replace(tzinfo=None)


def approx(x):
    return pytest.approx(x, rel=1e-12, nan_ok=True)


def test_the_cookbook_has_the_questions_people_ask():
    names = set(cookbook())
    assert len(names) >= 10
    assert {"slow_tail_prefill_per_bucket_hour", "p99_ttft_per_model", "cache_hits_and_prefill", "abandoned_share",
            "slo_attainment", "stalled_share", "queue_vs_engine_prefill"} <= names
    tested = {n[len("test_cookbook_"):] for n in globals() if n.startswith("test_cookbook_")}
    assert tested == names  # every query of the page has its test here, and only those


def test_cookbook_slow_tail_prefill_per_bucket_hour(store):
    client, rows = store
    want = {k: (len([r for r in g if r["prefill_tps"] is not None]), approx(pct([r["prefill_tps"] for r in g], 5)))
            for k, g in group(rows, hour, "input_bucket").items()}
    got = {(r["hour"], r["input_bucket"]): (r["prefill_n"], r["prefill_p5"])
           for r in run(client, "slow_tail_prefill_per_bucket_hour")}
    assert len(want) >= 12 and got == want


def test_cookbook_p99_ttft_per_model(store):
    client, rows = store
    want = {m: (len([r for r in g if r["ttft_s"] is not None]), approx(pct([r["ttft_s"] for r in g], 99)))
            for (m,), g in group(rows, "model").items()}
    got = {r["model"]: (r["ttft_n"], r["ttft_p99"]) for r in run(client, "p99_ttft_per_model")}
    assert len(want) == 2 and got == want
    assert got["m-b"][1] > got["m-a"][1]  # m-b's first tokens are slower by construction


def test_cookbook_cache_hits_and_prefill(store):
    client, rows = store
    known = [r for r in rows if r["cached_input_tokens"] is not None]
    want = {k: (len(g), approx(pct([r["ttft_s"] for r in g], 50)))
            for k, g in group(known, "input_bucket", lambda r: int(r["cached_input_tokens"] > 0)).items()}
    got = {(r["input_bucket"], r["cache_hit"]): (r["n"], r["ttft_p50"]) for r in run(client, "cache_hits_and_prefill")}
    assert {hit for _, hit in want} == {0, 1} and got == want


def test_cookbook_abandoned_share(store):
    client, rows = store
    want = {}
    for (m,), g in group(rows, "model").items():
        ab = [r for r in g if r["status"] == "abandoned"]
        want[m] = (len(g), len(ab), sum(r["ttft_s"] is None for r in ab), approx(len(ab) / len(g)))
    got = {r["model"]: (r["n"], r["abandoned"], r["abandoned_in_prefill"], r["abandoned_share"])
           for r in run(client, "abandoned_share")}
    assert sum(w[1] for w in want.values()) > 20 and got == want


def _meets(r, objectives: dict) -> bool:
    if r["status"] in ("error", "abandoned"):
        return False
    for metric, limit in objectives.items():
        v = r[metric]
        if v is not None and (v > limit if metric.endswith("_s") else v < limit):
            return False
    return True


def test_cookbook_slo_attainment(store):
    client, rows = store
    slo = SLOS.get("chat")
    want = {m: (len(g), sum(_meets(r, dict(slo.objectives)) for r in g)) for (m,), g in group(rows, "model").items()}
    got = {r["model"]: (r["n"], r["met"], r["attainment"]) for r in run(client, "slo_attainment", slo="chat")}
    assert got == {m: (n, met, approx(met / n)) for m, (n, met) in want.items()}
    assert 0 < min(met / n for n, met in want.values()) < 1


def test_cookbook_adhoc_ttft_attainment(store):
    client, rows = store
    want = {m: (len(g), approx(sum(_meets(r, {"ttft_s": 1.2}) for r in g) / len(g)))
            for (m,), g in group(rows, "model").items()}
    got = {r["model"]: (r["n"], r["attainment"]) for r in run(client, "adhoc_ttft_attainment", ttft_max=1.2)}
    assert got == want and len({a for _, a in got.values()}) == 2


def test_cookbook_stalled_share(store):
    client, rows = store
    chunked = [r for r in rows if r["stalled"] is not None]
    want = {m: (len(g), sum(r["stalled"] for r in g), approx(sum(r["stalled"] for r in g) / len(g)),
                max(r["max_gap_s"] for r in g)) for (m,), g in group(chunked, "model").items()}
    got = {r["model"]: (r["with_chunks"], r["stalled_n"], r["stalled_share"], r["worst_gap_s"])
           for r in run(client, "stalled_share")}
    assert len(chunked) > 100 and 0 < sum(w[1] for w in want.values()) < len(chunked) and got == want


def test_cookbook_queue_vs_engine_prefill(store):
    client, rows = store
    queued = [r for r in rows if r["queue_s"] is not None]

    def engine(r):
        q, t = r["queue_s"], r["ttft_s"]
        return r["input_tokens"] / (t - q) if t is not None and t > q else None

    want = {k: (len(g), approx(pct([r["queue_s"] for r in g], 50)), approx(pct([r["prefill_tps"] for r in g], 50)),
                approx(pct([engine(r) for r in g], 50)))
            for k, g in group(queued, "model", "input_bucket").items()}
    got = {(r["model"], r["input_bucket"]): (r["n"], r["queue_p50"], r["prefill_p50"], r["engine_prefill_p50"])
           for r in run(client, "queue_vs_engine_prefill")}
    assert len(want) == 10 and got == want
    assert all(e > p for _, _, p, e in got.values())  # without the queue, prefill is faster


def test_cookbook_cli_bands(store):
    """The view's rows are what `query bands --step 10m` prints by default."""
    from phasemeter.analytics import run_query
    from phasemeter.query.runner import DirectRunner

    client, rows = store
    cli, meta = run_query(DirectRunner(client), START.replace(tzinfo=timezone.utc), END.replace(tzinfo=timezone.utc),
                          600)
    got = run(client, "cli_bands")
    assert meta["path"] == "exact" and {r["path"] for r in got} == {"exact"} and len(got) == len(cli) > 50
    cols = ["n", "prefill_p1", "prefill_p5", "decode_p1", "decode_p5"]
    want = {(r["t"].to_pydatetime(), r["model"], r["input_bucket"]): [r[c] for c in cols]
            for r in cli.to_dict("records")}
    assert {(r["t"], r["model"], r["input_bucket"]): [r[c] for c in cols] for r in got} == \
        {k: [approx(v) for v in vs] for k, vs in want.items()}


def test_cookbook_not_ok_share_per_hour(store):
    client, rows = store
    want = {k: (len(g), sum(r["status"] == "error" for r in g), approx(sum(r["status"] != "ok" for r in g) / len(g)))
            for k, g in group(rows, hour, "model").items()}
    got = {(r["hour"], r["model"]): (r["generations"], r["errors"], r["not_ok_share"]) for r in run(client, "not_ok_share_per_hour")}
    assert len(want) == 6 and got == want


def test_cookbook_slowest_first_tokens(store):
    client, rows = store
    want = sorted((r for r in rows if r["ttft_s"] is not None), key=lambda r: (-r["ttft_s"], r["request_id"]))[:10]
    got = run(client, "slowest_first_tokens")
    assert [(r["request_id"], r["ttft_s"]) for r in got] == [(r["request_id"], approx(r["ttft_s"])) for r in want]


def test_cookbook_decode_slow_tail_per_replica(store):
    client, rows = store
    want = {k: (sum(r["decode_tps"] is not None for r in g), approx(pct([r["decode_tps"] for r in g], 5)))
            for k, g in group(rows, "model", "replica").items()}
    got = {(r["model"], r["replica"]): (r["decode_n"], r["decode_p5"]) for r in run(client, "decode_slow_tail_per_replica")}
    assert len(want) == 6 and got == want


def test_cookbook_tokens_per_model_day(store):
    client, rows = store
    day = START.date()
    want = {(day, m): (len(g), sum(r["input_tokens"] for r in g), sum(r["cached_input_tokens"] or 0 for r in g),
                       sum(r["output_tokens"] for r in g)) for (m,), g in group(rows, "model").items()}
    got = {(r["day"], r["model"]): (r["generations"], r["input_tokens"], r["cached_input_tokens"], r["output_tokens"])
           for r in run(client, "tokens_per_model_day")}
    assert len(want) == 2 and got == want


def test_cookbook_dead_letters_by_reason(store):
    client, _ = store
    got = [(r["reason"], r["events"]) for r in run(client, "dead_letters_by_reason")]
    assert got == [(R.NEGATIVE, 4), (R.MALFORMED_JSON, 3)]


# The public schema: each `#### \`name\`` section of "## Public schema" with its
# table of columns, held to what the store reports.
VIEW_ARGS = {
    "bands_view": "", "latency_view": "", "read_path_view": "",
    "slo_rollup_view": ", slo_id = 1", "slo_view": ", slo = 'chat'",
}


def documented() -> dict[str, list[tuple[str, str]]]:
    text = DOC.read_text().split("## Public schema", 1)[1].split("\n## ", 1)[0]
    out = {}
    for name, body in re.findall(r"#### `(\w+)`\n(.*?)(?=\n#### |\n### |\Z)", text, re.S):
        out[name] = re.findall(r"^\| `(\w+)` \| ([^|]+?) \|", body, re.M)
    return out


def test_the_public_schema_is_what_the_store_holds(store):
    client, _ = store
    docs = documented()
    assert set(docs) == {"generations", "generations_minute", "dead_letters", "slo_definitions", *VIEW_ARGS}
    window = "start = {s:DateTime64(3)}, end = {e:DateTime64(3)}, step_s = 600, models = [], buckets = []"
    for name, columns in docs.items():
        assert len(columns) >= 4, name
        if name in VIEW_ARGS:
            res = client.query(f"DESCRIBE (SELECT * FROM {name}({window}{VIEW_ARGS[name]}))",
                               parameters={"s": START, "e": END})
            held = [(r[0], r[1]) for r in res.result_rows]
        else:
            held = client.query("SELECT name, type FROM system.columns WHERE database = currentDatabase() "
                                "AND table = {t:String} ORDER BY position", parameters={"t": name}).result_rows
        if name == "generations_minute":  # its sketch states are internal: the counts are public
            held = [c for c in held if not c[1].startswith("AggregateFunction")]
        assert columns == [tuple(c) for c in held], name
