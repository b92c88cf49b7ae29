"""Caller-side cost of the phasemeter emitter vs a direct KafkaProducer.send.

    python bench/bench_emitter.py --bootstrap 127.0.0.1:9092 [--topic T] [--n 20000]
    python bench/bench_emitter.py --broker-down [--n 20000]

Each call is timed with perf_counter_ns. The direct path includes json.dumps
of the same event, since a gateway calling Kafka itself would pay for that too.
Calls run back to back (a worst case: the sender thread competes for the GIL
the whole time), so p99 and max include occasional GIL hand-offs. The
phase-events line times the same generation sending start, first_token and
end (three queue items instead of one), on the same Meter.
"""

from __future__ import annotations

import argparse
import json
import socket
import sys
import time
import uuid
from pathlib import Path

from phasemeter.producers import Meter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as R  # noqa: E402

EVENT_ARGS = dict(model="llama-3.1-8b", input_tokens=1200, output_tokens=57, ttft_s=0.182,
                  e2e_s=1.734, queue_s=0.004, cached_input_tokens=1024, status="ok",
                  finish_reason="stop", replica="replica-0")


def pct(samples: list[int], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))] / 1000.0


def summary(name: str, samples: list[int]) -> dict:
    return {"path": name, "n": len(samples), "p50": pct(samples, 0.50), "p99": pct(samples, 0.99),
            "max": max(samples) / 1000.0}


def time_record(meter: Meter, n: int) -> list[int]:
    out, clock = [], time.perf_counter_ns
    for _ in range(n):
        t = clock()
        meter.record(t0=time.time(), **EVENT_ARGS)
        out.append(clock() - t)
    return out


def time_generation(meter: Meter, n: int, phase_events: bool = False) -> list[int]:
    out, clock = [], time.perf_counter_ns
    for _ in range(n):
        t = clock()
        with meter.generation(model="llama-3.1-8b", input_tokens=1200, replica="replica-0",
                              cached_input_tokens=1024, phase_events=phase_events) as g:
            g.scheduled()
            g.first_token()
            g.finish(output_tokens=57, status="ok", finish_reason="stop")
        out.append(clock() - t)
    return out


def time_direct(producer, topic: str, n: int) -> list[int]:
    out, clock, a = [], time.perf_counter_ns, EVENT_ARGS
    ids = [uuid.uuid4().hex for _ in range(n)]  # outside the timed region
    for rid in ids:
        t = clock()
        event = {"schema_version": 1, "kind": "generation", "request_id": rid, "model": a["model"],
                 "t0": time.time(), "ttft_s": a["ttft_s"], "e2e_s": a["e2e_s"], "queue_s": a["queue_s"],
                 "input_tokens": a["input_tokens"], "output_tokens": a["output_tokens"],
                 "cached_input_tokens": a["cached_input_tokens"], "status": a["status"],
                 "finish_reason": a["finish_reason"], "gateway": "bench", "replica": a["replica"]}
        value = json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        producer.send(topic, key=rid.encode("utf-8"), value=value)
        out.append(clock() - t)
    return out


def table(rows: list[dict], baseline: dict | None) -> str:
    lines = ["| path | n | p50 µs | p99 µs | max µs | p50 ratio vs direct | p99 ratio vs direct |",
             "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if baseline is None:
            r50 = r99 = "n/a"
        else:
            r50, r99 = f"{r['p50'] / baseline['p50']:.3f}", f"{r['p99'] / baseline['p99']:.3f}"
        lines.append(f"| {r['path']} | {r['n']} | {r['p50']:.2f} | {r['p99']:.2f} | {r['max']:.1f} "
                     f"| {r50} | {r99} |")
    return "\n".join(lines)


def unused_port() -> int:
    with socket.socket() as s:  # bound then released: nothing listens there afterwards
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_live(args) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(bootstrap_servers=args.bootstrap, acks="all", linger_ms=5)
    warm = min(2000, args.n)
    time_direct(producer, args.topic, warm)  # metadata fetch, connections, caches
    producer.flush(30)
    direct = time_direct(producer, args.topic, args.n)
    producer.flush(60)
    producer.close(10)

    meter = Meter(bootstrap_servers=args.bootstrap, topic=args.topic, gateway="bench",
                  queue_size=max(10_000, args.n), flush_timeout_s=60)
    time_record(meter, warm)
    meter.flush(60)
    rec = time_record(meter, args.n)
    meter.flush(60)
    gen = time_generation(meter, args.n)
    meter.flush(60)
    phased = time_generation(meter, args.n, phase_events=True)
    flushed = meter.flush(60)
    meter.close()
    base = summary("KafkaProducer.send (json + send)", direct)
    record = summary("Meter.record", rec)
    print(table([base, record, summary("with Meter.generation", gen),
                 summary("with Meter.generation (phase events: 3 sends)", phased)], base))
    print(f"\nemitter stats: {meter.stats().as_dict()} (flushed={flushed}, includes {warm} warm-up events)")
    p99 = record["p99"]
    print("result:", R.record("emitter", [R.figure(
        "emitter-record", "Meter.record p99, caller cost per generation", p99, "µs",
        reference={"what": "KafkaProducer.send (json + send) p99", "value": base["p99"]},
        target="p99 ≤ 20 µs and ≤ 0.2× a direct send", met=p99 <= 20 and p99 <= 0.2 * base["p99"])]))


def run_broker_down(args) -> None:
    bootstrap = f"127.0.0.1:{unused_port()}"
    meter = Meter(bootstrap_servers=bootstrap, topic=args.topic, gateway="bench",
                  queue_size=args.queue_size, flush_timeout_s=1.0)
    rec = time_record(meter, args.n)
    gen = time_generation(meter, args.n)
    phased = time_generation(meter, args.n, phase_events=True)
    t = time.perf_counter()
    meter.close()
    close_s = time.perf_counter() - t
    rows = [summary("Meter.record (broker down)", rec), summary("with Meter.generation (broker down)", gen),
            summary("with Meter.generation, phase events (broker down)", phased)]
    print(table(rows, None))
    s = meter.stats()
    # A phase-events generation is three queue items (start, first_token, end).
    print(f"\nbootstrap {bootstrap} (nothing listening); max caller latency "
          f"{max(r['max'] for r in rows):.1f} µs; dropped {s.dropped} of {5 * args.n} events; "
          f"stats {s.as_dict()}; close() took {close_s:.2f} s")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="phasemeter.bench")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queue-size", type=int, default=10_000, help="emitter queue bound (--broker-down)")
    ap.add_argument("--broker-down", action="store_true",
                    help="point at an unused 127.0.0.1 port and measure only the emitter")
    args = ap.parse_args()
    (run_broker_down if args.broker_down else run_live)(args)


if __name__ == "__main__":
    main()
