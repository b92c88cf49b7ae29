"""schema/event-v2.schema.json against the worker's validator, both ways.

`jsonschema` is not a dependency (not installed, not in constraints.txt), so
`schema_errors` below is a small interpreter of the JSON Schema 2020-12
keywords the file uses; `test_schema_uses_only_interpreted_keywords` fails
if the schema grows a keyword it does not interpret, and the self-tests show
each keyword can reject.

Both ways:
* every valid example passes the schema AND process_message (the worker's
  entry point: validate_phase for phases, validate for generations);
* every corpus poison case is rejected by both, apart from the listed rules
  JSON Schema cannot state (comparisons between fields or with "now");
* random mutations: the two agree apart from those same listed gaps, and the
  schema is never stricter than the worker on a single event.
"""

from __future__ import annotations

import json
import re
import math
import random
import time
from pathlib import Path

import pytest
from corpus import NOW_REF, POISON, as_bytes

from phasemeter.producers import Meter
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import LABEL_FIELDS, MAX_DURATION_S, MAX_TOKENS, MIN_T0, PD_FIELDS, STREAMED
from phasemeter.stream_jobs.contract import V2_OPTIONAL
from phasemeter.stream_jobs.derive import Phase, Rejection, process_message
from phasemeter.stream_jobs.phase_events import SPEC, validate_phase

ROOT = Path(__file__).resolve().parents[3]
SCHEMA = json.loads((ROOT / "schema" / "event-v2.schema.json").read_text())
NOW = 1_800_000_000.0
BUCKET = Bucketer(parse_edges("default"))
MAX_BYTES = 50_000_000
EPOCH_MAX = 4_102_444_800  # 2100-01-01: the schema's static bound (the worker's is now + 1 day)


# -- a tiny JSON Schema 2020-12 interpreter (the keywords this schema uses) --------
ANNOTATIONS = {"$schema", "$id", "title", "description", "default", "$comment", "$defs"}
ASSERTIONS = {"$ref", "type", "const", "enum", "minimum", "maximum", "minLength", "maxLength", "pattern",
              "required", "properties", "additionalProperties", "items", "minItems", "maxItems",
              "oneOf", "if", "then", "allOf", "not"}


def _is_type(value, t: str) -> bool:
    if t == "null":
        return value is None
    if t == "boolean":
        return isinstance(value, bool)
    if t == "string":
        return isinstance(value, str)
    if t == "object":
        return isinstance(value, dict)
    if t == "array":
        return isinstance(value, list)
    if isinstance(value, bool):
        return False
    if t == "number":
        return isinstance(value, (int, float))
    if t == "integer":  # 2020-12: any number with a zero fractional part, 2.0 included
        return isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    raise AssertionError(f"unknown type {t}")


