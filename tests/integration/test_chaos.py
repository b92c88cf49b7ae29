"""A fast subset of the chaos matrix (bench/chaos.py) in every `make test`:
random SIGKILLs of the worker while a gateway emits, and SIGKILLs during its
inserts beside one busy loop, for both protocols, then the source-vs-target
check. And the negative control: the same checker must fail a store with one
row deleted and one duplicated.

The seed is random per run and printed in any failure with the command that
reruns the cell (PHASEMETER_CHAOS_SEED fixes it). A failure prints counts,
the missing partition/offset ranges, /health and the worker's log tail.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import chaos  # noqa: E402
import chaos_check  # noqa: E402
from requires import missing  # noqa: E402

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# Busy loops beside the worker, per fault. Kills during an insert are timed to the insert, which a starved
# worker stretches: one loop. Random kills sample every moment whatever the load, and the suite's other test
# process is their neighbour; their busy loop cost ~75 s of the suite's 15-minute CI budget. `make chaos`
# runs every fault beside 0, 1 and 2 loops.
LOADS = {"kill": 0, "kill_insert": 1}
SEED = int(os.environ.get("PHASEMETER_CHAOS_SEED") or random.randrange(1, 100_000))


def run_cell(broker, tmp_path, fault: str, protocol: str, events: int, kills: int, seed: int,
             batch_bytes: int | None = None) -> dict:
    load = LOADS[fault]
    if broker is None:
        missing("the chaos cells kill and restart processes of a local broker run")
    # A SIGKILLed member keeps its partitions for its session, and each
    # restart waits that out: 3 s instead of 6 s where the worker has no
    # join table to recover (that recovery runs on the event loop, whose
    # heartbeats a 3 s session could miss beside the busy loop).
    session_s = 3.0 if protocol == "single" else chaos.SESSION_S
    cell = chaos.Cell(broker, fault, load, protocol, seed, events, tmp_path / "cell", sys.executable, kills, 0, print,
                      session_s=session_s, batch_bytes=batch_bytes)
    v = cell.run()
    v.update(topic=cell.topic, group=cell.group)
    assert v["ok"], chaos.report_failure(f"{fault}:{load}:{protocol}", v, chaos.rerun_command(
        fault, load, protocol, seed, events, kills, session_s, batch_bytes))
    assert v["injected"] >= kills // 2, f"only {v['injected']} of {kills} faults injected (seed {seed})"
    assert v["slo_declared"] >= 1, v  # the SLO counts were checked against raw, not vacuously
    return v


@pytest.fixture(scope="module")
def cells(kafka_broker, tmp_path_factory):
    """Each cell runs once per module: the negative control damages the store
    of a cell that has passed instead of running one of its own (~30 s)."""
    done: dict[tuple, dict] = {}

    def cell(fault: str, protocol: str, events: int, kills: int, batch_bytes: int | None = None) -> dict:
        key = (fault, protocol, events, kills, batch_bytes)
        if key not in done:
            done[key] = run_cell(kafka_broker, tmp_path_factory.mktemp("chaos"), *key[:4], SEED, batch_bytes)
        return done[key]
    return cell


# Batches of about three envelopes: each of the gateway's bursts is cut into
# several, and the worker decodes one while the one before is written
# (ingest_agent.py), so the random kills also find it there. One cell serves
# both claims: a second run of the same kills with the default batch size
# cost ~37 s of the suite's 15-minute CI budget and covered no other path.
KILL_SINGLE = ("kill", "single", 12_000, 8, 100_000)


@pytest.mark.parametrize("fault,protocol,events,kills,batch_bytes", [
    KILL_SINGLE,
    ("kill", "phases", 3_000, 8, None),
    ("kill_insert", "single", 10_000, 5, None),
    # The Meter sends phases in envelopes: most generations are joined in
    # ingest's batch, in columns (stream_jobs/batch_decode.py), and killed
    # in that batch's insert.
    ("kill_insert", "phases", 6_000, 4, None),
])
def test_random_kills_under_load_lose_nothing_and_count_nothing_twice(cells, fault, protocol, events, kills,
                                                                     batch_bytes):
    cells(fault, protocol, events, kills, batch_bytes)


def test_random_kills_while_the_next_batch_is_decoded_lose_nothing(cells):
    v = cells(*KILL_SINGLE)
    assert v["worker_counts"]["batches_decoded_ahead"] > 0, v["worker_counts"]


def test_negative_control_the_checker_reports_a_deleted_and_a_duplicated_row(kafka_broker, cells):
    v = cells(*KILL_SINGLE)  # passed the checker (run_cell asserts it)
    store = v["stores"][0]
    damaged = chaos_check.damage(f"chdb://{store}", "chaos")
    source = chaos_check.read_source(kafka_broker.bootstrap, v["topic"])
    verdict = chaos_check.compare(source, [chaos_check.read_target(f"chdb://{s}", "chaos") for s in v["stores"]],
                                  "single")
    assert not verdict["ok"]
    assert (verdict["lost"], verdict["duplicated"]) == (1, 1), verdict
    assert verdict["duplicated_ids"] == [damaged["duplicated"]]
    assert verdict["rollup_mismatches"] >= 1 and verdict["missing_offsets"], verdict
    assert verdict["slo_mismatches"] >= 1, verdict  # the SLO counts of the damaged cells disagree too


def test_the_join_story_of_a_failing_cell_names_an_open_generation_and_its_records(kafka_broker, cells):
    """What a cell left open in a join prints: a passing cell's changelog holds none; one open entry written
    into it is found, with the records of its generation in every topic."""
    from kafka import KafkaProducer

    from phasemeter.stream_jobs.join import phase_partition

    v = cells("kill", "phases", 3_000, 8)
    assert chaos_check.join_story(kafka_broker.bootstrap, v["topic"], v["group"])["open_in_changelog"] == 0
    rid = sorted(chaos_check.read_source(kafka_broker.bootstrap, v["topic"])["expected"])[0]
    # Where the join keeps it: a key's records share one partition of the changelog, the phases' (join.py).
    partition = phase_partition(rid, 4)
    producer = KafkaProducer(bootstrap_servers=kafka_broker.bootstrap)
    entry = {"p": partition, "seen": 1.0, "last": 1.0, "ph": {"start": {"model": "m-a"}}}
    producer.send(f"{v['group']}-phasemeter-join-changelog", key=rid.encode(), value=json.dumps(entry).encode(),
                  partition=partition).get(30)
    producer.close()
    story = chaos_check.join_story(kafka_broker.bootstrap, v["topic"], v["group"])
    assert story["open_in_changelog"] == 1, story
    told = story["stories"][rid]
    assert told["changelog"][-1] == (partition, told["changelog"][-1][1], {**entry, "ph": ["start"]}), told
    assert sorted(kind for *_, kind in told["raw"]) == ["end", "first_token", "start"], told
    assert told["phases"], told  # what ingest forwarded to the join, if it did not join the generation itself
