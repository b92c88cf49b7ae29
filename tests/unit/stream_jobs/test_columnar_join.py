"""Ingest's batch join in columns (stream_jobs/columnar_join.py) against the
row path (fast_decode.common_fields, batch_join.fold, derive): `Pipeline.split`
gives the same rows, the same Arrow table and batch token, the same phases
and notes to forward, the same cells to check and the same counts, whether
or not the batch took the columns; and a batch of well-formed phase
envelopes does take them."""

from __future__ import annotations

import json
import random
from types import SimpleNamespace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasemeter.settings import Settings
from phasemeter.stream_jobs.columnar import Generations
from phasemeter.stream_jobs.pipeline import Pipeline
from phasemeter.stream_jobs.sink import counted_token
from tests.unit.stream_jobs.test_derive_properties import NOW
from tests.unit.stream_jobs.test_fast_decode import BAD_VALUES, valid_phases
from tests.unit.stream_jobs.test_pipeline_rules import FakeSink, env

TOPIC = "gen"
PAST = 1_790_000_000.0  # the pipeline's clock is the real one: phases are moved before it
EPOCHS = ("t0", "t_first", "t_end")


class RowPath(Pipeline):
    def _phases_as_columns(self, events):
        return None


class Watched(Pipeline):
    took_columns = False

    def _phases_as_columns(self, events):
        out = super()._phases_as_columns(events)
        self.took_columns = out is not None
        return out


def moved(phase: dict, by: float = NOW - PAST) -> dict:
    return {k: v - by if k in EPOCHS and isinstance(v, (int, float)) and not isinstance(v, bool) else v
            for k, v in phase.items()}


def records(messages: list[list[dict]], first_offset: int = 0) -> list:
    out = []
    for i, events in enumerate(messages):
        value = json.dumps(env(*events) if len(events) > 1 else events[0]).encode()
        out.append(SimpleNamespace(value=value, message=SimpleNamespace(
            topic=TOPIC, partition=i % 3, offset=first_offset + i, timestamp=PAST + i)))
    return out


def split(cls, recs, sink_ids=(), resumed: bool = False):
    p = cls(Settings(topic=TOPIC), FakeSink(ids=sink_ids))
    if resumed:  # a new owner: the first records may be a re-read of the previous owner's batch
        p.bound_rereads({(TOPIC, part): 10**9 for part in range(3)})
    rows, dead, phases, suspects = p.split(recs)
    counts = (p.forwarded, p.joined_in_batch, p.skipped, p.duplicates, p.rejoined, dict(p.counts))
    return p, rows, [{k: v for k, v in d.items() if k != "ts"} for d in dead], phases, suspects, counts


def same_split(recs, **kw) -> bool:
    """Both ways through `split`; True when the batch took the columns."""
    fast, rows, dead, phases, suspects, counts = split(Watched, recs, **kw)
    _, rows_, dead_, phases_, suspects_, counts_ = split(RowPath, recs, **kw)
    assert dead == dead_
    assert phases == phases_
    assert suspects == suspects_
    assert counts == counts_
    assert list(rows) == list(rows_)  # every value of every row, None stays None, with its source
    if fast.took_columns:
        assert isinstance(rows, Generations) and not dead
        assert rows.arrow().to_pylist() == rows_.arrow().to_pylist()
        assert counted_token("generations", rows.counted_offsets()) == \
            counted_token("generations", rows_.counted_offsets())
    return fast.took_columns


def clean_batch(n: int, seed: int, size: int = 7) -> list[list[dict]]:
    """n generations as a gateway sends their phases, in the order of their
    event time, in envelopes of `size`."""
    rnd = random.Random(seed)
    timed = []
    for i in range(n):
        t0, ttft, e2e = PAST - rnd.uniform(0, 600), rnd.uniform(0.01, 2), 0.0
        e2e = ttft + rnd.uniform(0, 20)
        rid = f"r{seed}-{i}"
        start = {"schema_version": 2, "kind": "start", "request_id": rid, "model": rnd.choice("ab"), "t0": t0,
                 "input_tokens": rnd.randint(1, 9000)}
        if rnd.random() < 0.5:
            start["cached_input_tokens"] = rnd.randint(0, start["input_tokens"])
        end = {"schema_version": 2, "kind": "end", "request_id": rid, "output_tokens": rnd.randint(0, 900),
               "e2e_s": e2e, "finish_reason": "stop"}
        timed.append((t0, start))
        if rnd.random() < 0.9 or end["output_tokens"]:
            timed.append((t0 + ttft, {"schema_version": 2, "kind": "first_token", "request_id": rid,
                                      **({"ttft_s": ttft} if rnd.random() < 0.5 else {"t_first": t0 + ttft})}))
        timed.append((t0 + e2e, end))
    phases = [p for _, p in sorted(timed, key=lambda x: x[0])]
    return [phases[i:i + size] for i in range(0, len(phases), size)]