def _json_equal(a, b) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_json_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_json_equal(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _resolve(ref: str, root: dict) -> dict:
    assert ref.startswith("#/"), ref
    node = root
    for part in ref[2:].split("/"):
        node = node[part]
    return node


def schema_errors(schema: dict, value, root: dict | None = None, at: str = "$") -> list[str]:
    """[] when `value` is valid against `schema`; else what failed, where."""
    root = schema if root is None else root
    errs: list[str] = []
    if "$ref" in schema:
        errs += schema_errors(_resolve(schema["$ref"], root), value, root, at)
    if "type" in schema:
        types = schema["type"] if isinstance(schema["type"], list) else [schema["type"]]
        if not any(_is_type(value, t) for t in types):
            errs.append(f"{at}: not {types}")
    if "const" in schema and not _json_equal(value, schema["const"]):
        errs.append(f"{at}: != {schema['const']!r}")
    if "enum" in schema and not any(_json_equal(value, e) for e in schema["enum"]):
        errs.append(f"{at}: not in {schema['enum']}")
    if _is_type(value, "number"):
        if "minimum" in schema and value < schema["minimum"]:
            errs.append(f"{at}: < {schema['minimum']}")
        if "maximum" in schema and value > schema["maximum"]:
            errs.append(f"{at}: > {schema['maximum']}")
    if isinstance(value, str):
        if len(value) < schema.get("minLength", 0):
            errs.append(f"{at}: shorter than {schema['minLength']}")
        if "maxLength" in schema and len(value) > schema["maxLength"]:
            errs.append(f"{at}: longer than {schema['maxLength']}")
        # ECMA 262's \uXXXX is Python's too; its $ ends the string only, as Python's \Z does.
        if "pattern" in schema and re.search(re.sub(r"\$$", r"\\Z", schema["pattern"]), value) is None:
            errs.append(f"{at}: does not match {schema['pattern']}")
    if isinstance(value, dict):
        for name in schema.get("required", ()):
            if name not in value:
                errs.append(f"{at}: {name} required")
        props = schema.get("properties", {})
        for name, sub in props.items():
            if name in value:
                errs += schema_errors(sub, value[name], root, f"{at}.{name}")
        extra = schema.get("additionalProperties", True)
        for name in value:
            if name not in props:
                if extra is False:
                    errs.append(f"{at}: {name} not allowed")
                elif extra is not True:
                    errs += schema_errors(extra, value[name], root, f"{at}.{name}")
    if isinstance(value, list):
        if len(value) < schema.get("minItems", 0):
            errs.append(f"{at}: fewer than {schema['minItems']} items")
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            errs.append(f"{at}: more than {schema['maxItems']} items")
        if "items" in schema:
            for i, item in enumerate(value):
                errs += schema_errors(schema["items"], item, root, f"{at}[{i}]")
    if "oneOf" in schema:
        n = sum(not schema_errors(sub, value, root, at) for sub in schema["oneOf"])
        if n != 1:
            errs.append(f"{at}: matches {n} of oneOf, not exactly 1")
    if "if" in schema and not schema_errors(schema["if"], value, root, at) and "then" in schema:
        errs += schema_errors(schema["then"], value, root, at)
    for sub in schema.get("allOf", ()):
        errs += schema_errors(sub, value, root, at)
    if "not" in schema and not schema_errors(schema["not"], value, root, at):
        errs.append(f"{at}: matches a schema it must not")
    return errs


def schema_ok(value) -> bool:
    return not schema_errors(SCHEMA, value)


def worker_results(value, now: float = NOW) -> list:
    return process_message(json.dumps(value).encode(), BUCKET, MAX_BYTES, now)


def worker_ok(value, now: float = NOW) -> bool:
    return not any(isinstance(r, Rejection) for r in worker_results(value, now))


# -- the interpreter and the schema file ----------------------------------------
def _subschemas(node: dict):
    yield node
    for key in ("if", "then", "items", "additionalProperties", "not"):
        if isinstance(node.get(key), dict):
            yield from _subschemas(node[key])
    for sub in node.get("oneOf", []) + node.get("allOf", []):
        yield from _subschemas(sub)
    for group in ("properties", "$defs"):
        for sub in node.get(group, {}).values():
            yield from _subschemas(sub)


def test_schema_uses_only_interpreted_keywords():
    nodes = list(_subschemas(SCHEMA))
    assert len(nodes) > 50
    for node in nodes:
        assert set(node) <= ANNOTATIONS | ASSERTIONS, set(node) - ANNOTATIONS - ASSERTIONS
        if "$ref" in node:
            _resolve(node["$ref"], SCHEMA)  # every reference resolves
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"


@pytest.mark.parametrize("schema,good,bad", [
    ({"type": "integer"}, [1, 2.0, -3], [1.5, True, "1", None]),
    ({"type": "number"}, [1, 1.5], [True, "1", None]),
    ({"type": ["string", "null"]}, ["", None], [0, False]),
    ({"const": 2}, [2, 2.0], [True, "2", 3]),
    ({"enum": ["ok", None]}, ["ok", None], ["no", 0]),
    ({"minimum": 0, "maximum": 1}, [0, 1, 0.5, "x"], [-0.1, 1.1]),
    ({"minLength": 1, "maxLength": 2}, ["a", "ab", 5], ["", "abc"]),
    ({"pattern": "^[^\\u0000-\\u001f]*$"}, ["a b", "é", 5], ["a\x1bb", "\n"]),
    ({"required": ["a"], "properties": {"a": {"type": "integer"}}, "additionalProperties": False},
     [{"a": 1}], [{}, {"a": "x"}, {"a": 1, "b": 2}]),
    ({"minItems": 1, "maxItems": 2, "items": {"type": "integer"}}, [[1], [1, 2]], [[], [1, 2, 3], ["x"]]),
    ({"oneOf": [{"required": ["a"]}, {"required": ["b"]}]}, [{"a": 1}, {"b": 1}], [{}, {"a": 1, "b": 1}]),
    ({"if": {"properties": {"a": {"minimum": 1}}}, "then": {"required": ["b"]}}, [{"a": 0}, {"a": 1, "b": 0}],
     [{"a": 1}]),
    ({"$ref": "#/$defs/x", "$defs": {"x": {"type": "string"}}}, ["s"], [1]),
    ({"allOf": [{"type": "integer"}, {"minimum": 2}]}, [2, 3], [1, 2.5]),
    ({"not": {}}, [], [0, None, "x", {}]),
    ({"not": {"type": "string"}}, [1, None], ["x"]),
])
def test_interpreter_accepts_and_rejects(schema, good, bad):
    for value in good:
        assert not schema_errors(schema, value), value
    for value in bad:
        assert schema_errors(schema, value), value


def test_limits_match_contract():
    d = SCHEMA["$defs"]
    assert d["count"]["maximum"] == MAX_TOKENS and d["duration"]["maximum"] == MAX_DURATION_S
    assert d["t0"]["minimum"] == MIN_T0 == d["epoch"]["minimum"]
    assert set(LABEL_FIELDS) == {"model", "request_id", "finish_reason", "gateway", "replica", "prefill_replica",
                                 "decode_replica"}
    for name, limit in LABEL_FIELDS.items():
        assert d[name]["maxLength"] == limit and d[name]["minLength"] == 1, name


def test_phase_definitions_follow_spec():
    """Required, optional and exactly-one-of fields of each phase kind are those
    of phase_events.SPEC (and so of the table in docs/phases.md)."""
    d = SCHEMA["$defs"]
    assert set(SPEC) == {"start", "first_token", "end"}
    for kind, (required, optional, either) in SPEC.items():
        node = d[kind]
        assert node["additionalProperties"] is False
        assert set(node["required"]) == {"schema_version", "kind", "request_id", *required}, kind
        assert set(node["properties"]) == {"schema_version", "kind", "request_id", *required, *optional,
                                           *either}, kind
        assert node["properties"]["schema_version"] == {"const": 2}
        assert node["properties"]["kind"] == {"const": kind}
        if either:
            assert [b["required"] for b in node["oneOf"]] == [[name] for name in either]
        else:
            assert "oneOf" not in node


def test_descriptions_state_the_contract():
    text = SCHEMA["description"]
    for needle in ("monotonic", "since t0", "epoch", "t_first", "t_end", "Kafka key: request_id",
                   "prompt", "abandoned", "orphan"):
        assert needle in text, needle
    assert "monotonic" in SCHEMA["$defs"]["duration"]["description"]
    for kind in ("first_token", "end"):
        assert "wall-clock" in SCHEMA["$defs"][kind]["description"]
    assert "prompt" not in SCHEMA["$defs"]["generation"]["properties"]


def _flat(rule: dict) -> dict:
    """A property's rule with its $ref chain merged in (the referrer wins)."""
    if "$ref" not in rule:
        return rule
    return {**_flat(_resolve(rule["$ref"], SCHEMA)), **{k: v for k, v in rule.items() if k != "$ref"}}


def test_generation_equals_v1():
    """The v2 generation has the v1 fields, types and limits (plus schema_version 2)."""
    v1 = json.loads((ROOT / "schema" / "event-v1.schema.json").read_text())
    gen = SCHEMA["$defs"]["generation"]
    assert v1["properties"]["schema_version"] == {"const": 1}
    # v2's generation adds exactly the contract's optional v2 fields, the P/D fields and streamed ...
    assert set(gen["properties"]) == set(v1["properties"]) | set(V2_OPTIONAL) | set(PD_FIELDS) | {STREAMED}
    assert STREAMED not in v1["properties"] and STREAMED not in gen["required"]
    assert not set(PD_FIELDS) & set(v1["properties"]) and not set(PD_FIELDS) & set(gen["required"])
    assert not set(V2_OPTIONAL) & set(v1["properties"]) and not set(V2_OPTIONAL) & set(gen["required"])
    assert gen["required"] == v1["required"]
    assert len(v1["properties"]) == 15, sorted(v1["properties"])
    for name in v1["properties"]:
        rule = _flat(gen["properties"][name])
        for key in ("type", "maximum", "maxLength", "enum", "const"):
            if key in v1["properties"][name] and name not in ("schema_version", "status"):
                assert rule[key] == v1["properties"][name][key], (name, key)


# -- valid examples ---------------------------------------------------------------
T0 = NOW - 60


def _start(**over):
    return {"schema_version": 2, "kind": "start", "request_id": "r1", "model": "m", "t0": T0,
            "input_tokens": 1000, **over}


def _first(**over):
    return {"schema_version": 2, "kind": "first_token", "request_id": "r1", "ttft_s": 0.5, **over}


def _end(**over):
    return {"schema_version": 2, "kind": "end", "request_id": "r1", "output_tokens": 101, "e2e_s": 2.5, **over}


def _gen(**over):
    return {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m", "t0": T0,
            "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101, **over}


def _drop(event, *names):
    return {k: v for k, v in event.items() if k not in names}


VALID = {
    "start minimal": _start(),
    "start all optional": _start(cached_input_tokens=1000, queue_s=0.25, gateway="gw-1", replica="vllm-0"),
    "start prefill/decode": _start(prefill_replica="p-0", decode_replica="d-0", kv_transfer_s=0.02),
    "end prefill/decode": _end(prefill_replica="p-0", decode_replica="d-0", kv_transfer_s=0),
    "start optional null": _start(cached_input_tokens=None, queue_s=None, gateway=None, replica=None),
    "start limits": _start(request_id="r" * 128, model="m" * 200, t0=MIN_T0, input_tokens=MAX_TOKENS,
                           queue_s=MAX_DURATION_S, gateway="g" * 200, replica="é" * 200),
    "start int t0, zero tokens": _start(t0=int(T0), input_tokens=0, cached_input_tokens=0, queue_s=0),
    "start unicode request_id": _start(request_id="rq-é-✓"),
    "first_token ttft_s": _first(),
    "first_token t_first (wall clock only)": _drop(_first(t_first=T0 + 0.5), "ttft_s"),
    "first_token all optional": _first(queue_s=0.1, cached_input_tokens=400),
    "first_token ttft_s, t_first null": _first(t_first=None),
    "first_token t_first, ttft_s null": _first(ttft_s=None, t_first=NOW),
    "first_token zero ttft": _first(ttft_s=0, queue_s=0.0),
    "end e2e_s": _end(),
    "end t_end (wall clock only)": _drop(_end(t_end=T0 + 2.5), "e2e_s"),
    "end all optional": _end(status="ok", finish_reason="stop", queue_s=0.1, cached_input_tokens=5),
    "end error": _end(status="error", output_tokens=0, finish_reason="f" * 64),
    "end cancelled": _end(status="cancelled", e2e_s=MAX_DURATION_S, output_tokens=MAX_TOKENS),
    "end optional null": _end(status=None, finish_reason=None, queue_s=None, cached_input_tokens=None,
                              t_end=None),
    "end t_end, e2e_s null": _end(e2e_s=None, t_end=NOW + 3600),
    "end repeating ttft_s": _end(output_tokens=0, status="cancelled", ttft_s=0.5),
    "end repeating t_first (wall clock only)": _drop(_end(t_end=T0 + 2.5, t_first=T0 + 0.5), "e2e_s"),
    "end ttft_s, t_first null": _end(ttft_s=0.5, t_first=None),
    "generation v1 minimal": _gen(),
    "generation v1 all optional": _gen(queue_s=0.1, cached_input_tokens=400, status="ok", finish_reason="stop",
                                       gateway="gw", replica="r"),
    "generation v2": _gen(schema_version=2),
    "generation nulls": _gen(queue_s=None, cached_input_tokens=None, finish_reason=None, gateway=None,
                             replica=None),
    "generation without first token": _gen(ttft_s=None, output_tokens=0, status="error"),
    "generation no ttft key, no output": _drop(_gen(output_tokens=0, status="cancelled"), "ttft_s"),
    "generation one token": _gen(output_tokens=1, ttft_s=2.5),
    # the optional v2 fields
    "end chunk data": _end(chunks=100, max_gap_s=1.0, gaps_over=1, gap_threshold_s=0.5,
                           output_tokens_estimated=False),
    "end estimated count": _end(output_tokens_estimated=True),
    "generation v2 chunk data": _gen(schema_version=2, chunks=100, max_gap_s=0.8, gaps_over=2, gap_threshold_s=0.5),
    "generation v2 one chunk, estimated": _gen(schema_version=2, output_tokens=1, ttft_s=2.5, chunks=1, gaps_over=0,
                                               gap_threshold_s=0.5, output_tokens_estimated=True),
    "generation v2 chunk fields null": _gen(schema_version=2, chunks=None, max_gap_s=None, gaps_over=None,
                                            gap_threshold_s=None, output_tokens_estimated=None),
    "generation v2 not streamed, no first token": _gen(schema_version=2, ttft_s=None, streamed=False),
    "generation v2 not streamed, no ttft key": _drop(_gen(schema_version=2, streamed=False), "ttft_s"),
    "generation v2 streamed": _gen(schema_version=2, streamed=True),
    "generation v2 max gap equals e2e": _gen(schema_version=2, chunks=2, max_gap_s=2.5),
    "batch v2 mixing kinds": {"schema_version": 2, "kind": "batch",
                              "events": [_start(), _first(), _end(), _gen(), _gen(schema_version=2)]},
    "batch v2 of one": {"schema_version": 2, "kind": "batch", "events": [_end(t_end=NOW, e2e_s=None)]},
    "batch v1 of generations": {"schema_version": 1, "kind": "batch", "events": [_gen(), _gen(request_id="r2")]},
    "batch v2 at the limit": {"schema_version": 2, "kind": "batch",
                              "events": [_first(request_id=f"r{i}") for i in range(10_000)]},
}


@pytest.mark.parametrize("name", list(VALID))
def test_valid_examples_pass_schema_and_worker(name):
    event = VALID[name]
    assert schema_errors(SCHEMA, event) == []
    results = worker_results(event)
    assert results and not any(isinstance(r, Rejection) for r in results), results[:3]
    inner = event["events"] if event["kind"] == "batch" else [event]
    assert len(results) == len(inner)
    for ev, result in zip(inner, results, strict=True):
        if ev["kind"] == "generation":
            assert isinstance(result, dict) and result["request_id"] == ev["request_id"]
        else:
            assert isinstance(result, Phase) and result.request_id == ev["request_id"]
            assert result.fields == validate_phase(ev, NOW)
            # nulls are dropped, everything else is carried
            assert {k for k, v in ev.items() if v is not None} - {"schema_version"} == set(result.fields) \
                | {"request_id"}


def test_every_kind_and_alternative_has_a_valid_example():
    kinds = {e["kind"] for e in VALID.values()}
    assert kinds == {"start", "first_token", "end", "generation", "batch"}
    present = {k for e in VALID.values() if e["kind"] in SPEC for k, v in e.items() if v is not None}
    assert len(SPEC) == 3  # start, first_token, end
    for required, optional, either in SPEC.values():
        assert set(required) | set(optional) | set(either) <= present


# -- invalid: the poison corpus ------------------------------------------------------
# Rules JSON Schema cannot state: they compare two fields, or a field with the
# worker's clock. The worker alone enforces them.
VALIDATOR_ONLY = {
    "start cached above input": "cached_input_tokens <= input_tokens compares two fields",
    "cached above input": "cached_input_tokens <= input_tokens compares two fields",
    "t_end before t_first": "ttft_s <= e2e_s compares two fields",
    "scheduled after first token": "queue_s <= ttft_s compares two fields",
    "gaps_over above chunks": "gaps_over <= chunks compares two fields",
    "max_gap_s longer than e2e": "max_gap_s <= e2e_s compares two fields",
    # RFC 8259 8.2 lets a string hold an unpaired surrogate escape, and a
    # schema has no rule about one: the worker refuses it (not UTF-8 text).
    "lone surrogate in request_id": "an unpaired surrogate escape is grammatical JSON",
    "lone low surrogate in model": "an unpaired surrogate escape is grammatical JSON",
    "lone surrogate in gateway": "an unpaired surrogate escape is grammatical JSON",
    "lone surrogate in a phase": "an unpaired surrogate escape is grammatical JSON",
}
# Not JSON texts at all (RFC 8259 has no NaN/Infinity), so no schema applies.
# Not JSON a Python validator can read (the 5,000-digit number is JSON, but
# Python's json refuses an integer past 4,300 digits, as the worker does).
NOT_JSON = {"not utf8", "malformed", "empty bytes", "NaN ttft", "Infinity e2e", "5000-digit number"}


def _strict_json(raw: bytes):
    def no_constant(name):
        raise ValueError(f"{name} is not JSON")
    return json.loads(raw.decode("utf-8"), parse_constant=no_constant)


def test_exception_lists_name_real_corpus_cases():
    names = {name for name, _, _ in POISON}
    assert set(VALIDATOR_ONLY) <= names and NOT_JSON <= names


@pytest.mark.parametrize("name,payload,reason", POISON, ids=[p[0] for p in POISON])
def test_poison_rejected_by_schema_and_worker(name, payload, reason):
    raw = as_bytes(payload)
    results = process_message(raw, BUCKET, 1_000_000, NOW_REF)
    assert len(results) == 1 and isinstance(results[0], Rejection) and results[0].reason == reason
    if name in NOT_JSON:
        with pytest.raises(ValueError):
            _strict_json(raw)
        return
    value = _strict_json(raw)
    if name in VALIDATOR_ONLY:
        # If the schema learns to express one of these, move it out of the list.
        assert schema_ok(value), name
    else:
        assert not schema_ok(value), name


def test_every_phase_poison_case_is_rejected_by_the_schema_too():
    phases = [(n, p) for n, p, _ in POISON if isinstance(p, dict) and p.get("kind") in SPEC]
    assert len(phases) >= 10
    for name, payload in phases:
        assert not worker_ok(payload, NOW_REF), name
        assert name in VALIDATOR_ONLY or not schema_ok(payload), name


BAD = {
    "start t0 null": _start(t0=None),
    "start input_tokens null": _start(input_tokens=None),
    "start empty gateway": _start(gateway=""),
    "start replica too long": _start(replica="r" * 201),
    "start status not in start": _start(status="ok"),
    "start ttft_s not in start": _start(ttft_s=0.5),
    "start t0 in ms": _start(t0=T0 * 1000),
    "start t0 before 2000": _start(t0=MIN_T0 - 1),
    "start version 1.5": _start(schema_version=1.5),
    "start version missing": _drop(_start(), "schema_version"),
    "start queue over a day": _start(queue_s=MAX_DURATION_S + 0.5),
    "start request_id too long": _start(request_id="r" * 129),
    "start request_id number": _start(request_id=7),
    "first_token both null": _first(ttft_s=None, t_first=None),
    "first_token t_first before 2000": _drop(_first(t_first=1.5), "ttft_s"),
    "first_token t_first string": _drop(_first(t_first="2026-01-01"), "ttft_s"),
    "first_token output_tokens": _first(output_tokens=3),
    "first_token model": _first(model="m"),
    "first_token cached negative": _first(cached_input_tokens=-1),
    "first_token ttft bool": _first(ttft_s=True),
    "end both clocks": _end(t_end=NOW),
    "end neither clock": _drop(_end(), "e2e_s"),
    "end output_tokens float": _end(output_tokens=1.5),
    "end output_tokens null": _end(output_tokens=None),
    "end output_tokens over limit": _end(output_tokens=MAX_TOKENS + 1),
    "end status empty": _end(status=""),
    "end finish_reason empty": _end(finish_reason=""),
    "end finish_reason too long": _end(finish_reason="f" * 65),
    "end gateway not in end": _end(gateway="gw"),
    "end e2e negative": _end(e2e_s=-0.001),
    "end repeating both ttft_s and t_first": _end(ttft_s=0.5, t_first=T0 + 0.5),
    "end ttft_s over a day": _end(ttft_s=MAX_DURATION_S + 1),
    "end t_first in ms": _end(t_first=T0 * 1000),
    "generation status null": _gen(status=None),
    "generation status abandoned": _gen(status="abandoned"),
    "generation empty finish_reason": _gen(finish_reason=""),
    "generation empty replica": _gen(replica=""),
    "generation t_end alternative not in generation": _drop(_gen(t_end=NOW), "e2e_s"),
    "generation output without ttft key": _drop(_gen(), "ttft_s"),
    "generation version 3": _gen(schema_version=3),
    "generation streamed, output without ttft": _gen(schema_version=2, ttft_s=None, streamed=True),
    "generation streamed null, output without ttft": _gen(schema_version=2, ttft_s=None, streamed=None),
    "generation streamed as 0": _gen(schema_version=2, streamed=0),
    "generation streamed as a string": _gen(schema_version=2, streamed="false"),
    "generation v1 streamed": _gen(streamed=False, ttft_s=None),
    "batch empty": {"schema_version": 2, "kind": "batch", "events": []},
    "batch too big": {"schema_version": 2, "kind": "batch", "events": [_first()] * 10_001},
    "batch extra key": {"schema_version": 2, "kind": "batch", "events": [_first()], "gateway": "g"},
    "batch version 3": {"schema_version": 3, "kind": "batch", "events": [_first()]},
    "batch events not a list": {"schema_version": 2, "kind": "batch", "events": _first()},
    "batch holding a bad event": {"schema_version": 2, "kind": "batch", "events": [_first(), _end(e2e_s=-1)]},
    "batch holding a batch": {"schema_version": 2, "kind": "batch",
                              "events": [{"schema_version": 2, "kind": "batch", "events": [_first()]}]},
    "orphan record from outside": {"schema_version": 2, "kind": "orphan", "request_id": "r1",
                                   "reason": "orphan_phase", "detail": "x", "phases": {}},
    "abandoned generation from outside": _gen(status="abandoned", ttft_s=None, output_tokens=0,
                                              finish_reason="expired_in_prefill"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_bad_examples_rejected_by_both(name):
    event = BAD[name]
    assert schema_errors(SCHEMA, event), name
    assert not worker_ok(event), name


def test_v1_envelope_may_not_carry_phases():
    """docs/phases.md: phases need schema_version 2. The worker reads a v1
    envelope's events one by one, so only the schema enforces this."""
    env = {"schema_version": 1, "kind": "batch", "events": [_gen(), _start()]}
    assert not schema_ok(env)
    assert schema_ok({**env, "schema_version": 2})


# -- random mutations: the two agree apart from the listed gaps -----------------------
_EPOCHS = ("t0", "t_first", "t_end")
_COUNTS = ("input_tokens", "output_tokens", "cached_input_tokens")


def _num(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def known_gap(ev) -> str | None:
    """Why the worker may reject an event the schema accepts: only rules JSON
    Schema cannot state, computed here from the event itself."""
    if not isinstance(ev, dict):
        return None
    if any(isinstance(ev.get(n), float) and ev[n].is_integer() for n in _COUNTS):
        return "JSON Schema's integer includes 2.0; the worker wants a JSON integer"
    if any(_num(ev.get(n)) and ev[n] > NOW + 86_400 for n in _EPOCHS):
        return "epoch later than the worker's clock + 1 day"
    if _num(ev.get("cached_input_tokens")) and _num(ev.get("input_tokens")) \
            and ev["cached_input_tokens"] > ev["input_tokens"]:
        return "cached_input_tokens > input_tokens"
    if _num(ev.get("gaps_over")) and _num(ev.get("chunks")) and ev["gaps_over"] > ev["chunks"]:
        return "gaps_over > chunks"
    if _num(ev.get("max_gap_s")) and _num(ev.get("e2e_s")) and ev["max_gap_s"] > ev["e2e_s"]:
        return "max_gap_s > e2e_s"
    if ev.get("kind") == "generation":
        ttft, e2e, queue = ev.get("ttft_s"), ev.get("e2e_s"), ev.get("queue_s")
        if _num(ttft) and _num(e2e) and e2e < ttft:
            return "e2e_s < ttft_s"
        if _num(queue) and queue > (ttft if _num(ttft) else e2e if _num(e2e) else math.inf):
            return "queue_s > ttft_s/e2e_s"
    return None


POOL = [..., None, "", "x", "ok", "stop", "x" * 65, "x" * 129, "x" * 201, True, False, -1, 0, 1, 2, 1.5, 2.0,
        0.25, MAX_DURATION_S, MAX_DURATION_S + 1, MAX_TOKENS, MAX_TOKENS + 1, MIN_T0 - 1, MIN_T0, T0, NOW,
        NOW + 2 * 86_400, EPOCH_MAX, EPOCH_MAX + 1, [], {}, "start", "end", "first_token", "generation",
        "cancelled", "abandoned"]
FIELDS = ["schema_version", "kind", "request_id", "model", "t0", "input_tokens", "output_tokens",
          "cached_input_tokens", "ttft_s", "t_first", "e2e_s", "t_end", "queue_s", "status", "finish_reason",
          "gateway", "replica", "prompt"]


def _mutants(seed: int, n: int):
    r = random.Random(seed)
    bases = [v for v in VALID.values() if v["kind"] != "batch"]
    for _ in range(n):
        ev = dict(r.choice(bases))
        for name in r.sample(FIELDS, r.randint(1, 3)):
            value = r.choice(POOL)
            if value is ...:
                ev.pop(name, None)
            else:
                ev[name] = value
        yield ev


def test_random_mutations_agree_apart_from_known_gaps():
    agree = gaps = accepted = 0
    for ev in _mutants(7, 6000):
        s, w = schema_ok(ev), worker_ok(ev)
        accepted += w
        if s == w:
            agree += 1
            continue
        # The schema is never stricter than the worker on a single event ...
        assert s and not w, (ev, schema_errors(SCHEMA, ev))
        # ... and looser only where JSON Schema cannot say it.
        assert known_gap(ev), (ev, worker_results(ev))
        gaps += 1
    assert accepted > 150 and agree > 5000, (accepted, agree, gaps)


V2_POOL = [..., None, -1, 0, 1, 2, 3, 150, 0.25, 0.5, 2.0, 3.0, 90_000.0, True, False, "x", [], 1, 2]


def test_random_mutations_of_the_v2_fields_agree_apart_from_known_gaps():
    """The same two-way check over the optional v2 fields, on v1 and v2 bases."""
    r = random.Random(13)
    bases = [VALID[k] for k in ("end chunk data", "end e2e_s", "generation v2 chunk data", "generation v1 minimal",
                                "generation v2 one chunk, estimated", "generation v2")]
    names = list(V2_OPTIONAL) + ["schema_version", "e2e_s"]
    agree = accepted = 0
    for _ in range(3000):
        ev = dict(r.choice(bases))
        for name in r.sample(names, r.randint(1, 3)):
            value = r.choice(V2_POOL)
            if value is ...:
                ev.pop(name, None)
            else:
                ev[name] = value
        s_ok, w_ok = schema_ok(ev), worker_ok(ev)
        accepted += w_ok
        if s_ok == w_ok:
            agree += 1
            continue
        assert s_ok and not w_ok, (ev, schema_errors(SCHEMA, ev))
        integral = any(isinstance(ev.get(n), float) and ev[n].is_integer() for n in ("chunks", "gaps_over"))
        assert integral or known_gap(ev), (ev, worker_results(ev))
    assert accepted > 300 and agree > 2500, (accepted, agree)


def test_random_mutations_inside_envelopes():
    r = random.Random(11)
    events = list(_mutants(8, 400))
    for _ in range(300):
        inner = r.sample(events, r.randint(1, 4))
        env = {"schema_version": 2, "kind": "batch", "events": inner}
        if any(known_gap(e) for e in inner):
            continue
        assert schema_ok(env) == worker_ok(env), env


# -- what the emitter encodes -----------------------------------------------------------
class _Future:
    def add_callback(self, f):
        f("metadata")
        return self

    def add_errback(self, f):
        return self


class _Producer:
    def __init__(self):
        self.records = []

    def factory(self, **kwargs):
        return self

    def partitions_for(self, topic):
        return {0, 1, 2, 3}

    def send(self, topic, key=None, value=None, partition=None):
        self.records.append((key, value))
        return _Future()

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass


def _emitted(drive, **meter_kw) -> list[tuple[bytes | None, bytes]]:
    fake = _Producer()
    # What this checks is the events, not how fast they go: beside the
    # suite's workers and busy loops the sender thread was starved past a
    # 2 s flush (seen once in a full run, and 1 in 5 beside 6 busy loops).
    meter = Meter(bootstrap_servers="127.0.0.1:1", topic="t", producer_factory=fake.factory,
                  flush_timeout_s=15.0, phase_events=True, **meter_kw)
    try:
        drive(meter)
        assert meter.flush()
    finally:
        meter.close(timeout_s=0.5)
    return fake.records


def _check_emitted(records, n_events: int) -> None:
    now = time.time()
    seen = 0
    for key, value in records:
        event = json.loads(value)
        assert schema_errors(SCHEMA, event) == [], event
        results = process_message(value, BUCKET, MAX_BYTES, now)
        assert not any(isinstance(r, Rejection) for r in results), (event, results)
        if event["kind"] == "batch":
            assert key is None
            seen += len(event["events"])
        else:
            assert key == event["request_id"].encode()
            seen += 1
    assert seen == n_events


def _drive_everything(meter) -> None:
    with meter.generation(model="llama", input_tokens=1200, replica="r1", cached_input_tokens=1024) as g:
        g.scheduled()
        g.first_token()
        g.finish(output_tokens=57, status="ok", finish_reason="stop")
    with meter.generation(model="llama", input_tokens=10) as g:  # scheduled after first token: on end
        g.first_token()
        g.scheduled()
        g.finish(output_tokens=1)
    with meter.generation(model="m", input_tokens=3, request_id="rq-é"):
        pass  # cancelled without a first token
    with pytest.raises(RuntimeError):
        with meter.generation(model="m", input_tokens=3) as g:
            g.scheduled()
            raise RuntimeError("engine died")  # error, queue_s on end
    t0 = time.time() - 5
    rid = meter.start(model="m", input_tokens=100, t0=t0, cached_input_tokens=50, queue_s=0.2, replica="x")
    meter.first_token(rid, ttft_s=0.5)
    meter.end(rid, output_tokens=20, e2e_s=2.0, finish_reason="length")
    rid = meter.start(model="m", input_tokens=100, t0=t0, request_id="wall-" + "w" * 123)
    meter.first_token(rid, t_first=t0 + 0.5, queue_s=0.1, cached_input_tokens=10)
    meter.end(rid, output_tokens=0, t_end=t0 + 1.0, status="error", queue_s=0.1, cached_input_tokens=10)
    rid = meter.start(model="m" * 200, input_tokens=MAX_TOKENS)
    meter.end(rid, output_tokens=MAX_TOKENS, e2e_s=MAX_DURATION_S, status="cancelled")
    meter.record(model="llama", input_tokens=10, output_tokens=2, t0=t0, ttft_s=0.1, e2e_s=0.5)
    meter.record(model="llama", input_tokens=10, output_tokens=0, t0=t0, t_end=t0 + 1, status="error")


EVERYTHING = 3 + 3 + 2 + 2 + 3 + 3 + 2 + 2  # phases per generation above, then two record()s


@pytest.mark.parametrize("meter_kw", [{}, {"gateway": "gw-1"}, {"envelope_size": 1}, {"envelope_size": 5},
                                      {"envelope_size": 100}])
def test_emitter_events_pass_schema_and_worker(meter_kw):
    _check_emitted(_emitted(_drive_everything, **meter_kw), EVERYTHING)


def test_emitter_generation_only_envelopes_are_v1_and_valid():
    def drive(meter):
        for i in range(7):
            meter.record(model="m", input_tokens=i, output_tokens=0, t0=time.time(), e2e_s=0.1)
    records = _emitted(drive, envelope_size=3)
    assert {json.loads(v)["schema_version"] for _, v in records} == {1}
    _check_emitted(records, 7)


@pytest.mark.parametrize("phase_events", [True, False], ids=["phases", "one-event"])
@pytest.mark.parametrize("label", ["finish_reason", "replica", "gateway"])
def test_emitter_never_sends_an_empty_label(label, phase_events):
    """The worker rejects an empty label (BAD_VALUE), and so does the schema;
    the emitter must refuse it (ValueError) or leave the field out, not send
    an event that can only be dead-lettered."""
    labels = {label: ""} if label in ("finish_reason", "replica") else {}

    def drive(meter):
        try:
            with meter.generation(model="m", input_tokens=1, replica=labels.get("replica"),
                                  phase_events=phase_events) as g:
                g.first_token()
                g.finish(output_tokens=1, finish_reason=labels.get("finish_reason"))
        except ValueError:
            pass  # refused: fine

    try:
        records = _emitted(drive, **({"gateway": ""} if label == "gateway" else {}))
    except ValueError:
        return  # the Meter refused gateway="": fine
    for _, value in records:
        results = process_message(value, BUCKET, MAX_BYTES)
        assert not any(isinstance(r, Rejection) for r in results), (value, results)
        assert schema_ok(json.loads(value)), value
