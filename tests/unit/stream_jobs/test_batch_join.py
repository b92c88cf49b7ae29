"""Unit tests of ingest's join within a batch (stream_jobs/batch_join.py)
and of the note it leaves the join agent (join.JOINED_IN_INGEST).

The rule under test: a generation whose phases complete in the batch gives
one row, from the phase that completed it, and the agent hears of it only
through one note; everything else reaches the agent exactly as before.
"""

from __future__ import annotations

import itertools
import random

import pytest

from phasemeter.stream_jobs import batch_join, join
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_event
from phasemeter.stream_jobs.phase_events import validate_phase

NOW = 1_800_000_000.0
T0 = 1_799_999_000.0
BUCKET = Bucketer(parse_edges("default"))


def phase(kind: str, rid: str, **fields) -> dict:
    out = validate_phase({"schema_version": 2, "kind": kind, "request_id": rid, **fields}, NOW)
    assert not isinstance(out, Rejection), out
    return out


def gen(rid: str, n_out: int = 101, ttft: float = 0.5, e2e: float = 2.5) -> list[dict]:
    return [phase("start", rid, model="llama", t0=T0, input_tokens=1000),
            phase("first_token", rid, ttft_s=ttft), phase("end", rid, output_tokens=n_out, e2e_s=e2e)]


def fwd(phases: list[dict], partition: int = 2) -> list[tuple[int, float, dict]]:
    return [(partition, NOW - 50 + i, f) for i, f in enumerate(phases)]


def derive(event: dict) -> dict | None:
    row = process_event(event, BUCKET, NOW, internal=True)
    return None if isinstance(row, Rejection) else row


def kinds(forwarded) -> list[tuple[str, str]]:
    return [(f["request_id"], f["kind"]) for _, _, f in forwarded]


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_a_generation_complete_in_the_batch_is_one_row_and_one_note(order):
    phases = fwd([gen("a")[i] for i in order])
    out = batch_join.fold(phases, derive)
    assert len(out.rows) == 1 and out.duplicates == 0
    row, i = out.rows[0]
    assert i == 2  # the phase that completed it, whatever its kind
    # The values the join agent would have written: 1000 / 0.5 and 100 / 2.0 by hand.
    assert (row["request_id"], row["model"], row["input_tokens"], row["output_tokens"]) == ("a", "llama", 1000, 101)
    assert row["prefill_tps"] == pytest.approx(2000.0) and row["decode_tps"] == pytest.approx(50.0)
    assert kinds(out.forward) == [("a", join.JOINED_IN_INGEST)]
    p, ts, note = out.forward[0]
    assert (p, ts) == phases[2][:2] and sorted(note["kinds"]) == ["end", "first_token", "start"]


def test_what_the_batch_does_not_complete_is_forwarded_unchanged_in_order():
    a, b, c = gen("a"), gen("b"), gen("c")
    phases = fwd([b[0], a[0], b[1], a[1], a[2], c[1], c[2]])  # b has no end, c no start
    out = batch_join.fold(phases, derive)
    assert [r["request_id"] for r, _ in out.rows] == ["a"]
    assert out.forward[:4] == [phases[0], phases[2], phases[5], phases[6]]
    assert kinds(out.forward[4:]) == [("a", join.JOINED_IN_INGEST)]


def test_copies_of_a_joined_generations_phases_are_dropped_and_counted():
    a = gen("a")
    phases = fwd([a[0], a[0], a[1], a[2], a[2], a[1]])
    out = batch_join.fold(phases, derive)
    assert len(out.rows) == 1 and out.duplicates == 3
    assert kinds(out.forward) == [("a", join.JOINED_IN_INGEST)]


