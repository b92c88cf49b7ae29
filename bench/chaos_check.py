"""Compare the source (what Kafka acknowledged) with the target (what the
store holds), the way the chaos harness and its tests judge a run.

* `read_source(bootstrap, topic)`: every record of the raw topic. For one
  event per generation each record is a generation; for phase events a
  generation is expected once its `end` is in the topic.
* `read_target(dsn, database)`: run in a subprocess of its own (`python
  bench/chaos_check.py target DSN DB`), because an embedded chDB path opens
  in one process only: request_id counts, dead letters, and the cells of
  every rollup tier (minute, hour, day) that differ from raw (the worker's
  own sql/rollup_mismatches.sql, at each tier's grain).
* `compare(source, targets)`: lost, duplicated, dead-lettered, rollup
  mismatches, and the missing partition/offset ranges, for a person to read.
* `damage(dsn, database)`: the negative control: delete one stored row and
  duplicate another, so that a checker that cannot fail is caught.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _partitions(consumer, topic, TopicPartition, deadline: float) -> list:
    """The topic's partitions, waiting out a broker that is still coming back
    (after a 60 s SIGSTOP its metadata briefly lists no brokers at all)."""
    import time

    from kafka.errors import KafkaError

    while True:
        try:
            found = consumer.partitions_for_topic(topic)
            if found:
                return [TopicPartition(topic, p) for p in sorted(found)]
        except KafkaError as exc:
            if not getattr(exc, "retriable", False) and "MetadataEmptyBrokerList" not in type(exc).__name__:
                raise
        if time.monotonic() > deadline:
            raise RuntimeError(f"no metadata for {topic}: the broker did not come back")
        time.sleep(1.0)


def _records(bootstrap: str, topic: str, timeout_s: float = 120.0):
    """Every record of `topic`, from its start to the end it had when asked: (partition, offset, key, value)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None,
                             max_partition_fetch_bytes=16 * 1024 * 1024, fetch_max_bytes=64 * 1024 * 1024)
    try:
        parts = _partitions(consumer, topic, TopicPartition, time.monotonic() + 120)
        consumer.assign(parts)
        consumer.seek_to_beginning(*parts)
        end = consumer.end_offsets(parts)
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < end[tp] for tp in parts):
            if time.monotonic() > deadline:
                raise RuntimeError(f"could not read {topic} to its end in {timeout_s:.0f}s")
            for tp, msgs in consumer.poll(timeout_ms=1000, max_records=50_000).items():
                for m in msgs:
                    yield tp.partition, m.offset, m.key, m.value
    finally:
        consumer.close()


def read_source(bootstrap: str, topic: str, timeout_s: float = 120.0) -> dict:
    """-> {"expected": {request_id: [(partition, offset), ...]}, "records": n,
    "generation_records": n (records that each must end stored or dead-lettered)}"""
    expected: dict[str, list] = defaultdict(list)
    records = generation_records = 0
    for partition, offset, _, value in _records(bootstrap, topic, timeout_s):
        records += 1
        for event in _events(value):
            if event.get("kind") in ("generation", "end"):
                expected[event["request_id"]].append((partition, offset))
                generation_records += 1
    return {"expected": dict(expected), "records": records, "generation_records": generation_records}


def join_story(bootstrap: str, topic: str, group: str, limit: int = 5) -> dict:
    """Why generations stay open in a join: the join table's changelog, its final state (request_ids open in
    it) and, for up to `limit` of them, every record of each in the raw topic, the phases topic and the
    changelog, with the table's recorded positions of their phases partition. No id open in the changelog
    while a worker reports some: its table differs from its changelog."""
    from phasemeter.stream_jobs.join_agent import is_progress_key

    changelog = f"{group}-phasemeter-join-changelog"
    history: dict[bytes, list] = defaultdict(list)
    positions: dict[int, list] = defaultdict(list)
    for partition, offset, key, value in _records(bootstrap, changelog):
        if is_progress_key(key):
            positions[partition].append((offset, json.loads(value)["next"] if value else None))
        else:
            history[key].append((partition, offset, json.loads(value) if value else None))
    open_ids = sorted(k.decode() for k, h in history.items() if h[-1][2] is not None and "done" not in h[-1][2])
    picked = set(open_ids[:limit])
    raw, phases = defaultdict(list), defaultdict(list)
    for partition, offset, _, value in _records(bootstrap, topic):
        for event in _events(value):
            if event.get("request_id") in picked:
                raw[event["request_id"]].append((partition, offset, event.get("kind")))
    for partition, offset, _, value in _records(bootstrap, f"{topic}.phases"):
        for _, fields in json.loads(value)["phases"]:
            if fields.get("request_id") in picked:
                phases[fields["request_id"]].append((partition, offset, fields.get("kind")))
    stories = {}
    for rid in sorted(picked):
        h = history[rid.encode()]
        stories[rid] = {"raw": raw[rid], "phases": phases[rid],
                        "changelog": [(p, o, None if v is None else {k: v[k] for k in v if k != "ph"}
                                       | ({"ph": sorted(v["ph"])} if "ph" in v else {})) for p, o, v in h],
                        "positions": positions[h[-1][0]][-8:]}
    return {"changelog_keys": len(history), "open_in_changelog": len(open_ids), "stories": stories}


def _events(value: bytes) -> list[dict]:
    doc = json.loads(value)
    return doc["events"] if doc.get("kind") == "batch" else [doc]


