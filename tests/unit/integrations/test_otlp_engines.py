"""What engines really send (phasemeter.integrations.otlp_map): aborts,
embeddings, n > 1, other TTFT names, error.type, non-streaming calls, and
replica labels that must not explode. Spans are OTLP-JSON dicts built by
test_otlp_map's helpers; expected values are the ones set on the spans."""

from __future__ import annotations

import pytest

from phasemeter.integrations.otlp_map import map_export
from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.contract import Rejection
from phasemeter.stream_jobs.derive import validate

from test_otlp_map import GENAI, SGLANG, T0_NS, VLLM, export, one, span

UUID = "3f2a9c1e-5b7d-4e8f-9a0b-1c2d3e4f5a6b"


def test_replica_prefers_host_name_to_the_sdk_random_instance_id():
    e = one(VLLM, resource={"service.instance.id": UUID, "host.name": "gpu-7"})
    assert e["replica"] == "gpu-7"


def test_a_uuid_shaped_replica_is_dropped_and_counted():
    m = map_export(export(span(attrs=VLLM), resource={"service.instance.id": UUID}))
    assert len(m.events) == 1 and m.events[0]["replica"] is None
    assert m.replicas_dropped == 1
    m = map_export(export(span(attrs=VLLM), resource={"service.instance.id": UUID.replace("-", "").upper()}))
    assert m.events[0]["replica"] is None and m.replicas_dropped == 1


def test_phasemeter_replica_attribute_wins_and_is_kept_as_asked():
    e = one(VLLM, resource={"phasemeter.replica": UUID, "host.name": "gpu-7"})
    assert e["replica"] == UUID
    e = one(VLLM, resource={"phasemeter.replica": "pool-a/0", "service.instance.id": "vllm-0"})
    assert e["replica"] == "pool-a/0"


def test_vllm_abort_before_first_token_with_queue_is_cancelled_not_impossible_order():
    attrs = {**VLLM, "gen_ai.latency.time_to_first_token": 0.0, "gen_ai.usage.completion_tokens": 0,
             "gen_ai.latency.time_in_queue": 0.3, "gen_ai.latency.e2e": 0.5}
    e = one(attrs)
    assert (e["ttft_s"], e["queue_s"], e["e2e_s"], e["status"]) == (None, 0.3, 0.5, "cancelled")
    assert not isinstance(validate(e), Rejection)


def test_vllm_abort_before_scheduling_never_stores_ttft_zero():
    attrs = {**VLLM, "gen_ai.latency.time_to_first_token": 0.0, "gen_ai.usage.completion_tokens": 0,
             "gen_ai.latency.time_in_queue": 0.0}
    e = one(attrs)
    assert (e["ttft_s"], e["status"]) == (None, "cancelled")


def test_sglang_abort_finish_reason_is_cancelled():
    e = one({**SGLANG, "gen_ai.response.finish_reasons": '["abort"]'}, name=" Req 9f1c")
    assert (e["status"], e["finish_reason"]) == ("cancelled", "abort")


def test_sglang_abort_before_first_token_without_e2e_uses_the_span_duration():
    # SGLang before PR #37789: no gen_ai.latency.e2e, no first token.
    attrs = {"rid": "9f1c", "gen_ai.request.id": "9f1c", "gen_ai.response.model": "qwen",
             "gen_ai.usage.prompt_tokens": 64, "gen_ai.usage.completion_tokens": 0,
             "gen_ai.response.finish_reasons": '["abort"]'}
    e = one(attrs, name=" Req 9f1c", end=T0_NS + 750_000_000)
    assert (e["status"], e["ttft_s"], e["e2e_s"]) == ("cancelled", None, pytest.approx(0.75))


def test_sglang_role_names_are_requests():
    attrs = {k: v for k, v in SGLANG.items() if k not in ("gen_ai.latency.e2e", "gen_ai.latency.time_to_first_token")}
    attrs["gen_ai.usage.completion_tokens"] = 0
    attrs["bootstrap_room"] = 7  # P/D halves: phase events (test_otlp_pd)
    for name in (" Req 9f1c0a2b", "prefill Req 9f1c0a2b", "decode Req 9f1c0a2b"):
        m = map_export(export(span(name=name, attrs=attrs)))
        assert len(m.events) == 1, name