def test_an_end_that_needs_no_first_token_completes_and_a_later_one_is_a_copy():
    start = phase("start", "z", model="llama", t0=T0, input_tokens=1000)
    phases = fwd([start, phase("end", "z", output_tokens=0, e2e_s=0.3, status="error"),
                  phase("first_token", "z", ttft_s=0.2)])
    out = batch_join.fold(phases, derive)
    assert [(r["request_id"], r["output_tokens"], r["status"]) for r, _ in out.rows] == [("z", 0, "error")]
    assert out.rows[0][1] == 1 and out.duplicates == 1
    assert out.forward[0][2]["kinds"] == ["end", "start"]


def test_a_joined_event_the_derivation_rejects_goes_to_the_agent_as_phases():
    """e2e before ttft can only be seen across phases; the agent's joined
    topic then dead-letters it, the one place such a dead letter is written."""
    bad = gen("bad", ttft=3.0, e2e=1.0)
    phases = fwd(bad + gen("ok"))
    out = batch_join.fold(phases, derive)
    assert [r["request_id"] for r, _ in out.rows] == ["ok"]
    assert out.forward[:3] == phases[:3] and out.duplicates == 0
    assert kinds(out.forward[3:]) == [("ok", join.JOINED_IN_INGEST)]


def test_agent_and_batch_give_the_same_row_on_a_shuffled_stream_with_copies():
    """For every generation the batch completes, the row equals what the agent
    joins from the same phases (through the same derivation)."""
    rng = random.Random(3)
    gens = {f"g{i}": gen(f"g{i}", n_out=rng.randint(1, 500), ttft=rng.uniform(0.01, 2)) for i in range(200)}
    events = [p for ph in gens.values() for p in ph if rng.random() > 0.1]  # some phases never come
    events += rng.sample(events, len(events) // 4)
    rng.shuffle(events)
    phases = fwd(events)
    out = batch_join.fold(phases, derive)
    agent: dict = {}
    assert len(phases) == len(events) > 200  # 200 generations' phases, some missing, some copied
    joined = 0
    for p, ts, f in phases:
        new, outs, _ = join.apply(agent.get(f["request_id"]), f["request_id"], f, p, ts)
        agent[f["request_id"]] = new
        for rid, event in outs:
            assert derive(event) == next(r for r, _ in out.rows if r["request_id"] == rid)
            joined += 1
    complete = {rid for rid, e in agent.items() if "done" in e}
    assert joined == len(complete) > 0  # the agent wrote each completed generation once
    assert {r["request_id"] for r, _ in out.rows} == complete
    forwarded = [f["request_id"] for _, _, f in out.forward if f["kind"] != join.JOINED_IN_INGEST]
    assert set(forwarded) == set(gens) - complete - {rid for rid in gens if rid not in agent}
    assert len(forwarded) + out.duplicates + sum(len(agent[r]["kinds"]) for r in complete) == len(phases)


def test_the_note_leaves_the_agent_a_done_marker_and_later_copies_are_duplicates():
    note = {"kind": join.JOINED_IN_INGEST, "request_id": "a", "kinds": ["end", "first_token", "start"]}
    marker, outs, what = join.apply(None, "a", note, 4, NOW)
    assert (outs, what) == ([], "joined_in_ingest")
    assert marker == {"p": 4, "done": NOW, "how": "joined", "kinds": ["end", "first_token", "start"]}
    copies = gen("a")
    assert len(copies) == 3  # start, first_token, end
    for p in copies:
        assert join.apply(marker, "a", p, 4, NOW + 1) == (marker, [], "duplicate")
    assert join.apply(marker, "a", note, 4, NOW + 1) == (marker, [], "duplicate")  # a re-read sends it again
    # An entry the agent held open (a copy of the start read earlier) is closed by the note, with no output.
    open_entry, _, _ = join.apply(None, "a", gen("a")[0], 4, NOW - 5)
    closed, outs, what = join.apply(open_entry, "a", note, 4, NOW)
    assert (closed["how"], outs, what) == ("joined", [], "joined_in_ingest")
    assert join.expire(closed, "a", NOW + 61, 600.0, 60.0)[2] == "forgotten"
