"""Trace a `phasemeter worker`'s Python heap while it runs (bench only, never installed).

A worker started with this folder first on PYTHONPATH and PM_BENCH_HEAP_TRACE=<file>
runs under tracemalloc and appends, every 0.5 s, the memory Python traces; every
3 s while it is above 150 MiB, the ten source lines holding the most:

    python bench/bench_worker_memory.py --envelope-n 400000 --rounds 1 \\
        --config traced:PYTHONPATH=$PWD/bench/heap_trace,PM_BENCH_HEAP_TRACE=/tmp/heap.txt

tracemalloc's own bookkeeping slows the worker and inflates its RSS: read the
traced sizes, not the RSS or the rate, of such a run.
"""

import os
import sys
import threading
import time
import tracemalloc

_OUT = os.environ.get("PM_BENCH_HEAP_TRACE")


def _dump(out: str) -> None:
    t0, n = time.monotonic(), 0
    while True:
        time.sleep(0.5)
        n += 1
        cur, peak = tracemalloc.get_traced_memory()
        with open(out, "a") as f:
            f.write(f"t={time.monotonic() - t0:.1f}s traced={cur / 2**20:.0f}MiB peak={peak / 2**20:.0f}MiB\n")
            if n % 6 == 0 and cur > 150 * 2**20:
                for s in tracemalloc.take_snapshot().statistics("lineno")[:10]:
                    frame = s.traceback[0]
                    where = frame.filename.split("site-packages/")[-1]
                    f.write(f"   {s.size / 2**20:7.1f} MiB {s.count:8d} {where}:{frame.lineno}\n")


if _OUT and "worker" in sys.argv:
    tracemalloc.start(1)
    threading.Thread(target=_dump, args=(_OUT,), daemon=True).start()