def _in_subprocess(what: str, dsn: str, database: str) -> dict:
    """The store must not be open anywhere else, and one process opens one chDB path."""
    out = subprocess.run([sys.executable, __file__, what, dsn, database], capture_output=True, text=True,
                         timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{what} of {dsn} failed: {out.stderr[-2000:]}")
    return json.loads(out.stdout)


def read_target(dsn: str, database: str) -> dict:
    return _in_subprocess("target", dsn, database)


def _target_here(dsn: str, database: str) -> dict:
    import clickhouse_connect

    # The installed package (`phasemeter.stream_jobs` exists only installed:
    # the repository's phasemeter/ folder would shadow it).
    from phasemeter.stream_jobs.ledger import all_tier_mismatches, slo_mismatches

    client = clickhouse_connect.get_client(dsn=dsn)
    client.database = database
    try:
        ids = client.query("SELECT request_id, count() FROM generations GROUP BY request_id").result_rows
        dead = client.query("SELECT reason, src_topic, src_partition, src_offset FROM dead_letters").result_rows
        lo, hi = datetime(2000, 1, 1, tzinfo=timezone.utc), datetime(2100, 1, 1, tzinfo=timezone.utc)
        bad = all_tier_mismatches(client, lo, hi)  # minute, hour and day tiers
        slo_bad = slo_mismatches(client, lo, hi)
        slo_n = client.query("SELECT count() FROM slo_definitions").result_rows[0][0]
        raw_n = client.query("SELECT count() FROM generations").result_rows[0][0]
        rollup_n = client.query("SELECT sum(n) FROM generations_minute").result_rows[0][0] or 0
    finally:
        client.close()
    return {"ids": {r: int(n) for r, n in ids}, "dead": [list(d) for d in dead], "raw_n": int(raw_n),
            "rollup_n": int(rollup_n),
            "rollup_mismatches": [[tier, m, b, t.isoformat(), r, n] for tier, m, b, t, r, n in bad],
            "slo_declared": int(slo_n),
            "slo_mismatches": [[i, m, b, t.isoformat(), r, n] for i, m, b, t, r, n in slo_bad]}


def damage(dsn: str, database: str) -> dict:
    return _in_subprocess("damage", dsn, database)


def _damage_here(dsn: str, database: str) -> dict:
    import clickhouse_connect

    client = clickhouse_connect.get_client(dsn=dsn)
    client.database = database
    try:
        first, second = [r[0] for r in client.query(
            "SELECT request_id FROM generations ORDER BY request_id LIMIT 2").result_rows]
        # Raw only (a lightweight delete does not pass through the view): the
        # rollup now disagrees with raw, as after a lost view block.
        client.command("DELETE FROM generations WHERE request_id = {r:String}", parameters={"r": first})
        client.command("INSERT INTO generations SELECT * FROM generations WHERE request_id = {r:String}",
                       parameters={"r": second}, settings={"insert_deduplicate": 0})
    finally:
        client.close()
    return {"deleted": first, "duplicated": second}


def _ranges(offsets: list[int]) -> list[str]:
    out, run = [], []
    for o in sorted(offsets):
        if run and o == run[-1] + 1:
            run.append(o)
        else:
            if run:
                out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
            run = [o]
    if run:
        out.append(f"{run[0]}-{run[-1]}" if len(run) > 1 else str(run[0]))
    return out


def compare(source: dict, targets: list[dict], protocol: str) -> dict:
    """Each acknowledged generation stored exactly once or dead-lettered;
    rollup = raw in every store. `ok` is False on any difference."""
    stored: Counter = Counter()
    dead: list = []
    mismatches: list = []
    slo_mismatches: list = []
    for t in targets:
        stored.update(t["ids"])
        dead += t["dead"]
        mismatches += t["rollup_mismatches"]
        slo_mismatches += t.get("slo_mismatches", [])
    expected = source["expected"]
    lost = sorted(set(expected) - set(stored))
    duplicated = sorted(r for r, n in stored.items() if n > 1)
    unexpected = sorted(set(stored) - set(expected))
    missing: dict[int, list[int]] = defaultdict(list)
    for rid in lost:
        for partition, offset in expected[rid]:
            missing[partition].append(offset)
    reasons = Counter(d[0] for d in dead)
    stored_rows = sum(stored.values())
    # One event per generation: a record the gateway's retry wrote twice is a
    # `duplicate` dead letter. Phase events: the join absorbs such copies.
    produced = source["generation_records"] if protocol == "single" else len(expected)
    accounted = stored_rows + len(dead)
    ok = not (lost or duplicated or unexpected or mismatches or slo_mismatches) and accounted == produced
    return {"ok": ok, "produced": produced, "distinct": len(expected), "stored": stored_rows,
            "dead": len(dead), "dead_reasons": dict(reasons), "lost": len(lost), "duplicated": len(duplicated),
            "unexpected": len(unexpected), "rollup_mismatches": len(mismatches),
            "rollup_mismatch_cells": mismatches[:10], "duplicated_ids": duplicated[:10],
            "slo_mismatches": len(slo_mismatches), "slo_mismatch_cells": slo_mismatches[:10],
            "slo_declared": sum(t.get("slo_declared", 0) for t in targets),
            "missing_offsets": {p: _ranges(o)[:20] for p, o in sorted(missing.items())},
            "raw_n": sum(t["raw_n"] for t in targets), "rollup_n": sum(t["rollup_n"] for t in targets)}


if __name__ == "__main__":
    what, dsn, database = sys.argv[1:4]
    print(json.dumps(_target_here(dsn, database) if what == "target" else _damage_here(dsn, database)))
