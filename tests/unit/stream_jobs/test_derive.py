"""docs/metrics.md edge cases for the pure pipeline (no Kafka, no ClickHouse)."""

import json
import math

import pytest

from phasemeter.stream_jobs import reasons as R
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
from phasemeter.stream_jobs.derive import ROW_COLUMNS, Rejection, process

NOW = 1_800_000_000.0
BUCKET = Bucketer(parse_edges("default"))


def event(**over):
    base = {"schema_version": 1, "kind": "generation", "request_id": "r1", "model": "m",
            "t0": NOW - 60, "ttft_s": 0.5, "e2e_s": 2.5, "input_tokens": 1000, "output_tokens": 101}
    base.update(over)
    return {k: v for k, v in base.items() if v is not ...}


def run(ev, raw=None):
    data = raw if raw is not None else json.dumps(ev).encode()
    return process(data, BUCKET, 1_000_000, NOW)


def test_happy_path_exact_formulas():
    row = run(event(queue_s=0.1, cached_input_tokens=400))
    assert row["prefill_tps"] == 1000 / 0.5
    assert row["decode_s"] == 2.0
    assert row["decode_tps"] == 100 / 2.0
    assert row["tpot_s"] == 2.0 / 100
    assert row["prefill_tps_uncached"] == (1000 - 400) / (0.5 - 0.1)
    assert row["e2e_s"] == 2.5 and row["ttft_s"] == 0.5 and row["queue_s"] == 0.1
    assert row["input_bucket"] == "512-2k"
    assert set(ROW_COLUMNS) - {"src_topic", "src_partition", "src_offset"} <= set(row)


def test_one_output_token_has_no_decode_phase_null_not_zero():
    row = run(event(output_tokens=1))
    assert row["decode_tps"] is None and row["tpot_s"] is None
    assert row["prefill_tps"] == 2000.0


def test_zero_decode_time_is_null_not_infinite():
    row = run(event(ttft_s=2.5, e2e_s=2.5))
    assert row["decode_s"] == 0.0 and row["decode_tps"] is None


def test_zero_ttft_gives_null_prefill():
    row = run(event(ttft_s=0.0, e2e_s=1.0))
    assert row["prefill_tps"] is None


def test_no_first_token_error_generation():
    row = run(event(ttft_s=None, output_tokens=0, status="error"))
    assert row["prefill_tps"] is None and row["decode_s"] is None and row["decode_tps"] is None
    assert row["status"] == "error" and row["e2e_s"] == 2.5


def test_uncached_null_when_cache_unknown_and_uses_t0_without_schedule():
    assert run(event())["prefill_tps_uncached"] is None
    assert run(event(cached_input_tokens=0))["prefill_tps_uncached"] == 1000 / 0.5


@pytest.mark.parametrize("n,label", [(0, "0-512"), (511, "0-512"), (512, "512-2k"), (2047, "512-2k"),
                                     (2048, "2k-8k"), (8192, "8k-32k"), (32767, "8k-32k"), (32768, "32k+"),
                                     (10_000_000, "32k+")])
def test_bucket_edges_half_open(n, label):
    assert BUCKET(n) == label


def test_litellm_preset_labels():
    assert Bucketer(parse_edges("litellm")).labels == ["0-1k", "1k-4k", "4k-16k", "16k-64k", "64k+"]


@pytest.mark.parametrize("spec", ["1,2", "0,5,3", "0,a", ""])
def test_bad_edges_raise(spec):
    with pytest.raises(ValueError):
        parse_edges(spec)


from corpus import POISON, as_bytes  # noqa: E402  (tests/corpus.py, shared with the Kafka test)


@pytest.mark.parametrize("name,payload,reason", POISON, ids=[p[0] for p in POISON])
def test_poison_rejected_with_stable_reason(name, payload, reason):
    from phasemeter.stream_jobs.derive import process_message

    raw = as_bytes(payload)
    # The worker's entry point: it also routes phase events (schema v2).
    [result] = process_message(raw, BUCKET, 1_000_000, NOW)
    assert isinstance(result, Rejection), name
    assert result.reason == reason, result
    assert result.reason in R.ALL
    assert len(result.detail) <= 300


def test_rejection_detail_names_the_field():
    assert "input_tokens" in run(event(input_tokens="x")).detail
    assert "e2e_s" in run(event(e2e_s=...)).detail


def test_nulls_are_never_zero_or_inf():
    for ev in (event(output_tokens=1), event(ttft_s=None, output_tokens=0), event(ttft_s=0.0)):
        row = run(ev)
        for key in ("prefill_tps", "decode_tps", "tpot_s", "prefill_tps_uncached"):
            assert row[key] is None or (math.isfinite(row[key]) and row[key] > 0)


