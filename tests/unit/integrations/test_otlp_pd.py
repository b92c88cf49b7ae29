"""Prefill/decode disaggregated serving: the two halves of one request
(SGLang's "prefill Req ..." / "decode Req ..." sharing bootstrap_room; vLLM's
two llm_request spans from instances labelled phasemeter.role) become the
phase events of ONE generation, which the worker's phase join completes
whichever half comes first (docs/ingest/otlp.md)."""

from __future__ import annotations

import pytest
from test_otlp_map import SGLANG, T0_NS, VLLM, export, span

from phasemeter.integrations.otlp_map import map_export
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import Phase, Rejection, process_event
from phasemeter.stream_jobs.join import is_complete, joined_event

PREFILL = {**SGLANG, "bootstrap_room": 4242, "gen_ai.usage.completion_tokens": 1,
           "gen_ai.latency.time_to_first_token": 0.05, "gen_ai.latency.e2e": 0.06}
DECODE = {**SGLANG, "bootstrap_room": 4242, "gen_ai.latency.time_to_first_token": 0.08,
          "gen_ai.latency.e2e": 0.9}


def sglang_pair():
    p = span(name="prefill Req 9f1c0a2b", attrs=PREFILL, span_id="01" * 8, end=T0_NS + 60_000_000)
    d = span(name="decode Req 9f1c0a2b", attrs=DECODE, span_id="02" * 8, start=T0_NS + 10_000_000,
             end=T0_NS + 910_000_000)
    return p, d


def test_sglang_halves_become_start_and_end_of_one_request():
    p, d = sglang_pair()
    m = map_export(export(p, d, resource={"host.name": "gpu-p"}))
    assert (m.rejected, m.ignored) == ([], 0)
    assert [e["kind"] for e in m.events] == ["start", "end"]
    start, end = m.events
    assert start["request_id"] == end["request_id"] == "bootstrap_room-4242"
    assert (start["t0"], start["input_tokens"], start["cached_input_tokens"], start["replica"]) == \
        (T0_NS / 1e9, 64, 32, "gpu-p")
    # the client's first token and end are the decode instance's
    assert end["t_first"] == pytest.approx((T0_NS + 10_000_000) / 1e9 + 0.08)
    assert end["t_end"] == pytest.approx((T0_NS + 10_000_000) / 1e9 + 0.9)
    assert (end["output_tokens"], end["status"], end["finish_reason"]) == (8, "ok", "stop")


@pytest.mark.parametrize("order", ["prefill first", "decode first"])
def test_the_join_makes_one_generation_whichever_half_comes_first(order):
    p, d = sglang_pair()
    spans = [p, d] if order == "prefill first" else [d, p]
    m = map_export(export(*spans))
    bucket = Bucketer(parse_edges("default"))
    phases = [process_event(e, bucket, T0_NS / 1e9 + 60) for e in m.events]
    assert len(phases) == 2 and all(isinstance(x, Phase) for x in phases)
    entry = {}
    for ph in phases:
        entry[ph.fields["kind"]] = ph.fields
    assert is_complete(entry)
    row = process_event(joined_event(phases[0].request_id, entry), bucket, T0_NS / 1e9 + 60, internal=True)
    assert not isinstance(row, Rejection), row
    assert row["ttft_s"] == pytest.approx(0.09, abs=1e-6) and row["e2e_s"] == pytest.approx(0.91, abs=1e-6)
    assert (row["input_tokens"], row["output_tokens"]) == (64, 8)


def test_vllm_halves_are_told_by_the_instances_role():
    prefill = {**VLLM, "gen_ai.usage.completion_tokens": 1, "gen_ai.latency.e2e": 0.2}
    decode = {**VLLM, "gen_ai.latency.time_to_first_token": 0.03}
    body = {"resourceSpans": [
        export(span(attrs=prefill, span_id="01" * 8), resource={"phasemeter.role": "prefill",
                                                                 "host.name": "p-0"})["resourceSpans"][0],
        export(span(attrs=decode, span_id="02" * 8, start=T0_NS + 200_000_000),
               resource={"phasemeter.role": "decode", "host.name": "d-0"})["resourceSpans"][0]]}
    m = map_export(body)
    assert [(e["kind"], e["request_id"]) for e in m.events] == [("start", "cmpl-42"), ("end", "cmpl-42")]
    assert m.events[0]["replica"] == "p-0"
    assert m.events[1]["t_first"] == pytest.approx((T0_NS + 200_000_000) / 1e9 + 0.03)


def test_a_half_without_its_join_key_is_refused():
    attrs = {k: v for k, v in PREFILL.items() if k != "bootstrap_room"}
    m = map_export(export(span(name="prefill Req 9f1c0a2b", attrs=attrs)))
    assert m.events == [] and m.rejected[0][1] == "missing_field" and "bootstrap_room" in m.rejected[0][2]


def test_each_half_names_its_pool_and_the_transfer_rides_along():
    """prefill_replica from the prefill half, decode_replica from the decode
    half, the KV transfer from the half that reports it (TensorRT-LLM's
    attribute), all in the joined generation."""
    prefill = {**VLLM, "gen_ai.usage.completion_tokens": 1, "gen_ai.latency.e2e": 0.2,
               "gen_ai.latency.kv_cache_transfer_time": 0.15}  # longer than this half's own TTFT: allowed
    decode = {**VLLM, "gen_ai.latency.time_to_first_token": 0.03}
    body = {"resourceSpans": [
        export(span(attrs=decode, span_id="02" * 8, start=T0_NS + 200_000_000),
               resource={"phasemeter.role": "decode", "host.name": "d-3"})["resourceSpans"][0],
        export(span(attrs=prefill, span_id="01" * 8), resource={"phasemeter.role": "prefill",
                                                                 "host.name": "p-0"})["resourceSpans"][0]]}
    m = map_export(body)
    assert m.rejected == [] and [e["kind"] for e in m.events] == ["end", "start"]
    end, start = m.events
    assert (start["prefill_replica"], start["kv_transfer_s"], "decode_replica" in start) == ("p-0", 0.15, False)
    assert (end["decode_replica"], "kv_transfer_s" in end, "prefill_replica" in end) == ("d-3", False, False)
    bucket = Bucketer(parse_edges("default"))
    entry = {e["kind"]: process_event(e, bucket, T0_NS / 1e9 + 60).fields for e in m.events}
    row = process_event(joined_event("cmpl-42", entry), bucket, T0_NS / 1e9 + 60, internal=True)
    assert not isinstance(row, Rejection), row
    assert (row["replica"], row["prefill_replica"], row["decode_replica"]) == ("p-0", "p-0", "d-3")
    assert row["kv_transfer_s"] == 0.15 and row["kv_transfer_s"] <= row["ttft_s"]


def test_a_unified_span_with_a_transfer_longer_than_its_ttft_is_refused():
    m = map_export(export(span(attrs={**VLLM, "gen_ai.latency.kv_cache_transfer_time": 5.0})))
    assert m.events == [] and m.rejected[0][1] == "inconsistent" and "kv_transfer_s" in m.rejected[0][2]
    m = map_export(export(span(attrs={**VLLM, "gen_ai.latency.kv_cache_transfer_time": -1})))
    assert m.rejected[0][1] == "negative"
