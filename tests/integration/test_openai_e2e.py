"""The OpenAI wrapper end to end: the real SDK against the local scripted
server, the real Meter, the real Kafka broker; the event is read back with
kafka-python and must be one the worker accepts."""

from __future__ import annotations

import time
import uuid

import openai
import pytest
from llm_server import LLMServer, Script

from kafka_events import records_in, unwrap
from phasemeter.integrations.openai import instrument
from phasemeter.producers import Meter
from phasemeter.stream_jobs.derive import validate

pytestmark = pytest.mark.integration


def test_a_streamed_call_reaches_kafka_as_a_valid_event(kafka_bootstrap):
    topic = f"openai-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, gateway="openai-e2e")
    script = Script(ttft_s=0.04, gap_s=0.01, chunks=5, model="served-e2e", prompt_tokens=300, cached_tokens=256)
    with LLMServer() as srv:
        srv.push(script)
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        inst = instrument(client, meter)
        # The caller's own clock: `call` is no later than the wrapper's start,
        # `first` no earlier than it saw the first token, `end` no earlier
        # than it ended, so ttft_s <= first - call and e2e_s <= end - call.
        parts, first, call = [], None, time.monotonic()
        for c in client.chat.completions.create(model="req", messages=[{"role": "user", "content": "hi"}],
                                                stream=True):
            parts.append(c.choices[0].delta.content or "")
            if first is None and parts[-1]:
                first = time.monotonic()
        end = time.monotonic()
        text = "".join(parts)
        served = srv.log[-1]
    assert text == "t0 t1 t2 t3 t4 "
    assert meter.flush(15)
    meter.close()
    assert meter.stats().sent == 1 and inst.stats["recorded"] == 1

    # The meter flushed (acked): the whole topic up to its end offsets is one message.
    (record,) = records_in(kafka_bootstrap, topic, at_least=1)
    (ev,) = unwrap(record.value)  # an envelope of one (the Meter's default)
    assert record.key is None
    assert (ev["model"], ev["gateway"], ev["status"], ev["finish_reason"]) == ("served-e2e", "openai-e2e", "ok", "stop")
    assert (ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == (300, 5, 256)
    assert served.t_chunks[0] - served.t_request <= ev["ttft_s"] <= first - call
    assert served.t_chunks[-1] - served.t_request <= ev["e2e_s"] <= end - call
    assert isinstance(validate(ev), dict)  # what the worker stores, not dead-letters