def test_sglang_embedding_without_completion_tokens_is_ignored_with_a_reason():
    attrs = {k: v for k, v in SGLANG.items() if k != "gen_ai.usage.completion_tokens"}
    m = map_export(export(span(name=" Req 9f1c", attrs=attrs)))
    assert (m.events, m.rejected, m.ignored) == ([], [], 1)
    assert m.ignored_by == {"embedding": 1}


def test_vllm_pooling_request_is_ignored_with_a_reason():
    m = map_export(export(span(attrs={**VLLM, "gen_ai.usage.completion_tokens": 0})))
    assert (m.events, m.rejected, m.ignored_by) == ([], [], {"embedding": 1})


def test_other_spans_are_counted_as_not_llm():
    m = map_export(export(span(name="GET /health"), span(name="embeddings m", attrs={
        "gen_ai.operation.name": "embeddings", "gen_ai.usage.input_tokens": 5})))
    assert m.ignored == 2 and m.ignored_by == {"not_llm": 1, "embedding": 1}


def test_vllm_n_children_become_distinct_generations():
    spans = [span(attrs={**VLLM, "gen_ai.request.n": 3}, span_id=f"{i:016x}") for i in (1, 2, 3)]
    m = map_export(export(*spans))
    ids = [e["request_id"] for e in m.events]
    assert len(ids) == 3 and len(set(ids)) == 3
    assert all(i.startswith("cmpl-42-") for i in ids)
    # stable: the same span exported again gets the same id (so it is a duplicate)
    assert map_export(export(spans[0])).events[0]["request_id"] == ids[0]
    # n = 1 keeps the engine's id
    assert one({**VLLM, "gen_ai.request.n": 1})["request_id"] == "cmpl-42"


@pytest.mark.parametrize("name", ["gen_ai.server.ttft", "gen_ai.server.time_to_first_token",
                                  "gen_ai.client.operation.time_to_first_chunk",
                                  "gen_ai.response.time_to_first_token", "gen_ai.response.time_to_first_chunk"])
def test_ttft_under_other_names(name):
    attrs = {k: v for k, v in GENAI.items() if k != "gen_ai.response.time_to_first_chunk"}
    assert one({**attrs, name: 0.31})["ttft_s"] == 0.31


def test_error_type_is_an_error():
    assert one({**GENAI, "error.type": "timeout"})["status"] == "error"
    assert one({**GENAI, "error.type": ""})["status"] == "ok"


def test_non_streaming_call_is_stored_saying_so():
    """gen_ai.request.stream = false: a call not streamed has no first token;
    its event says streamed: false (v2) and the worker stores it with null phases."""
    attrs = {k: v for k, v in GENAI.items() if k != "gen_ai.response.time_to_first_chunk"}
    e = one({**attrs, "gen_ai.request.stream": False})
    assert (e["schema_version"], e["streamed"], e["ttft_s"], e["status"]) == (2, False, None, "ok")
    assert validate(e)["streamed"] is False
    # with a first token timed anyway (an engine knows it), it is kept
    e = one({**GENAI, "gen_ai.request.stream": False})
    assert (e["streamed"], e["ttft_s"] is not None) == (False, True)


@pytest.mark.parametrize("stream", [True, None, "false"])
def test_output_without_a_first_token_is_refused_unless_the_call_says_it_was_not_streamed(stream):
    attrs = {k: v for k, v in GENAI.items() if k != "gen_ai.response.time_to_first_chunk"}
    reason, detail = one({**attrs, "gen_ai.request.stream": stream})
    assert reason == R.MISSING_FIELD and "time to first token" in detail
    assert "streamed" not in one(GENAI | {"gen_ai.request.stream": True})  # only false is carried


def test_a_genai_span_without_output_tokens_is_still_refused():
    attrs = {k: v for k, v in GENAI.items() if k != "gen_ai.usage.output_tokens"}
    assert one(attrs)[0] == R.MISSING_FIELD


def test_sglang_rid_is_the_request_id():
    # SGLang's root span names its request `rid`, with no gen_ai.request.id.
    attrs = {k: v for k, v in SGLANG.items() if k != "gen_ai.request.id"}
    assert one(attrs, name=" Req 9f1c")["request_id"] == "9f1c"
