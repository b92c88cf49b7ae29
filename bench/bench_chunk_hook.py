"""Caller-side cost of the emitter's chunk hook, `g.chunk(n)`, per generation.

    python bench/bench_chunk_hook.py [--n 4000] [--chunks 500] [--rounds 40]

Per generation, perf_counter_ns around the whole `with meter.generation(...)`
block; the same Meter (its producer an in-memory stand-in, so the sender
thread still encodes every event and competes for the GIL), all in one run:

  * reference: the plain context manager, first_token() then finish(), no chunks;
  * chunked: the same with `chunks` calls of g.chunk(1) in between
    (the event then carries the v2 stall fields);
  * loop floor: the same reference plus `chunks` calls of a no-op method, the
    least any per-chunk Python call costs (what the hook cannot go below);
  * record(): one `Meter.record()` without and with the four stall fields
    (the one-shot path for callers that timed chunks themselves).

The kinds alternate in blocks within each round, so they see the same load.
The hook's overhead is chunked minus reference, at p50 and p99. Two clocks:
wall (perf_counter_ns: what the caller waits, preemption by other processes
and GIL hand-offs to the sender thread included) and the thread's own CPU
time (thread_time_ns: what the code costs, the steadier figure on a shared
machine; each reading is a system call of about a microsecond, paid alike
by every kind).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _util as U  # noqa: E402

from phasemeter.producers import Meter  # noqa: E402

GEN = dict(model="llama-3.1-8b", input_tokens=1200, replica="replica-0", cached_input_tokens=1024)
REC = dict(model="llama-3.1-8b", input_tokens=1200, output_tokens=500, ttft_s=0.182, e2e_s=9.734,
           cached_input_tokens=1024, status="ok", finish_reason="stop", replica="replica-0")
STALLS = dict(chunks=500, max_gap_s=0.61, gaps_over=1, gap_threshold_s=0.5)


class _Noop:
    __slots__ = ()

    def chunk(self, n: int = 1) -> None:
        pass


def plain(meter: Meter, n: int, chunks: int) -> list[int]:
    out, clock, cpu = [], time.perf_counter_ns, time.thread_time_ns
    for _ in range(n):
        c, t = cpu(), clock()
        with meter.generation(**GEN) as g:
            g.first_token()
            g.finish(output_tokens=chunks, status="ok", finish_reason="stop")
        out.append((clock() - t, cpu() - c))
    return out


def chunked(meter: Meter, n: int, chunks: int) -> list[int]:
    out, clock, cpu, steps = [], time.perf_counter_ns, time.thread_time_ns, range(chunks)
    for _ in range(n):
        c, t = cpu(), clock()
        with meter.generation(**GEN) as g:
            g.first_token()
            for _ in steps:
                g.chunk(1)
            g.finish(output_tokens=chunks, status="ok", finish_reason="stop")
        out.append((clock() - t, cpu() - c))
    return out


def floor(meter: Meter, n: int, chunks: int) -> list[int]:
    out, clock, cpu, steps, noop = [], time.perf_counter_ns, time.thread_time_ns, range(chunks), _Noop()
    for _ in range(n):
        c, t = cpu(), clock()
        with meter.generation(**GEN) as g:
            g.first_token()
            for _ in steps:
                noop.chunk(1)
            g.finish(output_tokens=chunks, status="ok", finish_reason="stop")
        out.append((clock() - t, cpu() - c))
    return out


def record(meter: Meter, n: int, stalls: bool) -> list[int]:
    out, clock, cpu, extra = [], time.perf_counter_ns, time.thread_time_ns, STALLS if stalls else {}
    for _ in range(n):
        c, t = cpu(), clock()
        meter.record(t0=time.time(), **REC, **extra)
        out.append((clock() - t, cpu() - c))
    return out


def pct(samples: list[int], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0


def run(n: int, chunks: int, rounds: int) -> dict:
    meter = Meter("unused:9092", topic="bench", producer_factory=U.NullProducer, queue_size=1_000_000)
    kinds = {"reference": lambda k: plain(meter, k, chunks), "chunked": lambda k: chunked(meter, k, chunks),
             "floor": lambda k: floor(meter, k, chunks), "record": lambda k: record(meter, k, False),
             "record_stalls": lambda k: record(meter, k, True)}
    samples: dict[str, list[tuple[int, int]]] = {k: [] for k in kinds}
    for f in kinds.values():  # warm-up: caches, the sender thread started
        f(50)
    per_round = max(1, n // rounds)
    for _ in range(rounds):
        for name, f in kinds.items():
            samples[name] += f(per_round)
    meter.flush(60)
    meter.close(5)
    stats = meter.stats()
    out = {}
    for name, s in samples.items():
        wall, cpu = [w for w, _ in s], [c for _, c in s]
        out[name] = {"n": len(s), "p50": pct(wall, 0.50), "p99": pct(wall, 0.99), "max": max(wall) / 1000.0,
                     "cpu_p50": pct(cpu, 0.50), "cpu_p99": pct(cpu, 0.99)}
    ref, ch, fl = out["reference"], out["chunked"], out["floor"]
    for key, base in (("overhead", ref), ("over_floor", fl)):
        out[key] = {q: ch[q] - base[q] for q in ("p50", "p99", "cpu_p50", "cpu_p99")}
    out["per_chunk_ns_p50"] = 1000.0 * out["overhead"]["p50"] / chunks if chunks else None
    out["chunks"], out["meter"] = chunks, stats.as_dict()
    return out


def render(r: dict) -> str:
    c = r["chunks"]
    rows = [["plain context manager, no chunks (reference)", r["reference"]],
            [f"same + {c} × g.chunk(1)", r["chunked"]],
            [f"same + {c} × a no-op method (loop floor)", r["floor"]],
            ["Meter.record()", r["record"]],
            ["Meter.record(..., chunks=, max_gap_s=, gaps_over=, gap_threshold_s=)", r["record_stalls"]]]
    lines = ["| path | n | p50 µs | p99 µs | max µs | CPU p50 µs | CPU p99 µs |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for name, s in rows:
        lines.append(f"| {name} | {s['n']} | {s['p50']:.2f} | {s['p99']:.2f} | {s['max']:.1f} "
                     f"| {s['cpu_p50']:.2f} | {s['cpu_p99']:.2f} |")
    o, f = r["overhead"], r["over_floor"]
    lines.append(f"\nchunk hook, {c} chunks, per generation over the reference: wall {o['p50']:.1f} µs at p50, "
                 f"{o['p99']:.1f} µs at p99; CPU {o['cpu_p50']:.1f} / {o['cpu_p99']:.1f} µs "
                 f"({r['per_chunk_ns_p50']:.0f} ns per chunk at p50). Over the no-op loop floor: wall "
                 f"{f['p50']:.1f} / {f['p99']:.1f} µs, CPU {f['cpu_p50']:.1f} / {f['cpu_p99']:.1f} µs")
    lines.append(f"meter: {r['meter']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=4000, help="generations per kind")
    ap.add_argument("--chunks", type=int, default=500)
    ap.add_argument("--rounds", type=int, default=40)
    args = ap.parse_args()
    print(render(run(args.n, args.chunks, args.rounds)))


if __name__ == "__main__":
    main()
