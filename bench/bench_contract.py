"""Should the event contract move to msgspec? Measured against today's
hand-written path (stream_jobs/derive.process: json.loads + validate +
derive) on the same events, for speed and for strictness.

msgspec (https://jcristharif.com/msgspec/) decodes JSON straight into typed
Structs in C and can emit JSON Schema from them. The candidate here is a
Struct with the contract's limits (stream_jobs/contract.py) as Meta
constraints, decoded with msgspec.json.decode, then the same derive().

Strictness is what decides it: every poison case of tests/corpus.py must
still be rejected, with the same reason code, because dead letters are
grouped and alerted on by reason.

    pip install msgspec==0.23.0     # not a dependency: only this benchmark needs it
    python bench/bench_contract.py
"""

# No `from __future__ import annotations`: the Struct below is built inside a
# function, and msgspec must evaluate its annotations there.

import json
import statistics
import sys
import time
from pathlib import Path
from typing import Annotated, Literal, Optional  # noqa: F401 (msgspec reads them)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from phasemeter.stream_jobs import contract as C  # noqa: E402
from phasemeter.stream_jobs import reasons as R  # noqa: E402
from phasemeter.stream_jobs.buckets import Bucketer, parse_edges  # noqa: E402
from phasemeter.stream_jobs.derive import NO_EXTRAS, Rejection, derive, process  # noqa: E402

BUCKET = Bucketer(parse_edges("default"))


def candidate():
    import msgspec
    from msgspec import Meta

    def label(name):
        return Annotated[str, Meta(min_length=1, max_length=C.LABEL_FIELDS[name])]
    count = Annotated[int, Meta(ge=0, le=C.MAX_TOKENS)]
    duration = Annotated[float, Meta(ge=0, le=C.MAX_DURATION_S)]

    class Generation(msgspec.Struct, forbid_unknown_fields=True):
        schema_version: Literal[1, 2]
        kind: Literal["generation"]
        request_id: label("request_id")
        model: label("model")
        t0: Annotated[float, Meta(ge=C.MIN_T0)]
        e2e_s: duration
        input_tokens: count
        output_tokens: count
        ttft_s: Optional[duration] = None
        queue_s: Optional[duration] = None
        cached_input_tokens: Optional[count] = None
        status: Literal["ok", "error", "cancelled"] = "ok"
        finish_reason: Optional[label("finish_reason")] = None
        gateway: Optional[label("gateway")] = None
        replica: Optional[label("replica")] = None

    decoder = msgspec.json.Decoder(Generation)
    fields = Generation.__struct_fields__

    def run(raw: bytes):
        try:
            ev = decoder.decode(raw)
        except msgspec.ValidationError as exc:
            return Rejection(_reason(str(exc)), str(exc))
        except msgspec.DecodeError as exc:
            return Rejection(R.MALFORMED_JSON, str(exc))
        # Only the cross-field rules JSON types cannot state (the per-field
        # ones msgspec already checked), then the same derivation.
        out = {**NO_EXTRAS, **{f: getattr(ev, f) for f in fields}}  # v1 here: no chunk data
        ttft, e2e, queue = out["ttft_s"], out["e2e_s"], out["queue_s"]
        if out["t0"] > time.time() + C.MAX_DURATION_S:
            return Rejection(R.ABSURD, "t0 in the future")
        if ttft is not None and e2e < ttft:
            return Rejection(R.IMPOSSIBLE_ORDER, "t_end before t_first")
        if queue is not None and queue > (ttft if ttft is not None else e2e):
            return Rejection(R.IMPOSSIBLE_ORDER, "t_scheduled after t_first/t_end")
        if ttft is None and out["output_tokens"] > 0:
            return Rejection(R.INCONSISTENT, "output_tokens > 0 but no first token")
        cached = out["cached_input_tokens"]
        if cached is not None and cached > out["input_tokens"]:
            return Rejection(R.INCONSISTENT, "cached_input_tokens > input_tokens")
        return derive(out, BUCKET)
    return run


def _reason(message: str) -> str:
    """msgspec's error text -> a reason code (its messages are not an API)."""
    if "unknown field" in message:
        return R.UNKNOWN_FIELD
    if "missing required field" in message:
        return R.MISSING_FIELD
    if message.startswith("Expected `int` >= 0") or message.startswith("Expected `float` >= 0"):
        return R.NEGATIVE
    if "<=" in message:
        return R.ABSURD
    if "Invalid enumeration value" in message:
        return R.BAD_VALUE
    return R.WRONG_TYPE


def events(n: int) -> list[bytes]:
    now = time.time()
    return [json.dumps({"schema_version": 1, "kind": "generation", "request_id": f"r-{i}", "model": "llama-4",
                        "t0": now - 60 - i % 500, "ttft_s": 0.2 + i % 17 / 10, "e2e_s": 4.0 + i % 13,
                        "queue_s": 0.01 * (i % 5), "input_tokens": 100 + i % 30_000,
                        "output_tokens": 1 + i % 700, "status": "ok", "replica": "gpu-1"}).encode()
            for i in range(n)]


def timed(fn, data, reps=7) -> float:
    runs = []
    for _ in range(reps):
        t = time.perf_counter()
        for raw in data:
            fn(raw)
        runs.append(time.perf_counter() - t)
    return statistics.median(runs) / len(data) * 1e6


def main() -> None:
    try:
        run = candidate()
    except ImportError:
        sys.exit("msgspec is not installed: pip install msgspec==0.23.0")
    from corpus import POISON, as_bytes

    data = events(50_000)
    ours = lambda raw: process(raw, BUCKET, 1_000_000)  # noqa: E731
    ref = timed(ours, data)
    cand = timed(run, data)
    print(f"valid events: today {ref:.2f} us/event, msgspec {cand:.2f} us/event ({cand / ref:.2f}x)")
    same, differ = 0, []
    for item in POISON:
        name, payload = item[0], item[1]
        raw = as_bytes(payload)
        got_ours, got_cand = ours(raw), run(raw)
        r_ours = got_ours.reason if isinstance(got_ours, Rejection) else "accepted"
        r_cand = got_cand.reason if isinstance(got_cand, Rejection) else "accepted"
        if r_ours == r_cand:
            same += 1
        else:
            differ.append((r_ours, r_cand, name))
    print(f"poison corpus: {same} of {len(POISON)} cases give the same reason code")
    for r_ours, r_cand, what in differ:
        print(f"  today {r_ours:<18} msgspec {r_cand:<18} {what}")


if __name__ == "__main__":
    main()
