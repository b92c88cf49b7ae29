"""Phase-join throughput next to single-event throughput, same worker, same run.

    python bench/bench_join.py [--n 20000] [--rounds 2] [--py-spy [OUT.raw]] [--bootstrap H:P] [--json OUT]
                               [--compare-python OLD/bin/python]

1. Pre-fills two topics with the same N synthetic generations: one as
   generation events (schema v1, one message each), one as phase events
   (docs/phases.md: start, first_token, end, keyed by request_id; a generation
   that failed before its first token has no first_token, ~1 %). The phases
   are in the order of their event time, as gateways send them (--order
   adjacent: each generation's three together, the best case for ingest's
   join within a batch).
2. Runs a real `phasemeter worker` over each, alternating single, join,
   single, join, ... (--rounds of each; fresh group, database, data dir and
   internal .phases/.joined topics every time). The headline is the drain
   rate, N / (first consumed .. all stored, polled on /health): the join's
   first rows reach the store late, so bench_worker's figure (first stored ..
   all stored) is shown too but flatters it. Worker CPU seconds per run too.
3. At the end of each run records /health and /inflight: every generation
   must be stored (accepted == N), none rejected, nothing left in flight.
4. --py-spy [OUT.raw]: one more join run, not counted above, recorded with
   py-spy (kept in OUT.raw if given); prints the share of the worker's main
   thread (its event loop) spent in a few frames.
5. --compare-python OLD/bin/python: each round also runs the two join modes
   with that interpreter's worker (another checkout's venv), right after this
   one's, so a change is read against the old code in the same run.
Without --bootstrap a local broker is started in a tmp dir and stopped at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402

MODES = ("single", "join", "join_env")
ENVELOPE = 100  # phases per message in join_env, as Meter(phase_events=True, envelope_size=100) sends
# Frames whose share of the worker's main thread (the event loop) --py-spy reports, inclusive.
FRAMES = {"Topic.send": "Faust Topic.send (ingest forwarding phases; join publishing + changelog)",
          "Sender._send_produce_req": "aiokafka producer sender", "Fetcher._fetcher": "Faust/aiokafka fetch",
          "Logger.debug": "debug LogRecords (root logger at DEBUG under --loglevel warn)",
          "Join.on_batch": "join agent batch (incl. its sends)", "stream_jobs/join.py": "join.apply (pure join)",
          "_ingest": "ingest agent (incl. forwarding)", "Join.on_tick": "expiry timer",
          "EpollSelector.select": "idle in select"}


def joined(counts: dict) -> int:
    """Generations joined: by the join agent, or in ingest's batch (its note reached the agent)."""
    return counts.get("generations_joined", 0) + counts.get("phases_joined_in_ingest", 0)


OLD = "@old"  # suffix of a mode run by --compare-python's worker


