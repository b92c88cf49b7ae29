"""The worker's peak RSS on a backlog of envelopes, and its rate, per configuration.

    python bench/bench_worker_memory.py [--envelope-n 200000] [--rounds 2] [--series] [--record]
        [--config worker:] [--config arena2:MALLOC_ARENA_MAX=2] [--bootstrap H:P]

Pre-fills one topic with envelopes of 100 generations (as bench_worker.py does),
then drains it with a fresh `phasemeter worker` and store per run, the
configurations alternated round by round so each is measured beside the
others. A configuration is `name:ENV=V,ENV=V`: environment for the worker's
process (settings, or glibc's MALLOC_* as a measurement). Each run samples the
worker's RSS from /proc every 50 ms (bench/_util.memory_mib) and reports its
peak (VmHWM), the RSS at start and when the last row is stored, and the rate
between two store-completion points, as bench_worker.py takes it.
The first configuration is the reference; with PYTHONPATH=<dir> a configuration
runs another build of the package (a tree laid out as installed: phasemeter/
holding stream_jobs/, producers/, schema/, sql/), to measure a code change in
the same rounds. Why the memory is what it is: docs/performance/worker.md.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402


def parse_config(text: str) -> tuple[str, dict]:
    name, _, pairs = text.partition(":")
    env = dict(p.split("=", 1) for p in pairs.split(",") if p)
    return name, env


def run_once(bootstrap: str, topic: str, generations: int, env: dict, timeout_s: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-mem-"))
    w = U.Worker(bootstrap, topic, tmp, extra_env=env)
    samples: list[tuple[float, float]] = []
    stop = threading.Event()
    out: dict = {"complete": False}
    try:
        w.migrate()
        w.start()
        pid = w.proc.pid
        out["rss_start_mib"] = U.memory_mib(pid)
        t0 = time.monotonic()

        def sample():
            while not stop.is_set():
                rss, anon, file = (U.memory_mib(pid, f) for f in ("VmRSS", "RssAnon", "RssFile"))
                if rss is not None:
                    samples.append((time.monotonic() - t0, rss, anon, file))
                time.sleep(0.05)

        threading.Thread(target=sample, daemon=True).start()
        first = None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            h = w.health() or {}
            acc = h.get("accepted", 0)
            now = time.time()
            if first is None and acc > 0:
                first = (now, acc)
            if acc >= generations:
                secs = now - first[0]
                out.update(complete=True, gens_per_s=(acc - first[1]) / secs if secs > 0 else None,
                           rss_end_mib=U.memory_mib(pid))
                break
            time.sleep(0.1)
        out["peak_rss_mib"] = U.memory_mib(pid, "VmHWM")
    finally:
        stop.set()
        w.stop()
        if not out["complete"]:
            print(w.log.read_text(errors="replace")[-2000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    # RSS over time, every ~0.5 s: where it rises and whether it falls back.
    out["rss_series"] = [(round(s[0], 1), round(s[1])) for s in samples[::10]]
    # At the highest sample: heap and anonymous maps (Python, numpy, Arrow,
    # chDB's allocations) against mapped files (the libraries' code, chDB's).
    top = max(samples, key=lambda s: s[1], default=None)
    out["at_peak"] = {"rss": round(top[1]), "anon": round(top[2]), "file": round(top[3])} if top else {}
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="")
    ap.add_argument("--envelope-n", type=int, default=200_000)
    ap.add_argument("--envelope-size", type=int, default=100)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--config", action="append", default=[], help="name:ENV=V,ENV=V (repeatable)")
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--notes", default="", help="what the configurations are, for the recorded result")
    ap.add_argument("--series", action="store_true", help="print each run's RSS over time")
    ap.add_argument("--record", action="store_true", help="record the figures (bench/results.py): the first "
                                                           "configuration is the worker as built")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()
    configs = [parse_config(c) for c in args.config] or [("default", {})]
    runs: dict[str, list[dict]] = {name: [] for name, _ in configs}
    with U.broker(args.bootstrap or None) as bootstrap:
        topic = f"bench-mem-{uuid.uuid4().hex[:8]}"
        events = U.synthetic_events(args.envelope_n)
        size = args.envelope_size
        msgs = [(events[i]["request_id"].encode(), U.envelope(events[i:i + size]))
                for i in range(0, len(events), size)]
        U.prefill(bootstrap, topic, msgs, args.partitions)
        print(f"{len(msgs):,} envelopes of ~{sum(len(v) for _, v in msgs) / len(msgs):,.0f} B", flush=True)
        del events, msgs
        for i in range(args.rounds):
            for name, env in configs:
                r = run_once(bootstrap, topic, args.envelope_n, env, args.timeout)
                runs[name].append(r)
                print(f"round {i + 1} {name:14} peak {r['peak_rss_mib']:7.0f} MiB  start "
                      f"{r.get('rss_start_mib') or 0:5.0f}  end {r.get('rss_end_mib') or 0:5.0f}  "
                      f"{r.get('gens_per_s') or 0:9,.0f} gen/s  at peak {r['at_peak']}", flush=True)
                if args.series:
                    print("   ", " ".join(f"{t}:{m}" for t, m in r["rss_series"]), flush=True)
    if args.record and all(r["complete"] for rs in runs.values() for r in rs):
        print(f"result: {R.record('worker-memory', figures(configs, runs), notes=notes(args.notes, runs))}")
    return runs


def notes(text: str, runs: dict[str, list[dict]]) -> str:
    """The configurations, then each run's RSS at its highest sample: anonymous memory against mapped files."""
    return (text + "; " if text else "") + "; ".join(f"{name} round {i}: at peak {r['at_peak']}, {r['gens_per_s']:,.0f} gen/s"
                     for name, rs in runs.items() for i, r in enumerate(rs, 1))


def figures(configs: list[tuple[str, dict]], runs: dict[str, list[dict]]) -> list[dict]:
    """The first configuration's peak RSS per round (the worker as built, beside its own RSS at start),
    then each other configuration's peak and rate against the first's in the same round."""
    (base, _), others = configs[0], configs[1:]
    out = []
    for i, b in enumerate(runs[base], 1):
        out.append(R.figure("worker-peak-rss", f"envelopes of 100, worker peak RSS, round {i} of {len(runs[base])}",
                            b["peak_rss_mib"], "MiB",
                            reference={"what": "its RSS at start, before the first batch", "value": b["rss_start_mib"]},
                            target="≤ 500 MiB", met=b["peak_rss_mib"] <= 500))
    for name, env in others:
        how = ",".join(f"{k}={v}" for k, v in env.items())
        for i, (b, a) in enumerate(zip(runs[base], runs[name]), 1):
            out.append(R.figure("worker-peak-rss-options", f"peak RSS with {name} ({how}), round {i}",
                                a["peak_rss_mib"], "MiB",
                                reference={"what": f"{base}'s peak, same round", "value": b["peak_rss_mib"]},
                                target="≤ 500 MiB, at ≥ 0.98× the rate",
                                met=a["peak_rss_mib"] <= 500 and (a["gens_per_s"] or 0) >= 0.98 * b["gens_per_s"]))
            out.append(R.figure("worker-peak-rss-options-rate", f"generations/s with {name}, round {i}",
                                a["gens_per_s"], "1/s",
                                reference={"what": f"{base}'s generations/s, same round", "value": b["gens_per_s"]},
                                target="≥ 0.98×", met=(a["gens_per_s"] or 0) >= 0.98 * b["gens_per_s"]))
    return out


if __name__ == "__main__":
    main()
