"""stream_jobs/metrics.render() is Prometheus text exposition format 0.0.4.

`parse_exposition` below is a strict reader of that format written from the
format's description (not from metrics.py): HELP/TYPE lines, metric and
label names, label values with exactly the three escapes \\\\, \\" and \\n,
Go float values, one TYPE per family before its samples, families not
interleaved, no series twice.
"""

from __future__ import annotations

import math
import re

import pytest

from phasemeter.stream_jobs import join
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.metrics import render
from phasemeter.stream_jobs.phase_events import validate_phase

METRIC_NAME = re.compile(r"[a-zA-Z_:][a-zA-Z0-9_:]*")
LABEL_NAME = re.compile(r"[a-zA-Z_][a-zA-Z0-9_]*")
TYPES = {"counter", "gauge", "histogram", "summary", "untyped"}
FLOAT = re.compile(r"[+-]?(\d+\.?\d*([eE][+-]?\d+)?|\.\d+([eE][+-]?\d+)?|Inf|inf)|NaN|Nan")


class FormatError(AssertionError):
    pass


def _value(text: str) -> float:
    if not FLOAT.fullmatch(text):
        raise FormatError(f"not a float: {text!r}")
    return float(text.replace("Inf", "inf").replace("Nan", "nan"))


def _unescape_help(name: str, text: str) -> str:
    """HELP text knows two escapes: \\\\ and \\n."""
    out, i = [], 0
    while i < len(text):
        if text[i] == "\\":
            nxt = text[i + 1:i + 2]
            if nxt not in ("\\", "n"):
                raise FormatError(f"{name}: bad escape \\{nxt} in HELP")
            out.append("\n" if nxt == "n" else "\\")
            i += 2
        else:
            out.append(text[i])
            i += 1
    return "".join(out)


def _labels(text: str, i: int) -> tuple[dict, int]:
    """Parse `{a="x",b="y"}` from text[i] == "{"; -> (labels, index after "}")."""
    labels: dict[str, str] = {}
    i += 1
    while True:
        if text[i] == "}":
            return labels, i + 1
        m = LABEL_NAME.match(text, i)
        if not m:
            raise FormatError(f"bad label name at {text[i:]!r}")
        name, i = m.group(), m.end()
        if text[i:i + 2] != '="':
            raise FormatError(f"expected =\" after {name}")
        i += 2
        value = []
        while True:
            if i >= len(text):
                raise FormatError("unterminated label value")
            ch = text[i]
            if ch == "\\":
                nxt = text[i + 1:i + 2]
                if nxt not in ("\\", '"', "n"):
                    raise FormatError(f"bad escape \\{nxt} in label value")
                value.append("\n" if nxt == "n" else nxt)
                i += 2
            elif ch == '"':
                i += 1
                break
            else:
                value.append(ch)
                i += 1
        if name in labels:
            raise FormatError(f"label {name} twice")
        labels[name] = "".join(value)
        if text[i] == ",":
            i += 1
        elif text[i] != "}":
            raise FormatError(f"expected , or }} at {text[i:]!r}")


def parse_exposition(text: str) -> dict:
    """-> {family: {"help": str, "type": str, "samples": {frozenset(labels): value}}}"""
    if not text.endswith("\n"):
        raise FormatError("the exposition must end with a line feed")
    families: dict[str, dict] = {}
    current = None
    finished: set[str] = set()

    def family(name: str) -> dict:
        nonlocal current
        if name != current:
            if name in finished:
                raise FormatError(f"{name}: lines of one family must be together")
            if current is not None:
                finished.add(current)
            current = name
        return families.setdefault(name, {"help": None, "type": None, "samples": {}})

    for line in text[:-1].split("\n"):
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(" ", 3)
            if len(parts) >= 3 and parts[1] in ("HELP", "TYPE"):
                name = parts[2]
                if not METRIC_NAME.fullmatch(name):
                    raise FormatError(f"bad metric name {name!r}")
                fam = family(name)
                rest = parts[3] if len(parts) == 4 else ""
                if parts[1] == "HELP":
                    if fam["help"] is not None:
                        raise FormatError(f"{name}: HELP twice")
                    fam["help"] = _unescape_help(name, rest)
                else:
                    if fam["type"] is not None or fam["samples"]:
                        raise FormatError(f"{name}: TYPE twice or after samples")
                    if rest not in TYPES:
                        raise FormatError(f"{name}: unknown TYPE {rest!r}")
                    fam["type"] = rest
            continue  # any other comment
        m = METRIC_NAME.match(line)
        if not m:
            raise FormatError(f"bad sample line {line!r}")
        name, i = m.group(), m.end()
        labels: dict = {}
        if i < len(line) and line[i] == "{":
            labels, i = _labels(line, i)
        if i >= len(line) or line[i] != " ":
            raise FormatError(f"expected a space before the value in {line!r}")
        fields = line[i + 1:].split(" ")
        if not 1 <= len(fields) <= 2:
            raise FormatError(f"expected value [timestamp] in {line!r}")
        value = _value(fields[0])
        if len(fields) == 2 and not re.fullmatch(r"-?\d+", fields[1]):
            raise FormatError(f"bad timestamp in {line!r}")
        fam = family(name)
        key = frozenset(labels.items())
        if key in fam["samples"]:
            raise FormatError(f"{name}{labels}: series twice")
        fam["samples"][key] = value
    return families


