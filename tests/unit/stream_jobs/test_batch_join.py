"""Unit tests of ingest's join within a batch (stream_jobs/batch_join.py's
rules, applied by batch_decode.decode) and of the note it leaves the join
agent (join.JOINED_IN_INGEST).

The rule under test: a generation whose phases complete in the batch gives
one row, from the phase that completed it, and the agent hears of it only
through one note; everything else reaches the agent exactly as before.
"""

from __future__ import annotations

import itertools
import json
import random
from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs import join
from phasemeter.stream_jobs.batch_decode import decode
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Rejection, process_event
from phasemeter.stream_jobs.join import phase_partition
from phasemeter.stream_jobs.phase_events import validate_phase
from tests.unit.stream_jobs.test_fast_decode import valid_phases

NOW = 1_800_000_000.0
T0 = 1_799_999_000.0
BUCKET = Bucketer(parse_edges("default"))
PARTITIONS = 4


def phase(kind: str, rid: str, **fields) -> dict:
    out = validate_phase({"schema_version": 2, "kind": kind, "request_id": rid, **fields}, NOW)
    assert not isinstance(out, Rejection), out
    return out


def gen(rid: str, n_out: int = 101, ttft: float = 0.5, e2e: float = 2.5) -> list[dict]:
    return [phase("start", rid, model="llama", t0=T0, input_tokens=1000),
            phase("first_token", rid, ttft_s=ttft), phase("end", rid, output_tokens=n_out, e2e_s=e2e)]


def sent(fields: dict) -> dict:
    """A validated phase as a gateway sends it."""
    return {"schema_version": 2, **fields}


def fold(messages: list[list[dict]]):
    """The batch of these messages (phases as validate_phase gives them; an
    envelope each, but for a message of one): (its rows, as dicts with their
    message's offset, in the order of completion; the decoded batch). Each
    message's timestamp is NOW - 50 + its offset."""
    records = [SimpleNamespace(value=json.dumps(sent(m[0]) if len(m) == 1 else {
        "schema_version": 2, "kind": "batch", "events": [sent(f) for f in m]}).encode(),
        message=SimpleNamespace(topic="gen", partition=0, offset=i, timestamp=NOW - 50 + i))
        for i, m in enumerate(messages)]
    d = decode(records, BUCKET, 1_000_000, NOW, PARTITIONS)
    assert d.refused == [] and d.joined.all() and len(d.joined) == len(d.gens)
    return list(d.gens), d


def fwd(fields: dict, offset: int) -> tuple[int, float, dict]:
    """A phase as ingest forwards it, from the message at `offset`."""
    return phase_partition(fields["request_id"], PARTITIONS), NOW - 50 + offset, fields


def derive(event: dict) -> dict | None:
    row = process_event(event, BUCKET, NOW, internal=True)
    return None if isinstance(row, Rejection) else row


def kinds(forwarded) -> list[tuple[str, str]]:
    return [(f["request_id"], f["kind"]) for _, _, f in forwarded]


def unsourced(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.startswith("src_")}


@pytest.mark.parametrize("order", list(itertools.permutations(range(3))))
def test_a_generation_complete_in_the_batch_is_one_row_and_one_note(order):
    a = [gen("a")[i] for i in order]
    rows, out = fold([a[:2], [a[2], gen("b")[0]]])
    assert len(rows) == 1 and out.duplicates == 0
    row = rows[0]
    assert row["src_offset"] == 1  # the message of the phase that completed it, whatever its kind
    # The values the join agent would have written: 1000 / 0.5 and 100 / 2.0 by hand.
    assert (row["request_id"], row["model"], row["input_tokens"], row["output_tokens"]) == ("a", "llama", 1000, 101)
    assert row["prefill_tps"] == pytest.approx(2000.0) and row["decode_tps"] == pytest.approx(50.0)
    assert kinds(out.forward) == [("b", "start"), ("a", join.JOINED_IN_INGEST)]
    p, ts, note = out.forward[1]
    assert (p, ts) == fwd(a[2], 1)[:2] and note["kinds"] == ["end", "first_token", "start"]


def test_what_the_batch_does_not_complete_is_forwarded_unchanged_in_order():
    a, b, c = gen("a"), gen("b"), gen("c")
    phases = [b[0], a[0], b[1], a[1], a[2], c[1], c[2]]  # b has no end, c no start
    rows, out = fold([phases])
    assert [r["request_id"] for r in rows] == ["a"]
    assert out.forward[:4] == [fwd(phases[i], 0) for i in (0, 2, 5, 6)]
    assert kinds(out.forward[4:]) == [("a", join.JOINED_IN_INGEST)]


def test_copies_of_a_joined_generations_phases_are_dropped_and_counted():
    a = gen("a")
    rows, out = fold([[a[0], a[0], a[1]], [a[2], a[2], a[1]]])
    assert len(rows) == 1 and out.duplicates == 3
    assert kinds(out.forward) == [("a", join.JOINED_IN_INGEST)]


