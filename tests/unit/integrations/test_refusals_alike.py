"""Every way in refuses the same bad value with the same reason code:
`phasemeter emit` (its NDJSON checker and its summary), the Python `Meter`
(BadArgument.reason, Meter.refusals()) and the OTLP mapping (partial
success), as the worker dead-letters it."""

from __future__ import annotations

import json
import time

import pytest

from phasemeter.cli.main import main
from phasemeter.integrations.ndjson import LineChecker, RawLine, Refused
from phasemeter.integrations.otlp_map import map_export
from phasemeter.producers import Meter
from phasemeter.stream_jobs import reasons as R

T0 = 1_764_000_000.0
NOW = T0 + 3600
GOOD = {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m", "t0": T0, "ttft_s": 0.1,
        "e2e_s": 1.0, "queue_s": None, "input_tokens": 10, "output_tokens": 5, "cached_input_tokens": None,
        "status": "ok", "finish_reason": None, "gateway": None, "replica": None}
# (event field, bad value, the worker's reason)
CASES = [("model", "m\ud800", R.NOT_UTF8), ("request_id", "\udc00", R.NOT_UTF8), ("model", "", R.BAD_VALUE),
         ("input_tokens", -1, R.NEGATIVE), ("input_tokens", "10", R.WRONG_TYPE), ("e2e_s", -1.0, R.IMPOSSIBLE_ORDER),
         ("cached_input_tokens", 11, R.INCONSISTENT), ("output_tokens", 10**8, R.ABSURD)]


def no_broker(**_kwargs):
    raise ConnectionError("no broker in this test")


@pytest.mark.parametrize("field,value,reason", CASES)
def test_emit_and_meter_refuse_alike(field, value, reason):
    line = json.dumps({**GOOD, field: value}).encode()
    verdict = LineChecker(1_000_000).check(RawLine(1, line, len(line)), now=NOW)
    assert isinstance(verdict, Refused)

    meter = Meter("127.0.0.1:1", producer_factory=no_broker, flush_timeout_s=0)
    args = {k: GOOD[k] for k in ("model", "input_tokens", "output_tokens", "t0", "ttft_s", "e2e_s", "request_id")}
    with pytest.raises(ValueError) as exc:
        meter.record(**{**args, field: value})
    assert verdict.reason == reason and exc.value.reason == reason
    assert meter.refusals() == {reason: 1} and meter.stats().refused == 1 and meter.stats().enqueued == 0
    meter.close(0)


@pytest.mark.parametrize("attr,value", [("gen_ai.response.model", "m\ud800"), ("gen_ai.request.id", "\udc00")])
def test_the_otlp_mapping_refuses_a_lone_surrogate_as_the_worker_does(attr, value):
    attrs = {"gen_ai.response.model": "m", "gen_ai.request.id": "r1", "gen_ai.usage.prompt_tokens": 10,
             "gen_ai.usage.completion_tokens": 5, "gen_ai.latency.time_to_first_token": 0.1,
             "gen_ai.latency.e2e": 1.0, attr: value}
    kvs = [{"key": k, "value": {"stringValue": v} if type(v) is str else {"intValue": str(v)} if type(v) is int
            else {"doubleValue": v}} for k, v in attrs.items()]
    span = {"spanId": "00000000000000aa", "name": "llm_request", "startTimeUnixNano": str(int(T0 * 1e9)),
            "attributes": kvs}
    m = map_export({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}, now=NOW)
    assert [reason for _, reason, _ in m.rejected] == [R.NOT_UTF8] and m.events == []


def test_emit_counts_refused_lines_by_reason_and_exits_1(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "data"))
    # emit checks against the clock, and refuses what the store would not
    # keep (PHASEMETER_RAW_TTL_DAYS): these events are two hours old.
    recent = time.time() - 7200
    lines = [json.dumps({**GOOD, "request_id": f"r{i}", "t0": recent, field: value})
             for i, (field, value, _) in enumerate(CASES)]
    lines.append(json.dumps({**GOOD, "request_id": "fine", "t0": recent}))
    path = tmp_path / "mixed.ndjson"
    path.write_text("\n".join(lines) + "\n")
    rc = main(["emit", str(path), "--dry-run", "--format", "json"])
    summary = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert (summary["lines"], summary["valid"], summary["refused"]) == (len(CASES) + 1, 1, len(CASES))
    assert sum(summary["reasons"].values()) == len(CASES)
    for _, _, reason in CASES:
        assert summary["reasons"][reason] >= 1