def run_worker(bootstrap: str, topic: str, mode: str, n: int, messages: int, args, spy: str = "") -> dict:
    tmp = Path(tempfile.mkdtemp(prefix=f"pm-bench-join-{mode.replace(OLD, '-old')}-"))
    tag = uuid.uuid4().hex[:8]
    # Abandon after 1 h, not 10 min: t0s are from the pre-fill, and a --big run lasts > 10 min.
    extra = {"PHASEMETER_PHASE_TOPIC": f"{topic}.phases-{tag}", "PHASEMETER_JOINED_TOPIC": f"{topic}.joined-{tag}",
             "PHASEMETER_ABANDON_AFTER_S": "3600"}
    w = U.Worker(bootstrap, topic, tmp, batch_rows=args.batch_rows, batch_seconds=args.batch_seconds,
                 extra_env=extra, python=args.compare_python if mode.endswith(OLD) else sys.executable)
    out, prof = {"mode": mode, "generations": n, "messages": messages}, None
    try:
        w.migrate()
        out["startup_s"] = round(w.start(), 2)
        cpu0, t0 = U.cpu_seconds(w.proc.pid), time.monotonic()
        exe = shutil.which("py-spy", path=f"{Path(sys.executable).parent}:{os.environ.get('PATH', '')}")
        if spy and exe:  # not --nonblocking: its stacks come out torn; pausing 50x/s costs a few %
            spy = str(tmp / "py-spy.raw") if spy == "-" else spy
            prof = subprocess.Popen([exe, "record", "-r", "50", "-f", "raw", "-o", spy, "--pid", str(w.proc.pid)],
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        elif spy:
            out["profile"] = {"error": "py-spy is not installed"}
        out.update(U.watch_stored(w, n, args.timeout))
        if prof:
            prof.send_signal(signal.SIGINT)
            prof.wait(60)
            out["profile"] = profile_shares(spy, 50 * (time.monotonic() - t0))
        cpu1 = U.cpu_seconds(w.proc.pid)
        out["cpu_s"] = round(cpu1 - cpu0, 1) if cpu0 is not None and cpu1 is not None else None
        if out.get("drain_gens_per_s"):
            out["msgs_per_s"] = out["drain_gens_per_s"] * messages / n
        inflight = U.get_json(f"{w.url}/inflight") or {}
        deadline = time.monotonic() + 30  # the notes of rows joined in ingest's batch reach the agent after them
        while not mode.startswith("single") and joined(inflight.get("counts") or {}) < n \
                and time.monotonic() < deadline:
            time.sleep(0.2)
            inflight = U.get_json(f"{w.url}/inflight") or {}
        out["inflight"] = {k: inflight.get(k) for k in ("in_flight", "awaiting_start", "counts")}
        h = out["health"] = w.health() or out["health"]
        out["all_joined"] = (h.get("accepted") == n and h.get("rejected") == 0 and h.get("duplicates") == 0
                             and not inflight.get("in_flight") and inflight.get("awaiting_start") == 0
                             and (mode.startswith("single")
                                  or joined(inflight.get("counts") or {}) == n))
        out["joined_in_batch"] = h.get("joined_in_batch")
    finally:
        U.stop_process(prof, kill=True)
        w.stop()
        if not out.get("complete"):
            print(w.log.read_text(errors="replace")[-2000:], file=sys.stderr)
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def profile_shares(path: str, possible: float) -> dict:
    """py-spy raw output -> {frame: share of the main thread's samples}; "busy" is the main
    thread's non-idle samples over the samples possible in the run (50 per second)."""
    main, hits = 0, dict.fromkeys(FRAMES, 0)
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return {"error": f"no py-spy output at {path} (py-spy needs ptrace rights)"}
    for line in lines:
        stack, _, count = line.rpartition(" ")
        frames = stack.split(";")
        if not frames[0].startswith("_run_module_as_main"):
            continue  # Faust's consumer thread, the executor (split, Sink.write)
        main += int(count)
        for key in FRAMES:
            hits[key] += int(count) if any(key in f for f in frames) else 0
    shares = {FRAMES[k]: round(v / main, 3) for k, v in hits.items()} if main else {}
    return {"main_thread_busy": round((main - hits["EpollSelector.select"]) / possible, 2), **shares}


def summarize(runs: list[dict]) -> dict:
    def med(mode, key):
        return statistics.median([r.get(key) or 0.0 for r in runs if r["mode"] == mode])

    # A round starts at each single run; ratios are against that round's single.
    rounds: list[dict] = []
    for r in runs:
        if r["mode"] == "single":
            rounds.append({})
        rounds[-1][r["mode"]] = r.get("drain_gens_per_s")

    def per_round(mode):
        return [U.ratio(r.get(mode), r.get("single")) for r in rounds if mode in r]

    pairs, env_pairs = per_round("join"), per_round("join_env")
    single, join, env = (med(m, "drain_gens_per_s") for m in MODES)
    modes = list(dict.fromkeys(r["mode"] for r in runs))
    cpu = {m: med(m, "cpu_s") / runs[0]["generations"] * 1e6 for m in modes}
    old = {}
    if any(m.endswith(OLD) for m in modes):
        old = {"old_join_vs_single": U.ratio(med("join" + OLD, "drain_gens_per_s"), single),
               "old_join_env_vs_single": U.ratio(med("join_env" + OLD, "drain_gens_per_s"), single),
               "old_pair_ratios": per_round("join" + OLD), "old_env_pair_ratios": per_round("join_env" + OLD)}
    return {**old, "single_gens_per_s": single, "join_gens_per_s": join, "join_vs_single": U.ratio(join, single),
            "join_env_gens_per_s": env, "join_env_vs_single": U.ratio(env, single), "env_pair_ratios": env_pairs,
            "pair_ratios": pairs, "join_msgs_per_s": med("join", "msgs_per_s"),
            "cpu_us_per_generation": {m: round(v) for m, v in cpu.items()},
            "all_joined": all(r.get("all_joined") for r in runs), "rounds": rounds}


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="", help="use this broker instead of starting one")
    ap.add_argument("--n", type=int, default=20_000, help="generations in each topic")
    ap.add_argument("--rounds", type=int, default=2, help="runs of each mode, alternated")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--order", choices=("time", "adjacent"), default="time",
                    help="phases in the order of their event time, as gateways send them (default), or each "
                         "generation's three together: the best case for ingest's join within a batch")
    ap.add_argument("--batch-rows", type=int, default=5000, help="PHASEMETER_BATCH_ROWS of the worker")
    ap.add_argument("--batch-seconds", type=float, default=1.0)
    ap.add_argument("--timeout", type=float, default=300.0, help="per worker run")
    ap.add_argument("--py-spy", nargs="?", const="-", default="", metavar="OUT.raw",
                    help="profile the last join run (into OUT.raw if given)")
    ap.add_argument("--json", default="", help="also write the result dict here")
    ap.add_argument("--compare-python", default="", metavar="OLD/bin/python",
                    help="also run the join modes with this interpreter's worker, each round")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()

    result: dict = {"params": vars(args).copy(), "runs": []}
    with U.broker(args.bootstrap or None) as bootstrap:
        # Recent t0s: the join's clock is the Kafka timestamp (now), and a start older than
        # PHASEMETER_ABANDON_AFTER_S whose end is still in the backlog would be abandoned.
        events = U.synthetic_events(args.n, start=time.time() - 90, span_s=60)
        single = [(e["request_id"].encode(), U.encode_event(e)) for e in events]
        timed = [(U.phase_time(e, p), p) for e in events for p in U.phase_events(e)]
        if args.order == "time":  # as gateways send them: each phase when it happens
            timed.sort(key=lambda tp: tp[0])
        phases = [(p["request_id"].encode(), U.encode_event(p)) for _, p in timed]
        del timed
        topics, prefill = {}, {}
        # The same phases, ENVELOPE per message and no key (the ingest re-partitions them).
        bodies = [v for _, v in phases]
        enveloped = [(None, b'{"schema_version":2,"kind":"batch","events":[' + b",".join(bodies[i:i + ENVELOPE])
                      + b"]}") for i in range(0, len(bodies), ENVELOPE)]
        for mode, msgs in (("single", single), ("join", phases), ("join_env", enveloped)):
            topics[mode] = f"bench-{mode}-{uuid.uuid4().hex[:8]}"
            secs = U.prefill(bootstrap, topics[mode], msgs, args.partitions)
            prefill[mode] = {"messages": len(msgs), "seconds": round(secs, 2),
                             "avg_bytes": sum(len(v) for _, v in msgs) / len(msgs)}
        result["prefill"] = prefill
        del events, single, phases, bodies, enveloped
        order = [m for m in MODES for m in ([m, m + OLD] if args.compare_python and m != "single" else [m])]
        for mode in [m for _ in range(args.rounds) for m in order] + (["join"] if args.py_spy else []):
            spy = args.py_spy if len(result["runs"]) == len(order) * args.rounds else ""
            base = mode.removesuffix(OLD)  # the old worker reads the same pre-filled topic
            r = run_worker(bootstrap, topics[base], mode, args.n, prefill[base]["messages"], args, spy)
            if spy:
                result["profiled"] = r
            else:
                result["runs"].append(r)
            print(f"[bench_join] {mode}: {r.get('drain_gens_per_s') or 0:,.0f} generations/s", file=sys.stderr)
    result.update(summarize(result["runs"]))
    print(render(result))
    U.write_json(args.json, result)
    if figures(result):
        print(f"result: {R.record('join', figures(result))}")
    return result


