"""Soak: a steady rate of phase-event generations for an hour through one
worker, its RSS sampled every minute; at the end nothing may be lost.

    python bench/soak.py --minutes 60 --rate 200 --write-docs

RSS must stay flat: after the warm-up (the first `--warmup-min` minutes),
every sample within 10 % of the warm-up's last one. The source-vs-target
check is the chaos harness's (chaos_check.py).
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import chaos_check as C  # noqa: E402


def gateway(bootstrap: str, topic: str, rate: float, seconds: float, stats: dict, stop: threading.Event) -> None:
    """`rate` generations/s as phase events, each open for 0.2-2 s, paced per tick."""
    from phasemeter.producers import Meter

    rng = random.Random(5)
    meter = Meter(bootstrap, topic, gateway="soak", phase_events=True)
    open_: list = []
    t_start = time.monotonic()
    n = 0
    while not stop.is_set() and time.monotonic() - t_start < seconds:
        tick = time.monotonic()
        due = int((tick - t_start) * rate) - n
        for _ in range(due):
            gen = meter.generation(rng.choice(("m-a", "m-b")), rng.choice((200, 1500, 5000, 20000)),
                                   request_id=f"soak-{n}")  # sends start
            end_at = tick + rng.uniform(0.2, 2.0)
            open_.append((end_at, tick + (end_at - tick) * rng.uniform(0.1, 0.6), gen, rng.randint(1, 300)))
            n += 1
        keep = []
        for item in open_:
            end_at, first_at, gen, n_out = item
            if first_at <= tick:
                gen.first_token()  # sends first_token once
            if end_at <= tick:
                gen.finish(n_out)
            else:
                keep.append(item)
        open_ = keep
        time.sleep(max(0.0, 0.05 - (time.monotonic() - tick)))
    for _, _, gen, n_out in open_:
        gen.first_token()
        gen.finish(n_out)
    meter.flush(60)
    stats.update(meter.stats().as_dict(), generations=n)
    meter.close(10)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--minutes", type=float, default=60.0)
    p.add_argument("--rate", type=float, default=200.0, help="generations per second")
    p.add_argument("--warmup-min", type=float, default=5.0)
    p.add_argument("--bootstrap", default=None)
    p.add_argument("--write-docs", action="store_true")
    args = p.parse_args(argv)
    U.exit_cleanly_on_sigterm()
    work = Path(tempfile.mkdtemp(prefix="pm-soak-"))
    with U.broker(args.bootstrap) as bootstrap:
        topic = f"soak-{int(time.time())}"
        from phasemeter.kafka_local import ensure_topics

        ensure_topics(bootstrap, [topic], 4)
        w = U.Worker(bootstrap, topic, work / "worker", batch_seconds=0.5)
        w.migrate()
        w.start()
        try:
            stats, samples = soak(args, bootstrap, topic, w)
            # An hour of phase events is millions of records: give the reader time.
            source = C.read_source(bootstrap, topic, timeout_s=1800)
            deadline = time.monotonic() + 180
            while time.monotonic() < deadline and (w.health() or {}).get("accepted", 0) < len(source["expected"]):
                time.sleep(1)
            time.sleep(3)
            inflight = U.get_json(f"{w.url}/inflight") or {}
        finally:
            w.stop()
        target = C.read_target(f"chdb://{w.workdir / 'data' / 'store'}", w.env["PHASEMETER_DATABASE"])
        verdict = C.compare(source, [target], "phases")
    return report(args, verdict, inflight, stats, samples)


def soak(args, bootstrap: str, topic: str, w: U.Worker) -> tuple[dict, list]:
    """Run the gateway for --minutes, sampling the worker's RSS every minute."""
    samples: list[tuple[float, float, dict]] = []
    stats: dict = {}
    stop = threading.Event()
    gw = threading.Thread(target=gateway, args=(bootstrap, topic, args.rate, args.minutes * 60, stats, stop))
    t0 = time.monotonic()
    gw.start()
    try:
        while gw.is_alive():
            gw.join(60.0)
            h = w.health() or {}
            samples.append((round((time.monotonic() - t0) / 60, 1), U.memory_mib(w.proc.pid) or 0.0,
                            {k: h.get(k) for k in ("consumed", "accepted", "rejected")}))
            print(f"{samples[-1][0]:6.1f} min  RSS {samples[-1][1]:7.1f} MiB  {samples[-1][2]}", flush=True)
    finally:
        stop.set()
        gw.join()
    return stats, samples


def report(args, verdict: dict, inflight: dict, stats: dict, samples: list) -> int:
    warm = [s for s in samples if s[0] >= args.warmup_min]
    base = warm[0][1] if warm else None
    worst = max((abs(s[1] - base) / base for s in warm), default=0.0) if base else None
    left = sum(c["in_flight"] for c in inflight.get("in_flight", []))
    flat = worst is not None and worst <= 0.10
    ok = verdict["ok"] and flat and left == 0
    summary = (f"{args.minutes:.0f} min at {args.rate:.0f} generations/s (phase events): "
               f"{stats.get('generations')} generations, stored {verdict['stored']}, lost {verdict['lost']}, "
               f"duplicated {verdict['duplicated']}, rollup mismatches {verdict['rollup_mismatches']}, "
               f"left in flight {left}; RSS after {args.warmup_min:.0f} min warm-up {base or 0:.1f} MiB, "
               f"largest deviation {100 * (worst or 0):.1f} % ({'flat' if flat else 'NOT flat'})")
    print(summary)
    table = U.md_table(["minute", "RSS MiB", "accepted"], [[s[0], round(s[1], 1), s[2].get("accepted")]
                                                          for s in samples])
    print(table)
    if args.write_docs:  # the result beside the others, and BENCHMARKS.md regenerated from them
        import report
        import results as R

        print("result:", R.record("soak", [R.figure(
            "soak-rss", f"worker RSS, largest deviation from its {base or 0:.0f} MiB after {args.warmup_min:g} min",
            round(100 * (worst or 0), 1), "%",
            target="≤ 10 %, nothing lost or duplicated, nothing left in flight", met=ok)], notes=summary))
        report.main([])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
