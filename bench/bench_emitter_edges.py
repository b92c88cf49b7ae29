"""The caller's cost of `Meter` before and after a change to its edges
(argument checks, the all-or-nothing batch), measured in the same run.

    python bench/bench_emitter_edges.py --n 20000 --against /tmp/base   # records
    python bench/bench_emitter_edges.py --n 20000                       # this checkout only

Broker down (an unused 127.0.0.1 port), so only the caller's path is timed:
bench_emitter's `time_record` and `time_generation`. Each of `--rounds`
rounds runs one child process on the code in `--against` and one on this
checkout, alternately, so both see the same machine load; the median of
the rounds' p50 and p99 is kept. With `--against`, writes
bench/results/<date>-emitter-edges.json holding each figure beside the
other code's as its reference. `--code-root` (used by the children) puts a
checkout first on sys.path; a checkout of this repository needs
phasemeter/producers and phasemeter/stream_jobs linked to its producers/
and stream_jobs/.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def one_round(n: int) -> dict:
    """In the child: one round of each path, p50 and p99 in µs."""
    sys.path.insert(1, str(HERE))
    from bench_emitter import pct, time_generation, time_record, unused_port

    from phasemeter.producers import Meter

    out = {}
    for name, run in (("record", time_record), ("generation", time_generation)):
        meter = Meter(bootstrap_servers=f"127.0.0.1:{unused_port()}", queue_size=n + 1, flush_timeout_s=0)
        samples = run(meter, n)
        meter.close(0)
        out[name] = {"p50_us": pct(samples, 0.50), "p99_us": pct(samples, 0.99)}
    return out


def child(n: int, root: str | None) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--n", str(n), "--child"]
    if root:
        cmd += ["--code-root", root]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def medians(runs: list[dict]) -> dict:
    return {path: {q: statistics.median(r[path][q] for r in runs) for q in ("p50_us", "p99_us")}
            for path in ("record", "generation")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--against", help="another checkout (the code before), measured alternately; records")
    ap.add_argument("--child", action="store_true", help="(child) one round, printed as JSON")
    ap.add_argument("--code-root", help="(child) a checkout to import phasemeter from")
    args = ap.parse_args()
    if args.child:
        if args.code_root:
            sys.path.insert(0, args.code_root)
        print(json.dumps(one_round(args.n)))
        return
    mine, theirs = [], []
    for _ in range(args.rounds):
        if args.against:
            theirs.append(child(args.n, args.against))
        mine.append(child(args.n, None))
    now = medians(mine)
    print(json.dumps({"this": now, "against": medians(theirs) if theirs else None}, indent=1))
    if not theirs:
        return
    sys.path.insert(0, str(HERE))
    from results import figure, record

    before = medians(theirs)
    figures = []
    for path, stats in now.items():
        for q in ("p50_us", "p99_us"):
            ratio = stats[q] / before[path][q]
            bound = 1.02 if q == "p50_us" else 1.05  # a p99 moves more from round to round on a shared machine
            figures.append(figure("emitter-caller-cost", f"Meter.{path} {q}, broker down, n={args.n}", stats[q], "us",
                                  reference={"what": f"Meter.{path} {q}, the code before the change",
                                             "value": before[path][q]},
                                  target=f"<= {bound}x the code before", met=ratio <= bound))
    print(record("emitter-edges", figures, notes=f"median of {args.rounds} rounds, each a child process on "
                                                 "each code, alternately; broker down"))


if __name__ == "__main__":
    main()
