"""The caller's cost of `Meter` before and after a change to its edges
(argument checks, the all-or-nothing batch), measured the same way twice.

    python bench/bench_emitter_edges.py --n 20000 --save /tmp/before.json     # on the old code
    python bench/bench_emitter_edges.py --n 20000 --before /tmp/before.json   # on the new code: records

Broker down (an unused 127.0.0.1 port), so only the caller's path is timed:
bench_emitter's `time_record` and `time_generation`, `--rounds` times each,
the median of each round's p50 and p99 kept (one round is noisy on a shared
machine). With `--before`, writes bench/results/<date>-emitter-edges.json
holding each figure beside the old code's as its reference.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_emitter import pct, time_generation, time_record, unused_port  # noqa: E402
from results import figure, record  # noqa: E402

from phasemeter.producers import Meter  # noqa: E402

PATHS = {"record": lambda m, n: time_record(m, n), "generation": lambda m, n: time_generation(m, n)}


def measure(n: int, rounds: int) -> dict:
    out = {}
    for name, run in PATHS.items():
        p50s, p99s = [], []
        for _ in range(rounds):
            meter = Meter(bootstrap_servers=f"127.0.0.1:{unused_port()}", queue_size=n + 1, flush_timeout_s=0)
            samples = run(meter, n)
            meter.close(0)
            p50s.append(pct(samples, 0.50))
            p99s.append(pct(samples, 0.99))
        out[name] = {"p50_us": statistics.median(p50s), "p99_us": statistics.median(p99s)}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--save", help="write this run's figures here (the reference run)")
    ap.add_argument("--before", help="the reference run's file: record this run against it")
    args = ap.parse_args()
    now = measure(args.n, args.rounds)
    print(json.dumps(now, indent=1))
    if args.save:
        Path(args.save).write_text(json.dumps(now))
    if args.before:
        before = json.loads(Path(args.before).read_text())
        figures = []
        for path, stats in now.items():
            for q in ("p50_us", "p99_us"):
                ref = {"what": f"Meter.{path} {q}, code before the change", "value": before[path][q]}
                ratio = stats[q] / before[path][q]
                figures.append(figure("emitter-caller-cost", f"Meter.{path} {q}, broker down, n={args.n}",
                                      stats[q], "us", reference=ref, target="<= 1.05x the code before",
                                      met=ratio <= 1.05))
        print(record("emitter-edges", figures, notes="median of --rounds rounds; reference: the same "
                                                     "script on the code before the change, same machine"))


if __name__ == "__main__":
    main()
