"""Property tests of the pure derivation (docs/metrics.md): any valid event
derives the documented formulas exactly; any mutation of a valid event
either still derives or is rejected with a known reason code, never raises."""

from __future__ import annotations

import json
import math

from hypothesis import given, settings
from hypothesis import strategies as st

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.contract import MAX_DURATION_S, MAX_TOKENS
from phasemeter.stream_jobs.derive import ROW_COLUMNS, Rejection, process
from phasemeter.stream_jobs.sink import DLQ_COLUMNS, _arrow

NOW = 1_800_000_000.0
BUCKET = Bucketer(parse_edges("default"))
REASONS = {v for k, v in vars(R).items() if k.isupper() and isinstance(v, str)}
seconds = st.floats(min_value=0.0, max_value=3600.0, allow_nan=False)
# A label is printable text in any script: no control character (category Cc).
labels = st.characters(blacklist_categories=("Cc", "Cs"))


@st.composite
def valid_events(draw) -> dict:
    n_in = draw(st.integers(1, 200_000))
    n_out = draw(st.integers(0, 50_000))
    no_first = n_out == 0 and draw(st.booleans())  # no first token is valid only without output
    ttft = None if no_first else draw(seconds)
    e2e = (ttft or 0.0) + draw(seconds)
    event = {"schema_version": 1, "kind": "generation", "request_id": draw(st.text(labels, min_size=1, max_size=40)),
             "model": draw(st.text(labels, min_size=1, max_size=30)), "t0": NOW - draw(seconds),
             "ttft_s": ttft, "e2e_s": e2e, "input_tokens": n_in, "output_tokens": n_out}
    if ttft is not None and draw(st.booleans()):
        event["queue_s"] = draw(st.floats(min_value=0.0, max_value=ttft, allow_nan=False))
    if draw(st.booleans()):
        event["cached_input_tokens"] = draw(st.integers(0, n_in))
    return event


def _encode(event: dict) -> bytes:
    return json.dumps(event).encode()


@settings(max_examples=400)
@given(valid_events())
def test_valid_events_derive_the_documented_formulas(event):
    row = process(_encode(event), BUCKET, 1_000_000, now=NOW)
    assert not isinstance(row, Rejection), (row, event)
    ttft, e2e, n_in, n_out = event["ttft_s"], event["e2e_s"], event["input_tokens"], event["output_tokens"]
    # prefill_tps = input_tokens / (t_first - t0); null (never inf) when that
    # is 0, unknown, or so small that the rate is not a finite float
    prefill = n_in / ttft if ttft else None
    assert row["prefill_tps"] == (prefill if prefill is not None and math.isfinite(prefill) else None)
    # decode_tps = (output_tokens - 1) / (t_end - t_first); null without a decode phase
    decode_s = None if ttft is None else e2e - ttft
    decode = (n_out - 1) / decode_s if n_out > 1 and decode_s is not None and decode_s > 0 else None
    has_decode = decode is not None and math.isfinite(decode)
    assert row["decode_s"] == decode_s
    assert row["decode_tps"] == (decode if has_decode else None)
    assert row["tpot_s"] == (decode_s / (n_out - 1) if has_decode else None)
    assert row["input_bucket"] == BUCKET(n_in)
    assert row["ts"] == event["t0"]
    for name in ("prefill_tps", "prefill_tps_uncached", "decode_tps", "tpot_s"):
        assert row[name] is None or (math.isfinite(row[name]) and row[name] >= 0), name


BAD_VALUES = st.one_of(
    st.none(), st.booleans(), st.text(max_size=5), st.just(float("nan")), st.just(float("inf")),
    st.just(-1), st.just(-0.5), st.just(MAX_TOKENS + 1), st.just(MAX_DURATION_S * 10), st.just([]), st.just({}),
    st.integers(-10**20, 10**20), st.floats(allow_nan=True, allow_infinity=True))


@st.composite
def mutated(draw) -> tuple[dict, str]:
    event = draw(valid_events())
    how = draw(st.sampled_from(["set", "drop", "add"]))
    if how == "drop":
        key = draw(st.sampled_from(sorted(event)))
        event.pop(key)
    elif how == "add":
        key = draw(st.text(min_size=1, max_size=12))
        event[key] = draw(BAD_VALUES)
    else:
        key = draw(st.sampled_from(sorted(event) + ["status", "queue_s", "cached_input_tokens", "gateway"]))
        event[key] = draw(BAD_VALUES)
    return event, how


@settings(max_examples=600)
@given(mutated())
def test_mutations_derive_or_are_rejected_with_a_reason_never_raise(case):
    event, _ = case
    out = process(_encode(event), BUCKET, 1_000_000, now=NOW)
    if isinstance(out, Rejection):
        assert out.reason in REASONS, out
        assert out.detail
    else:  # still valid: then it obeys the same formulas and never stores inf/NaN
        for name in ("prefill_tps", "prefill_tps_uncached", "decode_tps", "tpot_s", "decode_s"):
            assert out[name] is None or math.isfinite(out[name]), (name, event)


@settings(max_examples=300)
@given(st.binary(max_size=300))
def test_arbitrary_bytes_are_rejected_never_raise(raw):
    out = process(raw, BUCKET, 1_000_000, now=NOW)
    assert isinstance(out, Rejection) and out.reason in REASONS


# Text as a gateway may send it: any code point, and now and then half of a
# surrogate pair, which json.dumps writes as a \ud800-style escape.
# (st.text keeps surrogates out of its alphabets, so they are spliced in.)
ANY_TEXT = st.one_of(st.text(min_size=1, max_size=40), st.builds(
    lambda a, half, b: a + half + b, st.text(max_size=12), st.sampled_from(["\ud800", "\udbff", "\udc00", "\udfff"]),
    st.text(max_size=12)))


@st.composite
def any_text_events(draw) -> dict:
    event = draw(valid_events())
    for name in draw(st.lists(st.sampled_from(["request_id", "model", "gateway", "replica", "finish_reason",
                                               "status"]), max_size=3)):
        event[name] = draw(ANY_TEXT)
    if draw(st.booleans()):
        event[draw(ANY_TEXT)] = draw(st.one_of(ANY_TEXT, st.integers(0, 10)))
    return event


@settings(max_examples=400)
@given(any_text_events())
def test_whatever_derive_returns_the_store_can_hold(event):
    """A row must build into the sink's Arrow table and a rejection into a
    dead letter: either failing would stop the batch for good (the sink
    retries a write until it succeeds)."""
    out = process(_encode(event), BUCKET, 1_000_000, now=NOW)
    source = {"src_topic": "t", "src_partition": 0, "src_offset": 1}
    if isinstance(out, Rejection):
        assert out.reason in REASONS, out
        _arrow([{"ts": NOW, "reason": out.reason, "detail": out.detail, "payload": "", "payload_size": 0,
                 **source}], DLQ_COLUMNS)
    else:
        _arrow([{**out, **source}], ROW_COLUMNS)
