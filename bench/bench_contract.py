"""The worker's C decoder against the full Python path, in one process.

    python bench/bench_contract.py [--n 100000] [--reps 5]

The reference is `stream_jobs.derive.process_message` (json.loads, the
hand-written checks, derive); the candidate is what the worker runs,
`stream_jobs.fast_decode.process_message_fast` (msgspec Structs, derive's
own checks across fields, the same derive; anything it does not accept whole
goes to the reference). Same messages, same clock, interleaved repetitions,
medians. Both are timed on single events and on envelopes of 100, and every
result of the two paths is compared: on the valid messages and on the poison
corpus (tests/corpus.py), alone and inside an envelope.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
import _util as U  # noqa: E402

LIMIT = 1_000_000


def main(argv: list[str] | None = None) -> dict:
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import process_message
    from phasemeter.stream_jobs.fast_decode import process_message_fast

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="generations per form")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    bucket, now = Bucketer(parse_edges("default")), time.time()
    events = U.synthetic_events(args.n)
    forms = {"single events": [U.encode_event(e) for e in events],
             "envelopes of 100": [U.envelope(events[i:i + 100]) for i in range(0, len(events), 100)]}
    paths = {"full path (json + Python checks)": process_message, "C decoder (the worker's)": process_message_fast}

    out: dict = {"n": args.n, "reps": args.reps, "us_per_generation": {}}
    print(f"{args.n:,} generations per form, {args.reps} interleaved repetitions, medians\n")
    print("| form | " + " | ".join(paths) + " | ratio |\n|---|---:|---:|---:|")
    for form, messages in forms.items():
        results = {name: [r for m in messages for r in fn(m, bucket, LIMIT, now)] for name, fn in paths.items()}
        first, second = results.values()
        assert first == second, f"{form}: the two paths disagree"
        runs: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.reps):
            for name, fn in paths.items():
                t = time.perf_counter()
                for m in messages:
                    fn(m, bucket, LIMIT, now)
                runs[name].append((time.perf_counter() - t) / args.n * 1e6)
        ref, cand = (statistics.median(v) for v in runs.values())
        out["us_per_generation"][form] = {name: statistics.median(v) for name, v in runs.items()}
        print(f"| {form} | {ref:.2f} µs | {cand:.2f} µs | {cand / ref:.2f} |")

    from corpus import POISON, as_bytes

    same = 0
    for _name, payload, _reason in POISON:
        raw = as_bytes(payload)
        alone = process_message(raw, bucket, LIMIT, now) == process_message_fast(raw, bucket, LIMIT, now)
        wrapped = True
        if isinstance(payload, dict):
            env = json.dumps({"schema_version": 2, "kind": "batch", "events": [events[0], payload]}).encode()
            wrapped = process_message(env, bucket, LIMIT, now) == process_message_fast(env, bucket, LIMIT, now)
        same += alone and wrapped
    out["poison_same"] = same
    print(f"\npoison corpus: the two paths give the same results for {same} of {len(POISON)} cases "
          "(alone, and inside an envelope after a valid event)")
    return out


if __name__ == "__main__":
    main()
