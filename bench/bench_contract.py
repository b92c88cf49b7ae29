"""The worker's batch path against the full Python path, in one process.

    python bench/bench_contract.py [--n 100000] [--reps 5]

The reference is `stream_jobs.derive.process_message` (json.loads, the
hand-written checks, derive), message by message; the candidate is what the
worker runs, `stream_jobs.batch_decode.decode` on batches of 1,000 records
(the C decoder's Structs, the checks and formulas on whole columns; an event
it does not take goes to the reference). Same messages, same clock,
interleaved repetitions, medians. Both are timed on single events and on
envelopes of 100, and every result of the two paths is compared (the batch
path's code on one message: `batch_decode.answer`): on the valid messages and
on the poison corpus (tests/corpus.py), alone and inside an envelope.
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
    from types import SimpleNamespace

    from phasemeter.stream_jobs.batch_decode import answer, decode

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="generations per form")
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args(argv)
    bucket, now = Bucketer(parse_edges("default")), time.time()
    events = U.synthetic_events(args.n)
    forms = {"single events": [U.encode_event(e) for e in events],
             "envelopes of 100": [U.envelope(events[i:i + 100]) for i in range(0, len(events), 100)]}
    def full(messages):
        for m in messages:
            process_message(m, bucket, LIMIT, now)

    def batches(messages):
        records = [SimpleNamespace(message=SimpleNamespace(topic="gen", partition=0, offset=i), value=m)
                   for i, m in enumerate(messages)]
        for i in range(0, len(records), 1000):
            decode(records[i:i + 1000], bucket, LIMIT, now)
    paths = {"full path (json + Python checks)": full, "batch path (the worker's)": batches}

    out: dict = {"n": args.n, "reps": args.reps, "us_per_generation": {}}
    print(f"{args.n:,} generations per form, {args.reps} interleaved repetitions, medians\n")
    print("| form | " + " | ".join(paths) + " | ratio |\n|---|---:|---:|---:|")
    for form, messages in forms.items():
        assert all(answer(m, bucket, LIMIT, now) == process_message(m, bucket, LIMIT, now) for m in messages), \
            f"{form}: the two paths disagree"
        runs: dict[str, list[float]] = {name: [] for name in paths}
        for _ in range(args.reps):
            for name, fn in paths.items():
                t = time.perf_counter()
                fn(messages)
                runs[name].append((time.perf_counter() - t) / args.n * 1e6)
        ref, cand = (statistics.median(v) for v in runs.values())
        out["us_per_generation"][form] = {name: statistics.median(v) for name, v in runs.items()}
        print(f"| {form} | {ref:.2f} µs | {cand:.2f} µs | {cand / ref:.2f} |")

    from corpus import POISON, as_bytes

    same = 0
    for _name, payload, _reason in POISON:
        raw = as_bytes(payload)
        alone = process_message(raw, bucket, LIMIT, now) == answer(raw, bucket, LIMIT, now)
        wrapped = True
        if isinstance(payload, dict):
            env = json.dumps({"schema_version": 2, "kind": "batch", "events": [events[0], payload]}).encode()
            wrapped = process_message(env, bucket, LIMIT, now) == answer(env, bucket, LIMIT, now)
        same += alone and wrapped
    out["poison_same"] = same
    print(f"\npoison corpus: the two paths give the same results for {same} of {len(POISON)} cases "
          "(alone, and inside an envelope after a valid event)")
    return out


if __name__ == "__main__":
    main()