def test_a_batch_of_phase_envelopes_takes_the_columns_with_the_row_paths_results():
    assert same_split(records(clean_batch(300, seed=1)))


def test_open_generations_copies_and_lone_phases_are_forwarded_as_the_row_path_does():
    messages = clean_batch(200, seed=2)
    messages = messages[:-3]  # the last phases not read yet: their generations stay open
    messages.insert(4, [messages[2][0]])  # a lone phase (a message of one event), a copy too
    messages.append(messages[5] + messages[6][:2])  # copies of phases after their generation was joined
    assert same_split(records(messages))
    assert same_split(records(messages, first_offset=50), resumed=True)  # cells of the previous owner's batch


def test_what_the_columns_do_not_take_whole_goes_to_the_row_path():
    good = clean_batch(30, seed=3)
    start = good[0][0]
    gen = {"schema_version": 1, "kind": "generation", "request_id": "g", "model": "m", "t0": PAST - 5,
           "ttft_s": 0.5, "e2e_s": 2.0, "input_tokens": 1000, "output_tokens": 50}
    end_before_start = [{**start, "request_id": "x"}, {"schema_version": 2, "kind": "end", "request_id": "x",
                                                       "output_tokens": 0, "t_end": start["t0"] - 1}]
    late_first = [{**start, "request_id": "y"}, {"schema_version": 2, "kind": "end", "request_id": "y",
                                                  "output_tokens": 3, "e2e_s": 1.0, "ttft_s": 2.0}]
    longer_than_a_day = [{**start, "request_id": "z"}, {"schema_version": 2, "kind": "end", "request_id": "z",
                                                        "output_tokens": 0, "t_end": start["t0"] + 90_000}]
    for extra in ([gen, start], [{**start, "t0": "soon"}, start],  # a generation; a phase the row path refuses
                  [{**good[1][0], "chunks": 3, "max_gap_s": 0.1}, start],  # stall data: the full path's
                  end_before_start, late_first, longer_than_a_day):  # joined generations the derivation rejects
        assert not same_split(records(good + [extra]))
    assert not same_split(records([m[:1] for m in good]))  # nothing completes: no columns to write
    # A generation the store holds already: the row path drops it as a re-join.
    assert not same_split(records(good), sink_ids={"r3-0"})


@st.composite
def batches(draw) -> list[list[dict]]:
    """Generations' phases, some dropped, copied or broken, shuffled, in
    messages of 1-4 events."""
    phases = []
    for gen in draw(st.lists(valid_phases(), min_size=1, max_size=6)):
        for phase in gen:
            if draw(st.integers(0, 9)) == 0:
                continue
            phases += [moved(phase)] * draw(st.sampled_from([1, 1, 1, 2]))
    if phases and draw(st.integers(0, 4)) == 0:
        i = draw(st.integers(0, len(phases) - 1))
        phases[i] = {**phases[i], draw(st.sampled_from(["t0", "t_first", "e2e_s", "input_tokens", "model"])):
                     draw(st.one_of(BAD_VALUES, st.floats(-1e10, 1e10)))}
    phases = draw(st.permutations(phases)) if draw(st.booleans()) else phases
    out, i = [], 0
    while i < len(phases):
        n = draw(st.integers(1, 4))
        out.append(phases[i:i + n])
        i += n
    return out


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(batches(), st.booleans())
def test_generated_batches_give_the_row_paths_results(messages, resumed):
    if messages:
        same_split(records(messages), resumed=resumed)