def figures(result: dict) -> list[dict]:
    """Each round's join modes beside the single events of the same round."""
    out = []
    rounds = [r for r in result.get("rounds") or [] if r.get("single")]
    for goal, mode, what, target, bound in (
            ("join-envelopes", "join_env", "phases in envelopes", "≥ 0.9× single", 0.9),
            ("join-per-phase", "join", "one message per phase", "≥ 0.5× single", 0.5)):
        for i, r in enumerate(rounds, 1):
            if r.get(mode):
                out.append(R.figure(goal, f"{what}, generations/s, round {i} of {len(rounds)}", r[mode], "1/s",
                                    reference={"what": "the same generations as single events, same round",
                                               "value": r["single"]},
                                    target=target, met=r[mode] / r["single"] >= bound))
    return out


def render(result: dict) -> str:
    def f(v, d=0):
        return "n/a" if v is None else f"{v:,.{d}f}"

    lines = ["| run | mode | Kafka messages | generations | first consumed → all stored s | generations/s | msgs/s "
             "| generations/s (first → last stored) | worker CPU s | accepted | rejected | in flight | joined "
             "| of them in ingest's batch |",
             "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for i, r in enumerate(result["runs"], 1):
        h, inf = r.get("health") or {}, r.get("inflight") or {}
        open_ = sum(c.get("in_flight", 0) for c in inf.get("in_flight") or []) + (inf.get("awaiting_start") or 0)
        lines.append(f"| {i} | {r['mode']} | {r['messages']:,} | {r['generations']:,} "
                     f"| {f(r.get('from_first_consumed_s'), 2)} | {f(r.get('drain_gens_per_s'))} "
                     f"| {f(r.get('msgs_per_s'))} | {f(r.get('gens_per_s'))} | {f(r.get('cpu_s'), 1)} "
                     f"| {h.get('accepted')} | {h.get('rejected')} | {open_} "
                     f"| {joined(inf.get('counts') or {}) if inf.get('counts') else '-'} "
                     f"| {r.get('joined_in_batch') if r.get('joined_in_batch') is not None else '-'} |")
    p, cpu = result.get("prefill", {}), result.get("cpu_us_per_generation", {})
    lines += ["", f"Pre-fill: {p['single']['messages']:,} generation events (~{p['single']['avg_bytes']:.0f} B) and "
              f"{p['join']['messages']:,} phase events (~{p['join']['avg_bytes']:.0f} B) for the same "
              f"{result['params']['n']:,} generations. generations/s = N ÷ (first consumed → all stored).",
              f"**join ÷ single: {f(result.get('join_vs_single'), 3)}** (median {f(result.get('join_gens_per_s'))} "
              f"vs {f(result.get('single_gens_per_s'))} generations/s; per adjacent pair: "
              f"{', '.join(f(x, 3) for x in result.get('pair_ratios', []))}); the join drains "
              f"{f(result.get('join_msgs_per_s'))} phase messages/s; worker CPU per generation "
              f"{cpu.get('join', 'n/a')} µs (join) vs {cpu.get('single', 'n/a')} µs (single).",
              f"**join, phases in envelopes of {ENVELOPE} ÷ single: {f(result.get('join_env_vs_single'), 3)}** "
              f"(median {f(result.get('join_env_gens_per_s'))} generations/s; per round: "
              f"{', '.join(f(x, 3) for x in result.get('env_pair_ratios', []))}; worker CPU per generation "
              f"{cpu.get('join_env', 'n/a')} µs).",
              *([f"With --compare-python's worker ({result['params']['compare_python']}), same rounds: "
                 f"join ÷ single **{f(result.get('old_join_vs_single'), 3)}** (per round "
                 f"{', '.join(f(x, 3) for x in result.get('old_pair_ratios', []))}), envelopes ÷ single "
                 f"**{f(result.get('old_join_env_vs_single'), 3)}** (per round "
                 f"{', '.join(f(x, 3) for x in result.get('old_env_pair_ratios', []))}); worker CPU per "
                 f"generation {cpu.get('join' + OLD, 'n/a')} / {cpu.get('join_env' + OLD, 'n/a')} µs."]
                if "old_join_vs_single" in result else []),
              "Every generation joined and stored, none rejected, nothing in flight: "
              + ("**yes**" if result.get("all_joined") else "**NO** (see the table)")]
    prof = dict((result.get("profiled") or {}).get("profile") or {})
    if prof:
        lines += ["", f"py-spy on one more join run ({f(result['profiled'].get('drain_gens_per_s'))} generations/s, "
                      f"not counted above): worker main thread busy {prof.pop('main_thread_busy', 'n/a')} of the "
                      "time; share of its samples (inclusive):", ""]
        lines += [U.md_table(["frame", "share"], [[k, f"{v:.0%}" if isinstance(v, float) else v]
                                                   for k, v in prof.items()])]
    return "\n".join(lines)


if __name__ == "__main__":
    main()
