"""The emitter's edges: values it could not encode are refused at the call,
with a reason, and counted; a batch goes into the queue whole or not at all.
No broker: the producer factory fails, so whatever is enqueued stays queued."""

from __future__ import annotations

import math

import pytest

from phasemeter.producers import Meter
from phasemeter.stream_jobs import reasons as R

T0 = 1_764_000_000.0
GOOD = dict(model="m", input_tokens=10, output_tokens=5, t0=T0, ttft_s=0.1, e2e_s=1.0)
LONE = "\ud800"  # what json.loads makes of "\ud800": a str UTF-8 cannot encode


def no_broker(**_kwargs):
    raise ConnectionError("no broker in this test")


@pytest.fixture
def meter():
    m = Meter("127.0.0.1:1", queue_size=5, producer_factory=no_broker, flush_timeout_s=0)
    yield m
    m.close(0)


@pytest.mark.parametrize("field", ["model", "request_id", "finish_reason", "replica"])
def test_a_lone_surrogate_is_refused_at_the_call_and_counted(meter, field):
    with pytest.raises(ValueError, match=field):
        meter.record(**{**GOOD, field: f"ok{LONE}"})
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.refused) == (0, 0, 1)
    assert meter.refusals() == {R.NOT_UTF8: 1}  # the worker's reason for the same value


@pytest.mark.parametrize("field", ["model", "request_id", "replica"])
def test_generation_and_phases_refuse_a_lone_surrogate_too(meter, field):
    with pytest.raises(ValueError, match=field):
        meter.generation(**{"model": "m", "input_tokens": 1, field: LONE})
    with pytest.raises(ValueError, match=field):
        meter.start(**{"model": "m", "input_tokens": 1, field: LONE})
    assert meter.stats().enqueued == 0 and meter.stats().refused == 2


def test_finish_refuses_a_lone_surrogate_finish_reason(meter):
    g = meter.generation(model="m", input_tokens=1)
    with pytest.raises(ValueError, match="finish_reason"):
        g.finish(1, finish_reason=LONE)
    with pytest.raises(ValueError, match="finish_reason"):
        meter.end("rid", output_tokens=1, e2e_s=1.0, finish_reason=LONE)
    assert meter.stats().enqueued == 0


def test_a_lone_surrogate_gateway_is_refused_when_the_meter_is_built():
    with pytest.raises(ValueError, match="gateway"):
        Meter("127.0.0.1:1", gateway=LONE, producer_factory=no_broker)


@pytest.mark.parametrize("t0", [math.nan, math.inf, -math.inf, "1764000000", None, True])
def test_a_t0_that_cannot_be_encoded_as_a_number_is_refused_at_the_call(meter, t0):
    with pytest.raises(ValueError, match="t0"):
        meter.record(**{**GOOD, "t0": t0})
    reason = R.NOT_FINITE if type(t0) is float else R.WRONG_TYPE
    assert meter.stats().enqueued == 0 and meter.refusals() == {reason: 1}


@pytest.mark.parametrize("field,value,reason", [("e2e_s", "1.0", R.WRONG_TYPE), ("input_tokens", "5", R.WRONG_TYPE),
                                                ("output_tokens", None, R.WRONG_TYPE),
                                                ("ttft_s", math.nan, R.NOT_FINITE), ("input_tokens", -1, R.NEGATIVE)])
def test_a_value_of_the_wrong_type_is_a_refusal_never_a_type_error(meter, field, value, reason):
    with pytest.raises(ValueError, match=field):
        meter.record(**{**GOOD, field: value})
    assert meter.refusals() == {reason: 1}


def test_text_utf8_encodes_is_taken(meter):
    meter.record(**{**GOOD, "model": "llama-π-8b", "replica": "gpu-ü", "finish_reason": "stop"})
    assert meter.stats().enqueued == 1 and meter.stats().refused == 0


def test_a_batch_goes_in_whole_or_not_at_all(meter):
    meter.record(**GOOD)
    meter.record(**GOOD)                          # 2 of 5 taken
    big = meter.batch()
    for i in range(4):
        big.record(**{**GOOD, "request_id": f"r{i}"})
    assert len(big) == 4
    assert meter.put_all(big) is False            # 2 + 4 > 5: nothing of it goes in
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued) == (2, 0, 2)
    small = meter.batch()
    for i in range(3):
        small.record(**{**GOOD, "request_id": f"s{i}"})
    assert meter.put_all(small) is True           # exactly fills the queue
    s = meter.stats()
    assert (s.enqueued, s.dropped, s.queued) == (5, 0, 5)


def test_a_batch_refuses_at_its_own_call_and_keeps_the_rest(meter):
    b = meter.batch()
    b.record(**GOOD)
    with pytest.raises(ValueError, match="model"):
        b.record(**{**GOOD, "model": LONE})
    assert len(b) == 1 and meter.put_all(b) and meter.stats().enqueued == 1
    assert meter.stats().refused == 1


def test_a_closed_meter_takes_no_batch(meter):
    b = meter.batch()
    b.record(**GOOD)
    meter.close(0)
    assert meter.put_all(b) is False and meter.stats().enqueued == 0


def test_numbers_json_cannot_write_itself_are_sent_as_the_numbers_they_are():
    import json
    from decimal import Decimal
    from fractions import Fraction

    from phasemeter.producers.generation import encode

    class Count(int):  # an int subclass, as numpy's are registered numbers
        pass

    item = ("r1", "m", Decimal("1764000000.5"), Fraction(1, 10), Decimal("1.5"), None, Count(10), Decimal(5),
            None, "ok", None, None, None)
    event = json.loads(encode(item, None)[1])
    assert (event["t0"], event["ttft_s"], event["e2e_s"], event["input_tokens"], event["output_tokens"]) == \
        (1764000000.5, 0.1, 1.5, 10, 5)
    assert type(event["output_tokens"]) is int
