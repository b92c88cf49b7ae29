"""How soon a starting worker stores rows: on a fresh store, and after a
restart on the same store (a deploy, a crash restart). The first batch waits
for whatever the worker asks Kafka and the store before its first record,
so a backlog of N generations in envelopes of 100 is timed from the first
consumed record to the last one stored.

    python bench/bench_first_rows.py [--n 20000] [--rounds 4] [--compare-python OTHER/bin/python]

With --compare-python, another venv's worker runs the same rounds, the order
alternating, each on a topic and store of its own.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402


def backlog(bootstrap: str, topic: str, n: int) -> None:
    events = U.synthetic_events(n, seed=int(time.time()), start=time.time() - 90, span_s=60)
    U.prefill(bootstrap, topic, [(None, U.envelope(events[i:i + 100])) for i in range(0, n, 100)], 4)


def drain(worker: U.Worker, n: int) -> float | None:
    """Seconds from the first consumed record to `n` rows stored by this process."""
    return U.watch_stored(worker, n, 120.0, poll_s=0.02).get("from_first_consumed_s")


def one(bootstrap: str, python: str, n: int) -> dict:
    topic = f"bench-first-{uuid.uuid4().hex[:8]}"
    backlog(bootstrap, topic, n)
    w = U.Worker(bootstrap, topic, Path(tempfile.mkdtemp(prefix="pm-bench-first-")), python=python)
    try:
        w.migrate()
        w.start()
        fresh = drain(w, n)
        w.stop()
        backlog(bootstrap, topic, n)
        w.start()
        return {"fresh_s": fresh, "restart_s": drain(w, n)}  # /health counts from the process's start
    finally:
        w.stop()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--compare-python", default="")
    args = ap.parse_args(argv)
    workers = {"this": sys.executable} | ({"other": args.compare_python} if args.compare_python else {})
    print(f"{args.n:,} generations in envelopes of 100; seconds from the first consumed record to all stored\n")
    print("| round | worker | fresh store s | restart s |\n|---:|---|---:|---:|")
    with U.broker(None) as bootstrap:
        for r in range(args.rounds):
            for name in (list(workers) if r % 2 == 0 else list(workers)[::-1]):
                got = one(bootstrap, workers[name], args.n)
                print(f"| {r + 1} | {name} | {got['fresh_s']} | {got['restart_s']} |", flush=True)


if __name__ == "__main__":
    main()