def series(families: dict, name: str, **labels) -> float:
    return families[name]["samples"][frozenset(labels.items())]


# -- the reader itself can reject ----------------------------------------------------------------
@pytest.mark.parametrize("bad", [
    "m 1",                                    # no final line feed
    'm{a="x} 1\n',                            # unterminated label value
    'm{a="x\\t"} 1\n',                         # escape other than \\ \" \n
    'm{a="x" 1\n',                             # no closing brace
    'm{a="x",a="y"} 1\n',                      # label twice
    'm{1a="x"} 1\n',                           # bad label name
    "m one\n",                                 # not a float
    "m 1\nm 2\n",                              # series twice
    "# TYPE m gauge\n# TYPE m gauge\nm 1\n",   # TYPE twice
    "m 1\n# TYPE m gauge\n",                   # TYPE after samples
    "# TYPE m thing\nm 1\n",                   # unknown type
    "a 1\nb 1\na 2\n",                         # family split
    "# HELP m bad \\t escape\nm 1\n",          # bad HELP escape
    "1m 1\n",                                  # bad metric name
])
def test_reader_rejects_malformed_expositions(bad):
    with pytest.raises(FormatError):
        parse_exposition(bad)


def test_reader_accepts_the_format():
    fams = parse_exposition('# HELP m a \\\\ b\\nc\n# TYPE m gauge\nm{a="q\\"\\\\\\n",b="2"} +Inf\nm 1e-05 17\n'
                            "# a comment\n\nn NaN\n")
    assert fams["m"]["help"] == "a \\ b\nc" and fams["m"]["type"] == "gauge"
    assert series(fams, "m", a='q"\\\n', b="2") == math.inf and series(fams, "m") == 1e-05
    assert math.isnan(series(fams, "n"))


# -- render() -----------------------------------------------------------------------------------
HEALTH = {"status": "ok", "paused_reason": None, "consumed": 120, "accepted": 100, "rejected": 7,
          "skipped_redelivered": 2, "duplicates": 3, "phases_forwarded": 60, "rejoined_dropped": 1,
          "joined_in_batch": 5, "store_retries": 4, "uptime_s": 12.5, "last_batch_at": 1.8e9, "last_batch": {"rows": 3}}
COUNTER_OF = {"consumed": "phasemeter_worker_messages_consumed_total",
              "accepted": "phasemeter_worker_generations_stored_total",
              "rejected": "phasemeter_worker_dead_letters_total",
              "duplicates": "phasemeter_worker_duplicates_total",
              "phases_forwarded": "phasemeter_worker_phases_forwarded_total",
              "rejoined_dropped": "phasemeter_worker_rejoined_dropped_total",
              "joined_in_batch": "phasemeter_worker_joined_in_batch_total",
              "store_retries": "phasemeter_worker_store_retries_total"}
NASTY = ['llama "3" 70b', "C:\\models\\q4", "multi\nline", 'all \\" of\\n them\n', "ünï {c}=,ode"]


def inflight(cells=(), awaiting=0, counts=None, abandon_after=600.0) -> dict:
    return {"generated_at": 1.8e9, "partitions": [0, 1], "in_flight": list(cells), "awaiting_start": awaiting,
            "abandon_after_s": abandon_after, "counts": counts or {}}


def cell(model, bucket="0-512", phase="prefill", n=1, age=1.5):
    return {"model": model, "input_bucket": bucket, "phase": phase, "in_flight": n, "oldest_age_s": age}


def test_families_have_help_and_type():
    fams = parse_exposition(render(HEALTH, inflight([cell("m")], 2, {"phases_joined": 5})))
    expected_types = {"phasemeter_inflight_generations": "gauge",
                      "phasemeter_inflight_oldest_age_seconds": "gauge",
                      "phasemeter_inflight_awaiting_start": "gauge",
                      "phasemeter_abandon_after_seconds": "gauge",
                      "phasemeter_join_total": "counter",
                      "phasemeter_worker_paused": "gauge",
                      **{name: "counter" for name in COUNTER_OF.values()}}
    assert {name: f["type"] for name, f in fams.items()} == expected_types
    for name, f in fams.items():
        assert f["help"] and f["help"].strip(), name
        if f["type"] == "counter":
            assert name.endswith("_total"), name


def test_counters_present_with_health_values():
    fams = parse_exposition(render(HEALTH, inflight()))
    for key, name in COUNTER_OF.items():
        assert fams[name]["samples"] == {frozenset(): float(HEALTH[key])}, name
    assert series(fams, "phasemeter_worker_paused") == 0


