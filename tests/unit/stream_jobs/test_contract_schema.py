"""The JSON Schema files say what the contract module says: every limit,
label length, status and version in schema/event-v1.schema.json and
event-v2.schema.json equals stream_jobs/contract.py, the one source the
worker validates with and the emitter checks its arguments with."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from phasemeter.producers import generation, phases
from phasemeter.stream_jobs import contract as C

ROOT = Path(__file__).resolve().parents[3]
COUNTS = {"input_tokens", "output_tokens", "cached_input_tokens", "count", "count_or_null", "chunks", "gaps_over"}
GAPS = {"gap", "max_gap_s", "gap_threshold_s", "kv_transfer_s"}  # differences of monotonic readings, not times since t0
DURATIONS = {"ttft_s", "e2e_s", "queue_s", "duration", "duration_or_null"}
EPOCHS = {"t0", "epoch", "t_first", "t_end"}


def definitions(doc: dict):
    """(name, rule) for every property and $defs entry, $refs resolved."""
    defs = doc.get("$defs", {})

    def resolve(rule):
        while "$ref" in rule:
            rule = {**defs[rule["$ref"].rsplit("/", 1)[1]], **{k: v for k, v in rule.items() if k != "$ref"}}
        return rule

    yield from ((k, resolve(v)) for k, v in defs.items())
    stack = [doc] + list(defs.values())
    while stack:
        node = stack.pop()
        for name, rule in node.get("properties", {}).items():
            yield name, resolve(rule)
            stack.append(rule)


@pytest.mark.parametrize("path", ["event-v1.schema.json", "event-v2.schema.json"])
def test_schema_limits_are_the_contracts(path):
    doc = json.loads((ROOT / "schema" / path).read_text())
    seen = set()
    for name, rule in definitions(doc):
        if name in C.LABEL_FIELDS:
            assert rule["maxLength"] == C.LABEL_FIELDS[name], (path, name)
            pattern = re.compile(re.sub(r"\$$", r"\\Z", rule["pattern"]))  # ECMA's $ is Python's \Z
            assert all((pattern.search(f"a{chr(c)}") is None) == C.has_control(chr(c)) for c in range(0x3000)), name
        elif name in COUNTS:
            assert (rule["minimum"], rule["maximum"]) == (0, C.MAX_TOKENS), (path, name)
        elif name in DURATIONS or name in GAPS:
            assert (rule["minimum"], rule["maximum"]) == (0, C.MAX_DURATION_S), (path, name)
        elif name == "output_tokens_estimated":
            assert rule["type"] == ["boolean", "null"], path
        elif name in EPOCHS and "minimum" in rule:
            assert (rule["minimum"], rule["maximum"]) == (C.MIN_T0, C.MAX_EPOCH_S), (path, name)
        elif name == "status":
            assert [v for v in rule["enum"] if v is not None] == list(C.STATUSES), path  # null: not given
        elif name == "schema_version" and "const" in rule:
            assert rule["const"] in C.SCHEMA_VERSIONS, path
        else:
            continue
        seen.add(name)
    assert {"request_id", "model", "input_tokens", "e2e_s", "status", "schema_version"} <= seen, (path, seen)


def test_the_emitter_checks_with_the_same_limits():
    assert generation.MAX_TOKENS is C.MAX_TOKENS and generation.MAX_DURATION_S is C.MAX_DURATION_S
    assert generation.STATUSES == frozenset(C.STATUSES)
    assert (phases.MIN_EPOCH_S, phases.MAX_EPOCH_S) == (C.MIN_T0, C.MAX_EPOCH_S)
    limit = C.LABEL_FIELDS["model"]
    generation.check_request("m" * limit, 1, None, None, None)
    with pytest.raises(ValueError, match=f"at most {limit}"):
        generation.check_request("m" * (limit + 1), 1, None, None, None)


def test_the_optional_v2_fields_are_v2_only():
    """The contract's V2_OPTIONAL are properties of the v2 generation and end
    (and of nothing else); the v1 file does not know them."""
    v1 = json.loads((ROOT / "schema" / "event-v1.schema.json").read_text())
    v2 = json.loads((ROOT / "schema" / "event-v2.schema.json").read_text())
    assert not set(C.V2_OPTIONAL) & set(v1["properties"])
    for kind in ("generation", "end", "start", "first_token"):
        has = set(C.V2_OPTIONAL) & set(v2["$defs"][kind]["properties"])
        assert has == (set(C.V2_OPTIONAL) if kind in ("generation", "end") else set()), kind
    assert set(C.STALL_FIELDS) < set(C.V2_OPTIONAL)
