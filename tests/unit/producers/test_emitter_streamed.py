"""Meter.record()'s `streamed` argument: streamed=False says the call was not
streamed, so output tokens without a first token are stored (null phases)
instead of dead-lettered; it rides on the v2 generation event, beside the
other v2 fields, and a non-bool is refused at the call."""

from __future__ import annotations

import pytest
from test_emitter import FakeProducer, meters  # noqa: F401 (a fixture)
from test_emitter_chunks import accepted, sent

from phasemeter.producers.generation import BadArgument
from phasemeter.stream_jobs.derive import process_message
from test_emitter_chunks import BUCKET, WALL

T0 = 1_767_225_600.0


def test_a_call_not_streamed_is_sent_and_stored_with_null_phases(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=T0, e2e_s=2.0, streamed=False)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 2 and ev["streamed"] is False and ev["ttft_s"] is None
    [row] = accepted(meter, fake)
    assert (row["streamed"], row["ttft_s"], row["prefill_tps"], row["decode_tps"], row["e2e_s"]) == (
        0, None, None, None, 2.0)


def test_it_rides_with_the_other_v2_fields(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=T0, e2e_s=2.0, streamed=False,
                 output_tokens_estimated=True, decode_replica="d-1")
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=T0, ttft_s=0.4, e2e_s=2.0, streamed=True)
    first, second = sent(meter, fake)
    assert (first["streamed"], first["output_tokens_estimated"], first["decode_replica"]) == (False, True, "d-1")
    assert second["streamed"] is True and "decode_replica" not in second
    assert [r["streamed"] for r in accepted(meter, fake)] == [0, 1]


def test_without_it_the_event_stays_v1_and_output_without_a_first_token_is_refused(meters):
    meter, fake = meters()
    meter.record(model="m", input_tokens=10, output_tokens=5, t0=T0, e2e_s=2.0)
    [ev] = sent(meter, fake)
    assert ev["schema_version"] == 1 and "streamed" not in ev
    [_, _, value] = fake.records[0]
    [r] = process_message(value, BUCKET, 1_000_000, WALL + 60)
    assert r.reason == "inconsistent" and "streamed: false" in r.detail


@pytest.mark.parametrize("value", [0, "false", 1.0])
def test_a_non_bool_is_refused_at_the_call(meters, value):
    meter, fake = meters()
    with pytest.raises(BadArgument) as exc:
        meter.record(model="m", input_tokens=10, output_tokens=5, t0=T0, e2e_s=2.0, streamed=value)
    assert exc.value.reason == "wrong_type" and "streamed" in str(exc.value)
    assert meter.refusals()["wrong_type"] == 1
