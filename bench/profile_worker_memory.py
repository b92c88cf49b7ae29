"""Where the worker's memory goes on a backlog of envelopes, without Kafka.

    python bench/profile_worker_memory.py [--batches 4] [--batch-bytes 32000000] [--trace]
        [--insert-setting NAME=VALUE ...] [--drop-views]

Runs what the ingest agent runs per batch, in this process, on a real Sink
over a tmp chDB store (bench/profile_worker.py's pieces): the next batch's
decode (`Pipeline.decode_ahead`), `Pipeline.split` and `Sink.write`. Batches
are envelopes of 100 generations, as many as fit in `--batch-bytes` (the
worker's PHASEMETER_BATCH_BYTES). A thread samples the RSS (/proc) every
5 ms, so each step's peak above the RSS before it is its working memory;
chDB's own tracker (system.metrics MemoryTracking) is read after each batch.
`--trace` also reports the Python heap tracemalloc sees (objects, numpy's
buffers; its own bookkeeping inflates the RSS, so the RSS figures of such a
run are not the worker's). `--drop-views` drops the rollups' materialized
views in the tmp store, and `--stop-merges` stops its background merges, to
attribute memory to them.
The Kafka side (Faust's stream buffer, aiokafka's fetched records, the raw
bytes of the batch being gathered) is not here: bench/bench_worker_memory.py
measures the whole worker.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
from profile_worker import make_events, make_pipeline  # noqa: E402

MIB = 1 << 20
VIEWS = ("generations_minute_mv", "generations_hour_mv", "generations_day_mv", "generations_hour3_mv",
         "slo_minute_mv")


class Peak:
    """The highest RSS sampled since the last `reset`, from a thread of its own."""

    def __init__(self, every_s: float = 0.005):
        self.pid, self.every_s, self.top, self.stop = os.getpid(), every_s, 0.0, threading.Event()
        self.highest = 0.0  # over the whole run
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self):
        while not self.stop.is_set():
            self.top = max(self.top, U.memory_mib(self.pid) or 0.0)
            self.highest = max(self.highest, self.top)
            time.sleep(self.every_s)

    def reset(self) -> float:
        now = U.memory_mib(self.pid)
        self.top = now
        return now

    def high(self) -> float:
        return max(self.top, U.memory_mib(self.pid))


def traced(trace: bool) -> float:
    return tracemalloc.get_traced_memory()[1] / MIB if trace else 0.0


def main(argv: list[str] | None = None) -> list[dict]:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=4)
    ap.add_argument("--batch-bytes", type=int, default=32_000_000)
    ap.add_argument("--trace", action="store_true", help="also the Python heap's peak per step (tracemalloc)")
    ap.add_argument("--insert-setting", action="append", default=[], help="NAME=VALUE for the inserts")
    ap.add_argument("--drop-views", action="store_true", help="attribution: insert without the rollups' views")
    ap.add_argument("--stop-merges", action="store_true", help="attribution: no background merges of parts")
    args = ap.parse_args(argv)
    import pyarrow as pa

    per_env = len(make_events(100, 100)[0].value)
    n_env = max(1, args.batch_bytes // per_env)
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-memprof-"))
    peak = Peak()
    out = []
    try:
        print(f"start: RSS {U.memory_mib(peak.pid):.0f} MiB")
        pipeline, client = make_pipeline(True, tmp)
        extra = dict(s.split("=", 1) for s in args.insert_setting)
        pipeline.sink.insert_settings = {**pipeline.sink.insert_settings, **extra}
        if args.drop_views:
            for v in VIEWS:
                client.command(f"DROP VIEW {v}")  # a throwaway store, for attribution only
        if args.stop_merges:
            client.command("SYSTEM STOP MERGES")
        pipeline.split(make_events(1000, 100, first_offset=10**6))  # first-call imports out of the figures
        print(f"store open and migrated: RSS {U.memory_mib(peak.pid):.0f} MiB "
              f"(anon {U.memory_mib(peak.pid, 'RssAnon'):.0f}, files {U.memory_mib(peak.pid, 'RssFile'):.0f})")
        if args.trace:
            tracemalloc.start()
        for i in range(args.batches):
            events = make_events(n_env * 100, 100, first_offset=i * n_env)
            raw = sum(len(e.value) for e in events) / MIB
            steps = {}
            for name, fn in (("decode_ahead", lambda: pipeline.decode_ahead(events)),
                             ("split", lambda: pipeline.split(events, ahead)),
                             ("write", lambda: pipeline.sink.write(rows, dead))):
                before = peak.reset()
                if args.trace:
                    tracemalloc.reset_peak()
                    base = tracemalloc.get_traced_memory()[0] / MIB
                t = time.perf_counter()
                result = fn()
                secs = time.perf_counter() - t
                steps[name] = {"rss_before": before, "peak_above": peak.high() - before, "seconds": secs,
                               "python_peak_above": traced(args.trace) - base if args.trace else None}
                if name == "decode_ahead":
                    ahead = result
                elif name == "split":
                    rows, dead = result[0], result[1]
            arrow = pa.total_allocated_bytes() / MIB
            del events, ahead, rows, dead, result
            tracked = client.command("SELECT value FROM system.metrics WHERE metric = 'MemoryTracking'") / MIB
            row = {"batch": i + 1, "raw_mib": raw, "steps": steps, "rss_after": U.memory_mib(peak.pid),
                   "chdb_tracked_mib": tracked, "arrow_pool_mib": arrow}
            out.append(row)
            print(f"batch {i + 1} ({n_env * 100:,} generations, {raw:.1f} MiB of JSON): " + "; ".join(
                f"{k} {s['seconds']:.2f} s from {s['rss_before']:.0f} MiB +{s['peak_above']:.0f}"
                + (f" (Python +{s['python_peak_above']:.0f})" if args.trace else "") for k, s in steps.items())
                + f"; after {row['rss_after']:.0f} MiB, chDB tracks {tracked:.0f}, Arrow pool {arrow:.0f}",
                flush=True)
        parts = client.command("SELECT count() FROM system.parts WHERE active AND database = currentDatabase()")
        print(f"highest RSS of the run {peak.highest:.0f} MiB; {parts} active parts at the end")
        if client is not None:
            client.close()
    finally:
        peak.stop.set()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


if __name__ == "__main__":
    main()
