"""Property-based fuzzing of `Meter`'s calls with hostile argument values.
The invariant: each call is refused at the call (BadArgument, a ValueError
whose reason is one of the worker's codes, counted in refusals()) or its
event is sent; an event is never lost in the sender thread (failed stays 0),
and what is sent is JSON that UTF-8 encodes."""

from __future__ import annotations

import json
import math
from decimal import Decimal

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from phasemeter.producers import Meter
from phasemeter.stream_jobs import reasons as R
from test_emitter import FakeProducer

T0 = 1_764_000_000.0
TEXT = st.one_of(st.text(max_size=10), st.sampled_from(["\ud800", "ok\udfff", "", "x" * 300, "π"]))
ODD_NUMBERS = st.sampled_from([math.nan, math.inf, -1, 10**30, Decimal("1.5"), Decimal("NaN"), Decimal("-Infinity"),
                               Decimal("5"), True, 2**64])
NUMBER = st.one_of(ODD_NUMBERS, st.integers(min_value=-5, max_value=10**8), st.floats())
ANY = st.one_of(ODD_NUMBERS, TEXT, NUMBER, st.none(), st.just([1]), st.just({"a": 1}))
FIELDS = {"model": TEXT, "input_tokens": NUMBER, "output_tokens": NUMBER, "t0": st.one_of(NUMBER, st.just(T0)),
          "ttft_s": NUMBER, "e2e_s": NUMBER, "queue_s": NUMBER, "cached_input_tokens": NUMBER,
          "status": st.sampled_from(["ok", "error", "bogus"]), "finish_reason": TEXT, "request_id": TEXT,
          "replica": TEXT}
GOOD = {"model": "m", "input_tokens": 10, "output_tokens": 5, "t0": T0, "ttft_s": 0.1, "e2e_s": 1.0}


@pytest.fixture(scope="module")
def meter_and_fake():
    fake = FakeProducer()
    meter = Meter("127.0.0.1:1", topic="t", producer_factory=fake.factory, envelope_size=1, flush_timeout_s=5)
    yield meter, fake
    meter.close(1)


@settings(max_examples=400, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.fixed_dictionaries({}, optional={k: st.one_of(v, ANY) for k, v in FIELDS.items()}))
def test_every_call_is_refused_with_a_reason_or_its_event_is_sent(meter_and_fake, changes):
    meter, fake = meter_and_fake
    before, sent_before = meter.stats(), len(fake.records)
    try:
        meter.record(**{**GOOD, **changes})
    except ValueError as exc:
        assert exc.reason in R.ALL and str(exc)
        after = meter.stats()
        assert (after.refused, after.enqueued) == (before.refused + 1, before.enqueued)
        return
    assert meter.flush(5)
    after = meter.stats()
    assert (after.enqueued, after.sent, after.failed) == (before.enqueued + 1, before.sent + 1, before.failed)
    assert len(fake.records) == sent_before + 1
    _, key, value = fake.records[-1]
    event = json.loads(value.decode("utf-8"))
    assert event["model"] == changes.get("model", "m") and key.decode("utf-8") == event["request_id"]


@pytest.mark.parametrize("field", ["ttft_s", "e2e_s", "queue_s", "input_tokens", "output_tokens",
                                   "cached_input_tokens", "t0"])
def test_a_decimal_nan_is_refused_not_raised_as_invalid_operation(meter_and_fake, field):
    meter, _ = meter_and_fake
    with pytest.raises(ValueError, match=field) as exc:
        meter.record(**{**GOOD, "cached_input_tokens": 1, field: Decimal("NaN")})
    assert exc.value.reason in (R.NOT_FINITE, R.WRONG_TYPE)
