"""The OpenAI wrapper end to end: the real SDK against the local scripted
server, the real Meter, the real Kafka broker; the event is read back with
kafka-python and must be one the worker accepts."""

from __future__ import annotations

import json
import uuid

import openai
import pytest
from llm_server import LLMServer, Script

from kafka_events import unwrap
from phasemeter.integrations.openai import instrument
from phasemeter.producers import Meter
from phasemeter.stream_jobs.derive import validate

pytestmark = pytest.mark.integration


def test_a_streamed_call_reaches_kafka_as_a_valid_event(kafka_bootstrap):
    from kafka import KafkaConsumer

    topic = f"openai-{uuid.uuid4().hex[:10]}"
    meter = Meter(kafka_bootstrap, topic=topic, gateway="openai-e2e")
    script = Script(ttft_s=0.04, gap_s=0.01, chunks=5, model="served-e2e", prompt_tokens=300, cached_tokens=256)
    with LLMServer() as srv:
        srv.push(script)
        client = openai.OpenAI(base_url=srv.base_url, api_key="k", max_retries=0)
        inst = instrument(client, meter)
        text = "".join(c.choices[0].delta.content or "" for c in
                       client.chat.completions.create(model="req", messages=[{"role": "user", "content": "hi"}],
                                                      stream=True))
        served = srv.log[-1]
    assert text == "t0 t1 t2 t3 t4 "
    assert meter.flush(15)
    meter.close()
    assert meter.stats().sent == 1 and inst.stats["recorded"] == 1

    consumer = KafkaConsumer(topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest",
                             consumer_timeout_ms=10_000)
    try:
        record = next(iter(consumer))
    finally:
        consumer.close()
    (ev,) = unwrap(record.value)  # an envelope of one (the Meter's default)
    assert record.key is None
    assert (ev["model"], ev["gateway"], ev["status"], ev["finish_reason"]) == ("served-e2e", "openai-e2e", "ok", "stop")
    assert (ev["input_tokens"], ev["output_tokens"], ev["cached_input_tokens"]) == (300, 5, 256)
    assert served.t_chunks[0] - served.t_request <= ev["ttft_s"] <= script.ttft_s + 0.03
    assert served.t_chunks[-1] - served.t_request <= ev["e2e_s"] <= script.ttft_s + 4 * script.gap_s + 0.03
    assert isinstance(validate(ev), dict)  # what the worker stores, not dead-letters