def test_an_end_that_needs_no_first_token_completes_and_a_later_one_is_a_copy():
    start = phase("start", "z", model="llama", t0=T0, input_tokens=1000)
    rows, out = fold([[start, phase("end", "z", output_tokens=0, e2e_s=0.3, status="error")],
                      [phase("first_token", "z", ttft_s=0.2), gen("y")[0]]])
    assert [(r["request_id"], r["output_tokens"], r["status"], r["src_offset"]) for r in rows] == [("z", 0, "error", 0)]
    assert out.duplicates == 1
    assert out.forward[-1][2]["kinds"] == ["end", "start"]  # after the forwarded start of y


def test_a_joined_event_the_derivation_rejects_goes_to_the_agent_as_phases():
    """e2e before ttft can only be seen across phases; the agent's joined
    topic then dead-letters it, the one place such a dead letter is written."""
    bad = gen("bad", ttft=3.0, e2e=1.0)
    stalled = [*gen("stall", ttft=3.0, e2e=1.0)[:2], {**gen("stall", ttft=3.0, e2e=1.0)[2], "chunks": 3,
                                                      "max_gap_s": 0.1}]  # an end the full path reads
    rows, out = fold([bad + gen("ok") + stalled])
    assert [r["request_id"] for r in rows] == ["ok"]
    assert out.forward[:3] == [fwd(f, 0) for f in bad] and out.duplicates == 0
    assert out.forward[3:6] == [fwd(f, 0) for f in stalled]
    assert kinds(out.forward[6:]) == [("ok", join.JOINED_IN_INGEST)]


def same_as_the_agent(messages: list[list[dict]]) -> None:
    """For every generation the batch completes, the row equals what the agent
    joins from the same phases (join.apply, through the same derivation);
    every phase of a message of more than one is forwarded, counted as a copy
    or named by a note."""
    rows, out = fold(messages)
    enveloped = [(i, f) for i, m in enumerate(messages) if len(m) > 1 for f in m]
    agent: dict = {}
    joined = {}
    for i, f in enveloped:
        new, outs, _ = join.apply(agent.get(f["request_id"]), f["request_id"], f, 0, NOW)
        agent[f["request_id"]] = new
        for rid, event in outs:
            row = derive(event)
            if row is not None:
                joined[rid] = (row, i)
    assert len(rows) == len(joined)
    assert {r["request_id"]: (unsourced(r), r["src_offset"]) for r in rows} == joined
    notes = [f for _, _, f in out.forward if f["kind"] == join.JOINED_IN_INGEST]
    assert [f["request_id"] for f in notes] == list(joined)
    others = [f for _, _, f in out.forward if f["kind"] != join.JOINED_IN_INGEST]
    lone = [m[0] for m in messages if len(m) == 1]
    assert others == lone + [f for _, f in enveloped if f["request_id"] not in joined]
    assert len(others) - len(lone) + out.duplicates + sum(len(f["kinds"]) for f in notes) == len(enveloped)


def test_agent_and_batch_give_the_same_row_on_a_shuffled_stream_with_copies():
    rng = random.Random(3)
    gens = {f"g{i}": gen(f"g{i}", n_out=rng.randint(1, 500), ttft=rng.uniform(0.01, 2)) for i in range(200)}
    for ph in list(gens.values())[::7]:
        ph[2] = {**ph[2], "chunks": 3, "max_gap_s": 0.1}  # an end the full path reads: the row is its
    events = [p for ph in gens.values() for p in ph if rng.random() > 0.1]  # some phases never come
    events += rng.sample(events, len(events) // 4)
    rng.shuffle(events)
    assert len(events) > 600  # 200 generations' phases, some missing, some copied
    messages, i = [], 0
    while i < len(events):
        n = rng.randint(1, 9)
        messages.append(events[i:i + n])
        i += n
    same_as_the_agent(messages)


@st.composite
def batches(draw) -> list[list[dict]]:
    """Generations' phases as validate_phase gives them, some dropped or
    copied, shuffled, in messages of 1-4 events."""
    phases = []
    for three in draw(st.lists(valid_phases(), min_size=1, max_size=6)):
        for raw in three:
            fields = validate_phase(raw, NOW)
            if isinstance(fields, Rejection) or draw(st.integers(0, 9)) == 0:
                continue
            phases += [fields] * draw(st.sampled_from([1, 1, 1, 2]))
    phases = draw(st.permutations(phases)) if draw(st.booleans()) else phases
    out, i = [], 0
    while i < len(phases):
        n = draw(st.integers(1, 4))
        out.append(phases[i:i + n])
        i += n
    return out


@settings(max_examples=400)
@given(batches())
def test_generated_batches_give_the_agents_rows(messages):
    """Phases the C decoder takes and phases only the full path reads (stall
    data), mixed: the same rows as the agent's, whichever way they were joined."""
    same_as_the_agent(messages)


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