def test_counters_present_before_anything_happened():
    fams = parse_exposition(render({}, inflight()))
    for name in COUNTER_OF.values():
        assert series(fams, name) == 0, name
    assert fams["phasemeter_inflight_generations"]["samples"] == {}
    assert fams["phasemeter_join_total"]["samples"] == {}
    assert series(fams, "phasemeter_inflight_awaiting_start") == 0


def test_paused_gauge():
    fams = parse_exposition(render({**HEALTH, "status": "paused", "paused_reason": "store down"}, inflight()))
    assert series(fams, "phasemeter_worker_paused") == 1


def test_join_counts_and_gauges():
    counts = {"phases_joined": 10, "phases_partial": 20, "phases_duplicate": 2, "phases_late": 1,
              "abandoned": 3, "orphaned": 4, "forgotten": 9, "generations_joined": 10,
              "joined_without_first_token": 1}
    fams = parse_exposition(render(HEALTH, inflight([], 6, counts, abandon_after=900.5)))
    assert {dict(k)["what"]: v for k, v in fams["phasemeter_join_total"]["samples"].items()} == \
        {k: float(v) for k, v in counts.items()}
    assert series(fams, "phasemeter_inflight_awaiting_start") == 6
    assert series(fams, "phasemeter_abandon_after_seconds") == 900.5


@pytest.mark.parametrize("model", NASTY)
def test_model_names_escaped_and_read_back(model):
    cells = [cell(model, "512-2k", "decode", 3, 12.25), cell(model, "512-2k", "prefill", 1, 0.5)]
    text = render(HEALTH, inflight(cells))
    fams = parse_exposition(text)
    labels = {"model": model, "input_bucket": "512-2k"}
    assert series(fams, "phasemeter_inflight_generations", **labels, phase="decode") == 3
    assert series(fams, "phasemeter_inflight_generations", **labels, phase="prefill") == 1
    assert series(fams, "phasemeter_inflight_oldest_age_seconds", **labels, phase="decode") == 12.25
    assert series(fams, "phasemeter_inflight_oldest_age_seconds", **labels, phase="prefill") == 0.5
    lines = text.split("\n")
    assert len(lines) > 4, text  # the four series above, at least
    for line in lines:  # nothing of the name leaks out of its quotes
        assert not line.startswith(("multi", "line", " them"))


def test_all_nasty_names_together_stay_distinct():
    cells = [cell(m, n=i + 1) for i, m in enumerate(NASTY)] + [cell("multi\\nline", n=99)]
    fams = parse_exposition(render(HEALTH, inflight(cells)))
    got = {dict(k)["model"]: v for k, v in fams["phasemeter_inflight_generations"]["samples"].items()}
    assert got == {**{m: float(i + 1) for i, m in enumerate(NASTY)}, "multi\\nline": 99.0}


def test_render_of_a_real_inflight_table():
    """join.inflight rows, as the worker renders them, read back. (A label
    with a control character, such as NASTY[2]'s newline, is refused at
    ingest now: the exposition's escaping of it is tested above.)"""
    now = 1_800_000_000.0
    bucket = Bucketer(parse_edges("default"))

    def start(rid, model, t0, n_in):
        return validate_phase({"schema_version": 2, "kind": "start", "request_id": rid, "model": model,
                               "t0": t0, "input_tokens": n_in}, now)

    def first(rid):
        return validate_phase({"schema_version": 2, "kind": "first_token", "request_id": rid, "ttft_s": 0.1}, now)

    entries = []
    for rid, phases in [("a", [start("a", NASTY[0], now - 40, 100)]),
                        ("b", [start("b", NASTY[0], now - 4, 100)]),
                        ("c", [start("c", NASTY[4], now - 7.25, 5000), first("c")]),
                        ("d", [first("d")])]:
        entry = None
        for fields in phases:
            entry, _, _ = join.apply(entry, rid, fields, 0, now)
        entries.append(entry)
    rows, awaiting = join.inflight(entries, now, bucket)
    fams = parse_exposition(render(HEALTH, {"in_flight": rows, "awaiting_start": awaiting,
                                            "abandon_after_s": 600.0, "counts": {}}))
    gen = fams["phasemeter_inflight_generations"]["samples"]
    age = fams["phasemeter_inflight_oldest_age_seconds"]["samples"]
    k1 = frozenset({"model": NASTY[0], "input_bucket": "0-512", "phase": "prefill"}.items())
    k2 = frozenset({"model": NASTY[4], "input_bucket": "2k-8k", "phase": "decode"}.items())
    assert gen == {k1: 2.0, k2: 1.0} and age == {k1: 40.0, k2: 7.25}
    assert series(fams, "phasemeter_inflight_awaiting_start") == 1


def test_values_are_finite_numbers_or_prometheus_specials():
    text = render({**HEALTH, "consumed": 10**15}, inflight([cell("m", age=1e-7), cell("n", age=123456789.123)]))
    fams = parse_exposition(text)
    assert series(fams, "phasemeter_worker_messages_consumed_total") == 1e15
    assert series(fams, "phasemeter_inflight_oldest_age_seconds", model="m", input_bucket="0-512",
                  phase="prefill") == 1e-7
