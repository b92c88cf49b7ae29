"""The emitter refuses a label with a control character by the worker's own
rule (contract.has_control), naming the argument, before anything is queued."""

from __future__ import annotations

import pytest

from phasemeter.producers import Meter


@pytest.fixture
def meter():
    m = Meter(bootstrap_servers="127.0.0.1:1", topic="t", queue_size=10)
    yield m
    m.close(timeout_s=0.1)


@pytest.mark.parametrize("control", ["\x1b[2J", "\x00", "\r\n", "\x7f", "\x85"], ids=repr)
@pytest.mark.parametrize("label", ["model", "request_id", "replica", "finish_reason"])
def test_record_refuses_a_control_character_in_a_label(meter, label, control):
    args = dict(model="m", t0=1_800_000_000.0, input_tokens=5, output_tokens=2, ttft_s=0.1, e2e_s=1.0, request_id="r", replica="x",
                finish_reason="stop")
    args[label] = "a" + control
    with pytest.raises(ValueError, match=f"{label} holds a control character"):
        meter.record(**args)
    assert meter.stats().enqueued == 0


def test_gateway_and_phase_request_ids_follow_the_same_rule():
    with pytest.raises(ValueError, match="gateway holds a control character"):
        Meter(bootstrap_servers="127.0.0.1:1", topic="t", gateway="gw\x1b]0;x\x07")
    from phasemeter.producers.phases import check_request_id

    with pytest.raises(ValueError, match="request_id holds a control character"):
        check_request_id("r\n")
    check_request_id("modèle-✓")  # printable text in any script is a label
