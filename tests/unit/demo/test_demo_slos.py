"""The demo's story holds in its traffic model: each model's SLO is met
before the prefill regression and missed after it, on ttft_s; one model
stalls now and then, the other never."""

from __future__ import annotations

from collections import Counter

from phasemeter.alerts.slo_rules import load_slos
from phasemeter.demo.run import DEMO_SLOS
from phasemeter.demo.synthetic import TRAFFIC, SyntheticGateway
from phasemeter.stream_jobs.buckets import labels, parse_edges


def test_attainment_drops_on_ttft_during_the_incident_and_one_model_stalls():
    sloset = load_slos(DEMO_SLOS, labels(parse_edges("default")))
    slo_of = {m: s for s in sloset.slos for m in s.models}
    assert set(slo_of) == {"llama-4-maverick", "qwen3-32b"}  # each of the demo's models has its SLO
    gw = SyntheticGateway(start=0.0, span_s=3600.0)
    n = 40_000
    met, total, ttft_miss, other_miss, stalled, chunked = (Counter() for _ in range(6))
    for i in range(n):
        g = gw.make(i / n)
        phase = "incident" if i / n >= TRAFFIC.regress_at else "before"
        slo = slo_of[g.model]
        limits = dict(slo.objectives)
        total[g.model, phase] += 1
        if g.status == "error":
            continue
        late = g.ttft_s > limits["ttft_s"]
        slow = g.output_tokens > 1 and (g.output_tokens - 1) / (g.e2e_s - g.ttft_s) < limits["decode_tps"]
        met[g.model, phase] += not (late or slow)
        ttft_miss[g.model, phase] += late
        other_miss[g.model, phase] += slow
        if g.chunks is not None:
            chunked[g.model] += 1
            stalled[g.model] += g.gaps_over > 0
            assert g.chunks == g.output_tokens and 0 < g.max_gap_s < g.e2e_s
    for model, slo in slo_of.items():
        before = met[model, "before"] / total[model, "before"]
        during = met[model, "incident"] / total[model, "incident"]
        assert before >= slo.target > during + 0.03, (model, before, during)
        assert ttft_miss[model, "incident"] > 3 * other_miss[model, "incident"], model
    assert stalled["llama-4-maverick"] == 0
    assert 0.03 < stalled[TRAFFIC.stall_model] / chunked[TRAFFIC.stall_model] < 0.05
