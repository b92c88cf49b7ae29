"""Generation.finish()'s prefill/decode fields (prefill_replica,
decode_replica, kv_transfer_s): sent on the v2 generation event and on the
`end` phase, accepted by the worker as sent, and refused at the call by the
worker's own rules. Clocks are fixed as in test_emitter_chunks."""

from __future__ import annotations

import pytest
from test_emitter import FakeProducer, meters  # noqa: F401 (a fixture)
from test_emitter_chunks import accepted, fixed_clocks, sent

from phasemeter.producers.generation import BadArgument

PD = {"prefill_replica": "prefill-pool-a", "decode_replica": "decode-pool-b", "kv_transfer_s": 0.05}


def test_the_generation_event_carries_them_and_the_worker_stores_them(meters, monkeypatch):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 100.4, 102.0, 102.0])  # start, first token, finish's check, end
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        g.finish(output_tokens=5, **PD)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 2 and {k: ev[k] for k in PD} == PD
    assert not {"chunks", "max_gap_s", "gaps_over", "gap_threshold_s", "output_tokens_estimated"} & set(ev)
    [row] = accepted(meter, fake)
    assert {k: row[k] for k in PD} == PD


def test_with_chunk_data_both_ride_along(meters, monkeypatch):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 100.4, 100.4, 100.5, 102.0, 102.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.chunk()
        g.chunk()
        g.finish(output_tokens=2, decode_replica="d-1")
    [ev] = sent(meter, fake)
    assert (ev["chunks"], ev["decode_replica"]) == (2, "d-1") and "prefill_replica" not in ev
    [row] = accepted(meter, fake)
    assert (row["chunks"], row["decode_replica"], row["prefill_replica"], row["kv_transfer_s"]) == (2, "d-1", "", None)


def test_the_end_phase_carries_them_and_the_join_keeps_them(meters, monkeypatch):
    meter, fake = meters(phase_events=True)
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        g.finish(output_tokens=5, prefill_replica="p-0", decode_replica="d-0")
    evs = sent(meter, fake)
    ends = [e for e in evs if e["kind"] == "end"]
    assert len(ends) == 1 and (ends[0]["prefill_replica"], ends[0]["decode_replica"]) == ("p-0", "d-0")
    assert "kv_transfer_s" not in ends[0]


@pytest.mark.parametrize("kw,reason", [
    ({"prefill_replica": ""}, "bad_value"),
    ({"decode_replica": "d\x1b"}, "control_character"),
    ({"decode_replica": 3}, "wrong_type"),
    ({"kv_transfer_s": -0.1}, "negative"),
    ({"kv_transfer_s": float("nan")}, "not_finite"),
    ({"kv_transfer_s": 0.5}, "inconsistent"),  # longer than the TTFT of 0.4 s
])
def test_bad_values_are_refused_at_the_call(meters, monkeypatch, kw, reason):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 100.4, 102.0, 102.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.first_token()
        with pytest.raises(BadArgument) as exc:
            g.finish(output_tokens=5, **kw)
        assert exc.value.reason == reason
        assert next(iter(kw)) in str(exc.value)
        g.finish(output_tokens=5)  # the refused call sent nothing; the generation can still end
    assert meter.refusals()[reason] == 1
    [ev] = sent(meter, fake)
    assert not set(PD) & set(ev)


def test_without_a_first_token_the_transfer_is_bounded_by_the_end(meters, monkeypatch):
    meter, fake = meters()
    fixed_clocks(monkeypatch, [100.0, 101.0, 101.0])
    with meter.generation(model="m", input_tokens=10) as g:
        g.finish(output_tokens=0, status="cancelled", kv_transfer_s=0.9)
    [row] = accepted(meter, fake)
    assert (row["ttft_s"], row["kv_transfer_s"]) == (None, 0.9)


def test_record_takes_them_too(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=1_767_225_600.0, ttft_s=0.4, e2e_s=2.0, **PD)
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=1_767_225_600.0, ttft_s=0.4, e2e_s=2.0,
                 chunks=4, max_gap_s=0.2, output_tokens_estimated=True, decode_replica="d-9")
    with pytest.raises(BadArgument) as exc:
        meter.record(model="m", input_tokens=10, output_tokens=5, t0=1_767_225_600.0, ttft_s=0.4, e2e_s=2.0,
                     kv_transfer_s=0.41)
    assert exc.value.reason == "inconsistent"
    first, second = sent(meter, fake)
    assert first["schema_version"] == 2 and {k: first[k] for k in PD} == PD
    assert (second["chunks"], second["output_tokens_estimated"], second["decode_replica"]) == (4, True, "d-9")
    rows = accepted(meter, fake)
    assert [r["decode_replica"] for r in rows] == ["decode-pool-b", "d-9"]


def test_the_phase_calls_take_them_on_the_start_and_the_end(meters):
    meter, fake = meters()
    rid = meter.start(model="m", input_tokens=10, t0=1_767_225_600.0, prefill_replica="p-1", kv_transfer_s=0.02)
    meter.end(rid, output_tokens=3, e2e_s=1.0, decode_replica="d-2")
    with pytest.raises(BadArgument) as exc:
        meter.end(rid, output_tokens=3, e2e_s=1.0, kv_transfer_s=-1)
    assert exc.value.reason == "negative"
    start, end = sent(meter, fake)
    assert (start["kind"], start["prefill_replica"], start["kv_transfer_s"]) == ("start", "p-1", 0.02)
    assert (end["kind"], end["decode_replica"]) == ("end", "d-2") and "chunks" not in end
    assert not {"decode_replica", "chunks"} & set(start) and "prefill_replica" not in end