def envelope(events, **over):
    return json.dumps({"schema_version": 1, "kind": "batch", "events": events, **over}).encode()


def test_envelope_each_event_judged_alone():
    from phasemeter.stream_jobs.derive import process_message

    good, bad = event(), event(ttft_s=9.0)
    out = process_message(envelope([good, bad, good, "x"]), BUCKET, 1_000_000, NOW)
    assert [type(r).__name__ for r in out] == ["dict", "Rejection", "dict", "Rejection"]
    assert out[1].reason == R.IMPOSSIBLE_ORDER and out[1].detail.startswith("events[1]")
    assert out[3].reason == R.NOT_OBJECT


def test_a_lone_surrogate_rejects_only_its_event_and_every_text_it_yields_is_utf8():
    from phasemeter.stream_jobs.derive import process_message

    # A pair escaped by an ASCII-only encoder (json.dumps' default) is one
    # character and valid; half a pair is not.
    paired, lone = event(model="m\U0001F600", request_id="ok"), event(request_id="r\udbff")
    raw = envelope([paired, lone, event(gateway="\ud800\ud800"), event(request_id="r\\ud800")])
    assert b"\\ud83d\\ude00" in raw
    out = process_message(raw, BUCKET, 1_000_000, NOW)
    assert [type(r).__name__ for r in out] == ["dict", "Rejection", "Rejection", "dict"]
    assert out[0]["model"] == "m\U0001F600" and out[3]["request_id"] == "r\\ud800"  # a backslash, then text
    assert out[1].reason == out[2].reason == R.NOT_UTF8
    assert out[1].detail.startswith("events[1]: request_id holds a lone surrogate (U+DBFF")
    assert out[2].detail.startswith("events[2]: gateway holds")
    for result in out:  # what the sink and the dead letters build from it
        for text in (result.values() if isinstance(result, dict) else [result.detail]):
            if isinstance(text, str):
                text.encode("utf-8")


@pytest.mark.parametrize("raw,reason", [
    (envelope([]), R.WRONG_TYPE),
    (envelope("nope"), R.WRONG_TYPE),
    (envelope([{}], schema_version=7), R.UNKNOWN_VERSION),
    (envelope([{}], extra=1), R.BAD_VALUE),
])
def test_bad_envelopes_are_one_rejection(raw, reason):
    from phasemeter.stream_jobs.derive import process_message

    out = process_message(raw, BUCKET, 1_000_000, NOW)
    assert len(out) == 1 and out[0].reason == reason


def test_single_event_message_same_as_process():
    from phasemeter.stream_jobs.derive import process_message

    raw = json.dumps(event()).encode()
    assert process_message(raw, BUCKET, 1_000_000, NOW) == [process(raw, BUCKET, 1_000_000, NOW)]


def test_the_c_decoder_agrees_with_full_validation():
    """The poison corpus's events and random mutations, one per message:
    the worker's C decoder (fast_decode.py) gives the full path's results."""
    import random as rnd

    from phasemeter.stream_jobs.derive import process_message
    from phasemeter.stream_jobs.batch_decode import answer
    from tests.unit.stream_jobs.test_fast_decode import in_c

    r = rnd.Random(1)
    cases = []
    for _, payload, _ in POISON:
        try:
            cases.append(json.loads(as_bytes(payload)))
        except (ValueError, UnicodeDecodeError):
            pass
    choices = {"input_tokens": [0, 5, 10**6, 10**7, 10**7 + 1, -1, 2.0, True],
               "output_tokens": [0, 1, 2, 500, -3], "ttft_s": [None, 0.0, 0.5, 3.0, -0.1, 1, 9e4],
               "e2e_s": [0.0, 0.4, 2.5, 2, 9e4, "1"], "queue_s": [..., None, 0.0, 0.2, 0.6, 5.0],
               "cached_input_tokens": [..., None, 0, 4, 999, 10**7, 1.5],
               "status": [..., "ok", "error", "cancelled", None, "x"],
               "model": ["m", "", "m" * 200, "m" * 201, 3], "finish_reason": [..., None, "stop", "", "s" * 65],
               "schema_version": [1, 1.0, 2, True], "t0": [NOW - 10, NOW + 90_000, 0, NOW - 10.5, float("nan")]}
    for _ in range(3000):
        picks = r.sample(sorted(choices), r.randint(0, 3))
        cases.append(event(**{k: r.choice(choices[k]) for k in picks}))
    accepted = 0
    assert len(cases) > 3000
    for ev in cases:
        raw = json.dumps(ev).encode()
        assert answer(raw, BUCKET, 1_000_000, NOW) == process_message(raw, BUCKET, 1_000_000, NOW), ev
        accepted += in_c(raw)
    assert accepted > 100
