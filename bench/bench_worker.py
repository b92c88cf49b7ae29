"""Worker throughput vs a bare Faust agent and raw aiokafka, on the same pre-filled topic.

    python bench/bench_worker.py [--n 50000] [--envelope-size 100 --envelope-n 200000]
                                 [--bootstrap H:P] [--json OUT]

1. Pre-fills a topic with N generation events (one per message, event-v1 JSON
   from phasemeter.demo.synthetic) using a batching kafka-python producer.
2. Drains it with (a) raw aiokafka `getmany`, (b) bench/bare_faust_app.py
   (plain `async for`, and `take_events` like the worker), (c) the real
   `phasemeter worker` into its own chDB store. Each reader has its own group.
   The worker's rate is taken between two store-completion points read from
   /health every 0.1 s (first poll with accepted > 0 .. accepted == N), so
   process start-up and the first fetch are not counted; the references are
   timed first message .. Nth message, inside the reader.
3. Envelopes: pre-fills `--envelope-n` generations as {"kind": "batch",
   "events": [...]} messages of `--envelope-size` and reports the worker's
   generations/s against the bare-Faust *message* rate of step 2.
Without --bootstrap a local broker is started in a tmp dir and stopped at the end.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402


def measure_aiokafka(bootstrap: str, topic: str, n: int, partitions: int, timeout_s: float) -> dict:
    from aiokafka import AIOKafkaConsumer

    async def run() -> dict:
        # Manual assignment, no group: the raw fetch + decode ceiling of this broker and topic.
        from aiokafka import TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        count = 0
        deadline = time.monotonic() + timeout_s
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            first = time.time()  # from the first fetch request: nothing is prefetched yet
            while count < n and time.monotonic() < deadline:
                batches = await consumer.getmany(timeout_ms=500, max_records=10_000)
                count += sum(len(msgs) for msgs in batches.values())
            last = time.time()
        finally:
            await consumer.stop()
        return {"count": count, "t_first": first, "t_last": last, "c0": 0}

    r = asyncio.run(run())
    return _rate("raw aiokafka getmany (assigned, no group)", r, n)


def _rate(name: str, r: dict, n: int) -> dict:
    ok = r["count"] >= n and r["t_first"] and r["t_last"] > r["t_first"]
    secs = (r["t_last"] - r["t_first"]) if ok else None
    msgs = r["count"] - r.get("c0", 1)
    return {"reader": name, "messages": n, "generations": n, "seconds": secs,
            "msgs_per_s": msgs / secs if secs else None, "gens_per_s": msgs / secs if secs else None,
            "complete": bool(ok), "count": r["count"]}


def measure_bare_faust(bootstrap: str, topic: str, n: int, mode: str, partitions: int, batch: int,
                       timeout_s: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-bare-"))
    cmd = [sys.executable, str(U.BENCH_DIR / "bare_faust_app.py"), "--bootstrap", bootstrap, "--topic", topic,
           "--n", str(n), "--mode", mode, "--partitions", str(partitions), "--batch", str(batch),
           "--datadir", str(tmp / "data")]
    log = open(tmp / "bare.log", "wb")
    proc = subprocess.Popen(cmd, cwd=tmp, stdout=subprocess.PIPE, stderr=log, start_new_session=True)
    result = {"count": 0, "t_first": None, "t_last": 0.0}
    try:
        import selectors

        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        deadline = time.monotonic() + timeout_s
        buf = b""
        while time.monotonic() < deadline and proc.poll() is None:
            if not sel.select(timeout=0.5):
                continue
            chunk = proc.stdout.read1(65536) if hasattr(proc.stdout, "read1") else proc.stdout.readline()
            if not chunk:
                break
            buf += chunk
            if b"\n" in buf:
                line = buf.split(b"\n", 1)[0]
                try:
                    result = json.loads(line)
                    break
                except ValueError:
                    buf = b""
        sel.close()
    finally:
        U.stop_process(proc, kill=True)  # Faust's own stop can hang; see bare_faust_app.py
        log.close()
        if proc.stdout:
            proc.stdout.close()
        if result["t_first"] is None:
            print((tmp / "bare.log").read_text(errors="replace")[-2000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    result["c0"] = batch if mode == "take" and n > batch else 1
    return _rate(f"bare Faust agent ({'async for' if mode == 'iterate' else 'take_events'})", result, n)


def measure_worker(bootstrap: str, topic: str, generations: int, messages: int, args, label: str,
                   python: str = sys.executable) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-worker-"))
    w = U.Worker(bootstrap, topic, tmp, batch_rows=args.batch_rows, batch_seconds=args.batch_seconds,
                 python=python)
    out = {"reader": label, "messages": messages, "generations": generations, "seconds": None,
           "msgs_per_s": None, "gens_per_s": None, "complete": False, "supported": True}
    try:
        w.migrate()
        out["startup_s"] = round(w.start(), 2)
        first_consumed = first_accept = None
        h: dict = {}
        deadline = time.monotonic() + args.timeout
        while time.monotonic() < deadline:
            h = w.health() or h
            now = time.time()
            acc, rej, cons = h.get("accepted", 0), h.get("rejected", 0), h.get("consumed", 0)
            if first_consumed is None and cons > 0:
                first_consumed = now
            if first_accept is None and acc > 0:
                first_accept = (now, acc)
            if acc >= generations:
                secs = now - first_accept[0]
                rows = acc - first_accept[1]
                if secs <= 0:  # everything landed within one poll: fall back to first consumed
                    secs, rows = now - first_consumed, acc
                out.update(seconds=secs, gens_per_s=rows / secs, complete=True,
                           msgs_per_s=rows / secs * messages / generations,
                           from_first_consumed_s=round(now - first_consumed, 3))
                break
            if acc == 0 and rej >= messages:
                out.update(supported=False, note="envelopes not supported by this worker "
                                                 f"(rejected={rej}, accepted=0)")
                break
            time.sleep(0.1)
        out["health"] = h
        peak = U.memory_mib(w.proc.pid, "VmHWM") if w.proc else None
        out["peak_rss_mib"] = round(peak, 1) if peak is not None else None
        if not out["complete"] and out["supported"]:
            out["note"] = f"timed out after {args.timeout}s: {h}"
    finally:
        w.stop()
        if not out["complete"] and out["supported"]:
            print(w.log.read_text(errors="replace")[-2000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="", help="use this broker instead of starting one")
    ap.add_argument("--n", type=int, default=50_000, help="generations, one per message")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--envelope-size", type=int, default=100, help="generations per envelope; 0 skips")
    ap.add_argument("--envelope-n", type=int, default=200_000, help="generations sent as envelopes")
    ap.add_argument("--batch-rows", type=int, default=None,
                    help="PHASEMETER_BATCH_ROWS of the worker (default: each worker's own default)")
    ap.add_argument("--batch-seconds", type=float, default=None, help="PHASEMETER_BATCH_SECONDS (same)")
    ap.add_argument("--bare-modes", default="iterate,take", help="bare Faust modes to run")
    ap.add_argument("--skip-aiokafka", action="store_true")
    ap.add_argument("--timeout", type=float, default=300.0, help="per reader")
    ap.add_argument("--json", default="", help="also write the result dict here")
    ap.add_argument("--rounds", type=int, default=1,
                    help="repeat bare Faust (async for) and the worker(s), alternated, this many times on the "
                         "same topic; each round's ratio is reported (the goal holds in every round)")
    ap.add_argument("--envelope-rounds", type=int, default=0,
                    help="then this many more rounds of bare Faust (async for) right before the envelope "
                         "worker(s), so that each envelope ratio has its own reference beside it (bare Faust "
                         "varies by a third from round to round on a 2-core host)")
    ap.add_argument("--compare-python", default="", help="also run the worker of another venv (e.g. the "
                    "previous version) on the same topics, in the same run")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()

    result: dict = {"params": vars(args).copy(), "single": [], "envelope": None}
    with U.broker(args.bootstrap or None) as bootstrap:
        topic = f"bench-events-{uuid.uuid4().hex[:8]}"
        events = U.synthetic_events(args.n)
        msgs = [(e["request_id"].encode(), U.encode_event(e)) for e in events]
        secs = U.prefill(bootstrap, topic, msgs, args.partitions)
        result["prefill"] = {"messages": len(msgs), "seconds": round(secs, 2), "msgs_per_s": len(msgs) / secs,
                             "avg_bytes": sum(len(v) for _, v in msgs) / len(msgs)}
        del events, msgs
        rows = result["single"]
        if not args.skip_aiokafka:
            rows.append(measure_aiokafka(bootstrap, topic, args.n, args.partitions, args.timeout))
        for mode in [m for m in args.bare_modes.split(",") if m]:
            rows.append(measure_bare_faust(bootstrap, topic, args.n, mode, args.partitions, args.batch_rows or 5000,
                                           args.timeout))
        if args.compare_python:
            rows.append(measure_worker(bootstrap, topic, args.n, args.n, args,
                                       "compared worker (1 event/msg)", args.compare_python))
        rows.append(measure_worker(bootstrap, topic, args.n, args.n, args, "phasemeter worker (1 event/msg)"))
        bare = next((r for r in rows if r["reader"].startswith("bare Faust agent (async for")), None) or \
            next((r for r in rows if r["reader"].startswith("bare Faust")), None)
        ceiling = bare["msgs_per_s"] if bare else None
        for r in rows:
            r["ratio_vs_bare_faust"] = U.ratio(r["msgs_per_s"], ceiling)
        result["bare_faust_msgs_per_s"] = ceiling
        result["worker_vs_bare_faust"] = rows[-1]["ratio_vs_bare_faust"]
        result["rounds"] = [{"bare": ceiling, "worker": rows[-1]["msgs_per_s"],
                             "compared": rows[-2]["msgs_per_s"] if args.compare_python else None}]
        for _ in range(args.rounds - 1):
            b = measure_bare_faust(bootstrap, topic, args.n, "iterate", args.partitions, args.batch_rows or 5000,
                                   args.timeout)["msgs_per_s"]
            c = measure_worker(bootstrap, topic, args.n, args.n, args, "compared", args.compare_python)[
                "msgs_per_s"] if args.compare_python else None
            w = measure_worker(bootstrap, topic, args.n, args.n, args, "worker")["msgs_per_s"]
            result["rounds"].append({"bare": b, "worker": w, "compared": c})
        for r in result["rounds"]:
            r["ratio"] = U.ratio(r["worker"], r["bare"])
            r["compared_ratio"] = U.ratio(r["compared"], r["bare"]) if r["compared"] else None

        if args.envelope_size > 0:
            etopic = f"bench-envelopes-{uuid.uuid4().hex[:8]}"
            events = U.synthetic_events(args.envelope_n)
            size = args.envelope_size
            emsgs = [(events[i]["request_id"].encode(), U.envelope(events[i:i + size]))
                     for i in range(0, len(events), size)]
            secs = U.prefill(bootstrap, etopic, emsgs, args.partitions)
            result["envelope_prefill"] = {"messages": len(emsgs), "seconds": round(secs, 2),
                                          "avg_bytes": sum(len(v) for _, v in emsgs) / len(emsgs)}
            del events
            if args.compare_python:
                cmp_env = measure_worker(bootstrap, etopic, args.envelope_n, len(emsgs), args,
                                         f"compared worker (envelopes of {size})", args.compare_python)
                cmp_env["ratio_vs_bare_faust"] = U.ratio(cmp_env["gens_per_s"], ceiling)
                result["compared_envelope"] = cmp_env
            env = measure_worker(bootstrap, etopic, args.envelope_n, len(emsgs), args,
                                 f"phasemeter worker (envelopes of {size})")
            env["ratio_vs_bare_faust"] = U.ratio(env["gens_per_s"], ceiling)
            result["envelope"] = env
            result["envelope_gens_vs_bare_faust_msgs"] = env["ratio_vs_bare_faust"]
            result["envelope_rounds"] = []
            for _ in range(args.envelope_rounds):
                b = measure_bare_faust(bootstrap, topic, args.n, "iterate", args.partitions,
                                       args.batch_rows or 5000, args.timeout)["msgs_per_s"]
                c = measure_worker(bootstrap, etopic, args.envelope_n, len(emsgs), args, "compared",
                                   args.compare_python)["gens_per_s"] if args.compare_python else None
                w = measure_worker(bootstrap, etopic, args.envelope_n, len(emsgs), args, "worker")["gens_per_s"]
                result["envelope_rounds"].append({"bare": b, "worker": w, "compared": c, "ratio": U.ratio(w, b),
                                                  "compared_ratio": U.ratio(c, b) if c else None})

    print(render(result))
    U.write_json(args.json, result)
    if figures(result):
        print(f"result: {R.record('worker', figures(result))}")
    return result


def figures(result: dict) -> list[dict]:
    """The run's figures for BENCHMARKS.md's goals, each beside bare Faust measured in its round."""
    out = []
    rounds = [r for r in result.get("rounds") or [] if r.get("bare")]
    for i, r in enumerate(rounds, 1):
        out.append(R.figure("worker-single", f"one event per message, worker msgs/s, round {i} of {len(rounds)}",
                            r["worker"], "1/s", reference={"what": "bare Faust msgs/s (async for), same round",
                                                           "value": r["bare"]},
                            target="≥ 0.9× bare Faust in every round", met=(r["ratio"] or 0) >= 0.9))
    env_rounds = result.get("envelope_rounds") or []
    env = result.get("envelope") or {}
    if not env_rounds and env.get("gens_per_s") and result.get("bare_faust_msgs_per_s"):
        env_rounds = [{"worker": env["gens_per_s"], "bare": result["bare_faust_msgs_per_s"],
                       "ratio": env.get("ratio_vs_bare_faust")}]
    for i, r in enumerate(env_rounds, 1):
        out.append(R.figure("worker-envelopes", f"envelopes of {result['params']['envelope_size']}, worker "
                            f"generations/s, round {i} of {len(env_rounds)}", r["worker"], "1/s",
                            reference={"what": "bare Faust msgs/s, run just before", "value": r["bare"]},
                            target="≥ 10× bare Faust", met=(r["ratio"] or 0) >= 10))
    return out


def render(result: dict) -> str:
    def f(v, d=0):
        return "n/a" if v is None else (f"{v:,.{d}f}")

    rows = list(result["single"]) + [result[k] for k in ("compared_envelope", "envelope") if result.get(k)]
    lines = ["| reader | Kafka messages | generations | seconds | msgs/s | generations/s "
             "| ratio (gen/s ÷ bare Faust msgs/s) |", "|---|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['reader']} | {r['messages']:,} | {r['generations']:,} | {f(r['seconds'], 2)} "
                     f"| {f(r['msgs_per_s'])} | {f(r['gens_per_s'])} | {f(r.get('ratio_vs_bare_faust'), 3)} |")
    p = result.get("prefill", {})
    lines.append("")
    lines.append(f"Pre-fill (kafka-python, linger 20 ms, acks=1): {p.get('messages', 0):,} messages of "
                 f"~{p.get('avg_bytes', 0):.0f} B in {p.get('seconds', 0)} s ({f(p.get('msgs_per_s'))} msgs/s).")
    lines.append(f"**worker ÷ bare Faust (1 event/msg): {f(result.get('worker_vs_bare_faust'), 3)}** (target ≥ 0.9)")
    if len(result.get("rounds") or []) > 1:
        lines += ["", "| round | bare Faust msgs/s | worker msgs/s | worker ÷ bare | compared worker ÷ bare |",
                  "|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(result["rounds"], 1):
            lines.append(f"| {i} | {f(r['bare'])} | {f(r['worker'])} | {f(r['ratio'], 3)} "
                         f"| {f(r['compared_ratio'], 3)} |")
        lowest = min(r["ratio"] or 0 for r in result["rounds"])
        lines.append(f"\n**lowest round: {lowest:.3f}** (target ≥ 0.9 in every round)")
    env = result.get("envelope")
    if env:
        if not env.get("supported", True):
            lines.append(f"**envelopes not supported by this worker** ({env.get('note')})")
        else:
            ep = result.get("envelope_prefill", {})
            lines.append(f"**worker generations/s with envelopes ÷ bare Faust msgs/s: "
                         f"{f(result.get('envelope_gens_vs_bare_faust_msgs'), 2)}×** (target ≥ 10×; "
                         f"{ep.get('messages', 0):,} envelopes of ~{ep.get('avg_bytes', 0):,.0f} B)")
            if env.get("note"):
                lines.append(f"note: {env['note']}")
    if result.get("envelope_rounds"):
        lines += ["", "| envelope round | bare Faust msgs/s (just before) | worker generations/s | worker ÷ bare "
                  "| compared worker generations/s | compared ÷ bare |", "|---:|---:|---:|---:|---:|---:|"]
        for i, r in enumerate(result["envelope_rounds"], 1):
            lines.append(f"| {i} | {f(r['bare'])} | {f(r['worker'])} | {f(r['ratio'], 2)} | {f(r['compared'])} "
                         f"| {f(r['compared_ratio'], 2)} |")
        ratios = sorted(r["ratio"] or 0 for r in result["envelope_rounds"])
        lines.append(f"\n**envelopes ÷ bare Faust, each round against its own reference: lowest {ratios[0]:.2f}×, "
                     f"median {ratios[len(ratios) // 2]:.2f}×** (target ≥ 10×)")
    for r in rows:
        if r.get("startup_s") is not None:
            lines.append(f"- {r['reader']}: start-up to /health {r['startup_s']} s (excluded); "
                         f"first consumed → all stored {r.get('from_first_consumed_s', 'n/a')} s; "
                         f"peak RSS {r.get('peak_rss_mib', 'n/a')} MiB")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
