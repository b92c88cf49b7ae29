"""A worker stopped with SIGTERM (a rolling deploy) while a batch is in hand
hands its partitions over exactly: the consumer group's committed offset, the
store's progress ledger and the rows in the store all say the same thing.

A member that takes a partition over with no position of its own (here: each
member has a fresh embedded store) starts at the committed offset, so any
difference is data lost (committed past the stored rows) or stored twice
(rows past the committed offset). Each round stops the member at a random
moment or while /health says an insert is under way, beside two busy loops;
after the last round the union of the members' stores must hold every event
exactly once.
"""

from __future__ import annotations

import json
import random
import signal
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import clickhouse_connect
import pytest
from conftest import WorkerProc, wait_for
from kafka import KafkaAdminClient
from kafka.errors import KafkaError

from phasemeter.kafka_local import ensure_topics
from ports import free_port
from test_faults import good_event, produce

pytestmark = [pytest.mark.integration, pytest.mark.slow]

# Two stops at a random moment and two during an insert (six took ~30 s more of the suite's 15-minute CI budget,
# beside two busy loops). The chaos matrix's `members` cells stop members too.
ROUNDS = 4
# The emitter sends CHUNK events every 0.4 s until the last member has
# started (at most MAX_EVENTS): a fixed total ran out before the later rounds
# on a host where members drained it faster than the rounds went by, and a
# round that waits for an insert then found nothing left to insert.
CHUNK = 500
MAX_EVENTS = 60_000
PARTITIONS = 2


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        for attempt in range(60):  # the group coordinator may be moving (a member just left)
            try:
                offsets = admin.list_group_offsets({group: None}).get(group, {})
                break
            except KafkaError as exc:
                if not getattr(exc, "retriable", False) or attempt == 59:
                    raise
                time.sleep(0.5)
    finally:
        admin.close()
    return {tp.partition: om.offset for tp, om in offsets.items() if tp.topic == topic and om.offset >= 0}


def store_state(data_dir, database: str, topic: str) -> tuple[dict[int, int], dict[int, int], list[str]]:
    """-> (ledger position, rows stored, request_ids) per partition of `topic`."""
    client = clickhouse_connect.get_client(dsn=f"chdb://{data_dir}/store")
    try:
        client.database = database
        ledger = dict(client.query(
            "SELECT src_partition, max(next_offset) FROM consumer_progress WHERE src_topic = {t:String} "
            "GROUP BY src_partition", parameters={"t": topic}).result_rows)
        rows = dict(client.query(
            "SELECT src_partition, count() FROM generations WHERE src_topic = {t:String} GROUP BY src_partition",
            parameters={"t": topic}).result_rows)
        ids = [r[0] for r in client.query("SELECT request_id FROM generations").result_rows]
    finally:
        client.close()
    return {int(k): int(v) for k, v in ledger.items()}, {int(k): int(v) for k, v in rows.items()}, ids


def test_sigterm_mid_batch_hands_over_to_a_fresh_member_exactly(pm_env, tmp_path, busy_loops):
    bootstrap, topic = pm_env["KAFKA_BOOTSTRAP_SERVERS"], pm_env["PHASEMETER_TOPIC"]
    group, database = pm_env["PHASEMETER_GROUP_ID"], pm_env["PHASEMETER_DATABASE"]
    ensure_topics(bootstrap, [topic], PARTITIONS)
    events: list[dict] = []  # those sent so far, in order
    last_started = threading.Event()
    rng = random.Random(time.time_ns())
    seed_note = f"(random choices seeded {rng.random():.6f})"

    def emit():  # the stream keeps flowing through every hand-off
        while not last_started.is_set() and len(events) < MAX_EVENTS:
            chunk = [good_event(i) for i in range(len(events), len(events) + CHUNK)]
            produce(bootstrap, topic, [json.dumps(e).encode() for e in chunk], [e["request_id"].encode() for e in chunk])
            events.extend(chunk)
            time.sleep(0.4)

    def member(k: int) -> WorkerProc:
        data = tmp_path / f"member-{k}"
        # Large batches: a SIGTERM at a random moment often finds one in hand.
        env = {**pm_env, "PHASEMETER_DATA_DIR": str(data), "PHASEMETER_WEB_PORT": str(free_port()),
               "PHASEMETER_SQL_PORT": str(free_port()),
               "PHASEMETER_BATCH_ROWS": "20000", "PHASEMETER_BATCH_SECONDS": "2"}
        data.mkdir()
        w = WorkerProc(env, data, int(env["PHASEMETER_WEB_PORT"]))
        w.migrate()
        return w

    emitter = threading.Thread(target=emit, daemon=True)
    emitter.start()
    members: list[WorkerProc] = []
    prior: Counter = Counter()  # rows per partition of the members stopped so far (final once stopped)
    # Each member's store is migrated while the member before it works, as a
    # deploy prepares the next replica: a round's time is the hand-off's.
    prepare = ThreadPoolExecutor(1)
    try:
        upcoming = prepare.submit(member, 0)
        for k in range(ROUNDS + 1):
            w = upcoming.result()
            if k < ROUNDS:
                upcoming = prepare.submit(member, k + 1)
            members.append(w.start())
            if k == ROUNDS:
                last_started.set()
                break
            if k % 2:  # while an insert is under way: the batch in hand is mid-write
                wait_for(lambda: (w.health() or {}).get("writing_since"), 60,
                         f"an insert under way in round {k} {seed_note}", w.diagnose)
            else:
                time.sleep(rng.uniform(0.5, 3.0))
            before = w.health()
            w.proc.send_signal(signal.SIGTERM)
            w.proc.wait(60)
            ledger, rows, _ = store_state(w.data_dir, database, topic)
            group_at = committed(bootstrap, group, topic)
            # Partitions this member never stored anything of keep the group's
            # offset from before; only what it touched must agree three ways.
            # A member starts where the group committed, so its rows continue
            # those of the members before it.
            touched = set(ledger) | set(rows)
            assert {p: group_at.get(p, 0) for p in touched} == {p: ledger.get(p) for p in touched} == \
                {p: rows.get(p, 0) + prior[p] for p in touched}, (
                f"round {k} {seed_note}: committed {group_at}, ledger {ledger}, rows {rows}, "
                f"rows of earlier members {dict(prior)}; "
                f"/health before SIGTERM: {json.dumps(before)}\n{w.diagnose()}")
            prior.update(rows)
        emitter.join()
        last = members[-1]
        wait_for(lambda: sum(committed(bootstrap, group, topic).values()) >= len(events), 240,
                 "the last member to commit every event", last.diagnose)
    finally:
        last_started.set()
        prepare.shutdown(cancel_futures=True)
        for m in members:
            m.stop()
    stored = Counter()
    for m in members:
        stored.update(store_state(m.data_dir, database, topic)[2])
    expected = {e["request_id"] for e in events}
    lost, twice = expected - set(stored), [r for r, n in stored.items() if n > 1]
    assert not lost and not twice and set(stored) == expected, (
        f"{seed_note}: {len(lost)} lost, {len(twice)} stored twice across {len(members)} members; "
        f"committed {committed(bootstrap, group, topic)}")

