"""Chaos harness: faults x competing CPU load x protocol, with traffic
flowing in every cell, and a source-vs-target check after each.

    make chaos                                   # the whole matrix, table into docs/delivery.md
    python bench/chaos.py --cell kill:1:single --seed 7    # one cell again
    python bench/chaos.py --faults kill,kill_insert --loads 0,1,2 --runs 3

Faults (each cell injects one while a gateway emits through the real Meter):
  kill         worker SIGKILL at random moments 1-4 s apart, restarted 0.3 s later
  kill_insert  worker SIGKILL while /health says an insert is under way
  term         worker SIGTERM (a rolling deploy) while an insert is under way
  broker_kill  broker SIGKILL, restarted 2 s later, twice
  broker_stop  broker frozen with SIGSTOP for --freeze-s (60 s), then SIGCONT
  store_lock   the store held by another process for 10 s while the worker runs
  members      two workers; members join and leave while events flow
  none         no fault (a control)

After each cell (chaos_check.py): every acknowledged generation stored once
or dead-lettered once, no request_id twice, rollup = raw in every cell,
nothing left in flight. A failing cell prints the counts, the missing
partition/offset ranges, each worker's /health and its log tail, and the
command that reruns it. `--negative-control` damages a passing store and
requires the checker to report it.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import chaos_check as C  # noqa: E402

FAULTS = ("kill", "kill_insert", "term", "broker_kill", "broker_stop", "store_lock", "members")
PROTOCOLS = ("single", "phases")
MODELS = ("m-a", "m-b")
# The workers' consumer session: a SIGKILLed member keeps its partitions this long.
SESSION_S = 6.0


class Cell:
    """One run: its own topic, group, database and store(s); the shared broker."""

    def __init__(self, broker, fault: str, load: int, protocol: str, seed: int, events: int,
                 workdir: Path, python: str, kills: int, freeze_s: float, log, session_s: float = SESSION_S,
                 batch_bytes: int | None = None):
        self.broker, self.fault, self.load, self.protocol = broker, fault, load, protocol
        self.session_s = session_s
        # Small batches cut each of the gateway's bursts into several, so the
        # worker decodes a batch while the one before is written (its
        # lookahead), and faults find it there. None: the worker's default.
        self.batch_bytes = batch_bytes
        self.seed, self.events, self.kills, self.freeze_s, self.log = seed, events, kills, freeze_s, log
        self.rng = random.Random(seed)
        self.workdir, self.python = workdir, python
        # The cell's topic, group, ids and database: cells that differ only in
        # their batch size must not share them (test_chaos runs both in one process).
        self.tag = (f"c{seed}-{fault}-{load}-{protocol}" + (f"-b{batch_bytes}" if batch_bytes else "")).replace("_", "")
        self.topic = f"chaos-{self.tag}-{os.getpid()}"
        self.group = f"grp-{self.tag}-{os.getpid()}"
        self.workers: list[U.Worker] = []
        self.retired: list[U.Worker] = []
        self.injected = 0
        self.notes: list[str] = []
        self.seen: dict[int, dict[str, int]] = {}
        # The gateway's bursts, and for `members` the hand-shake that keeps events flowing through each step.
        self.chunk = 2000 if protocol == "single" else 500
        self.chunks = -(-events // self.chunk)
        self.flow = threading.Condition()
        self.sent = self.steps_done = 0

    # -- processes ------------------------------------------------------------
    def new_worker(self, name: str) -> U.Worker:
        w = U.Worker(self.broker.bootstrap, self.topic, self.workdir / name, batch_seconds=0.5,
                     extra_env={"PHASEMETER_SESSION_TIMEOUT_S": f"{self.session_s:g}", "PHASEMETER_DATABASE": "chaos",
                                "PHASEMETER_GROUP_ID": self.group,
                                # An SLO declared, so its per-minute counts face the same crashes.
                                "PHASEMETER_SLOS": "example",
                                **({"PHASEMETER_BATCH_BYTES": str(self.batch_bytes)} if self.batch_bytes else {})},
                     python=self.python)
        w.migrate()
        return w

    def spawn(self, w: U.Worker, wait: bool = True) -> None:
        with open(w.log, "ab") as log:
            w.proc = subprocess.Popen([w.python, "-m", "phasemeter", "worker", "--loglevel", "warn"],
                                      env=w.env, cwd=w.workdir, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True)
        if wait:
            self.wait_healthy(w)

    def wait_healthy(self, w: U.Worker, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if w.proc.poll() is not None:
                raise RuntimeError(f"worker exited with {w.proc.returncode}:\n" + tail(w))
            if w.health() is not None:
                return
            time.sleep(0.1)
        raise RuntimeError("worker did not answer /health:\n" + tail(w))

    def signal_worker(self, w: U.Worker, sig: int) -> None:
        if w.proc and w.proc.poll() is None:
            os.kill(w.proc.pid, sig)
            self.injected += 1

    COUNTERS = ("skipped_redelivered", "rollup_cells_checked", "rollup_cells_repaired", "gap_seeks",
                "stale_skipped", "duplicates", "rejoined_dropped", "store_retries",
                # batches decoded while the one before was written: the ingest
                # agent's lookahead, which a stop or a kill may find in hand
                "batches_decoded_ahead")

    def watch(self, stop: threading.Event) -> None:
        """The last counters seen of every worker incarnation (a restart
        starts at 0; asking just before a kill would delay the kill)."""
        while not stop.is_set():
            for w in list(self.workers):
                proc = w.proc
                h = U.get_json(f"{w.url}/health", timeout=2.0) if proc and proc.poll() is None else None
                if h:
                    self.seen[proc.pid] = {k: h.get(k) or 0 for k in self.COUNTERS}
            stop.wait(0.5)

    @property
    def totals(self) -> dict[str, int]:
        return {k: sum(c[k] for c in self.seen.values()) for k in self.COUNTERS}

    def wait_writing(self, w: U.Worker, timeout_s: float = 20.0) -> bool:
        """Until /health says an insert is under way (polled every 10 ms),
        then a random part of a typical insert's duration more, so the
        signal lands anywhere in it: before, during or just after the commit."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            h = U.get_json(f"{w.url}/health", timeout=1.0) or {}
            if h.get("writing_since"):
                typical = (h.get("last_batch") or {}).get("write_s") or 0.05
                time.sleep(self.rng.uniform(0.0, 1.2 * typical))
                return True
            time.sleep(0.01)
        return False

    # -- the gateway ----------------------------------------------------------
    def gateway(self, stats: dict) -> None:
        from phasemeter.producers import Meter

        rng = random.Random(self.seed + 1)
        meter = Meter(self.broker.bootstrap, self.topic, gateway="chaos", queue_size=20_000)
        chunk = self.chunk
        for n, start in enumerate(range(0, self.events, chunk)):
            self.pace(n)
            # Pace on the emitter's queue, so a starved CPU slows the gateway
            # instead of making it drop (the cell then tests every event).
            deadline = time.monotonic() + 120
            while meter.stats().queued > chunk and time.monotonic() < deadline:
                time.sleep(0.05)
            ids = [f"{self.tag}-{i}" for i in range(start, min(start + chunk, self.events))]
            shapes = [(MODELS[i % 2], rng.choice((100, 900, 3000, 12000, 40000)), rng.randint(1, 400),
                       time.time() - rng.uniform(0, 180), rng.uniform(0.05, 3.0)) for i in range(len(ids))]
            if self.protocol == "single":
                for rid, (model, n_in, n_out, t0, ttft) in zip(ids, shapes):
                    meter.record(model=model, input_tokens=n_in, output_tokens=n_out, t0=t0, ttft_s=ttft,
                                 e2e_s=ttft + n_out * 0.02, request_id=rid)
            else:  # all start, then first tokens, then ends: hundreds in flight at once
                for rid, (model, n_in, _, t0, _) in zip(ids, shapes):
                    meter.start(model=model, input_tokens=n_in, t0=t0, request_id=rid)
                for rid, (_, _, _, _, ttft) in zip(ids, shapes):
                    meter.first_token(rid, ttft_s=ttft)
                for rid, (_, _, n_out, _, ttft) in zip(ids, shapes):
                    meter.end(rid, output_tokens=n_out, e2e_s=ttft + n_out * 0.02)
            with self.flow:
                self.sent = n + 1
                self.flow.notify_all()
            time.sleep(0.5)
        meter.flush(120)
        stats.update(meter.stats().as_dict())
        meter.close(10)

    # `members` in steps (b joins, a leaves, c joins, b leaves), with the traffic in STEPS + 2 parts: step j
    # begins once part j is sent. The gateway slows to a burst every 2.5 s while a step is due but not done, and
    # holds the last part until every step is done, so that each step meets events flowing and some follow it.
    STEPS = 4

    def milestone(self, j: int) -> int:
        """Bursts sent before step j begins; milestone(STEPS) begins the last part."""
        return (j + 1) * self.chunks // (self.STEPS + 2)

    def pace(self, n: int) -> None:
        if self.fault != "members":
            return
        due = sum(1 for j in range(1, self.STEPS) if self.milestone(j) <= n)
        with self.flow:
            if n >= self.milestone(self.STEPS):
                if not self.flow.wait_for(lambda: self.steps_done >= self.STEPS, 180):
                    self.notes.append(f"gateway: the last part went before every member step was done ({n})")
            elif due:
                self.flow.wait_for(lambda: self.steps_done >= due, 2.0)

    def step(self, j: int, rng: random.Random, act) -> None:
        with self.flow:
            self.flow.wait_for(lambda: self.sent >= self.milestone(j), 180)
        time.sleep(rng.uniform(0.0, 1.0))
        act()
        with self.flow:
            self.steps_done += 1
            self.flow.notify_all()

    # -- faults ---------------------------------------------------------------
    def inject(self, done: threading.Event) -> None:
        f, rng, w = self.fault, self.rng, self.workers[0] if self.workers else None
        if f == "kill":
            for _ in range(self.kills):
                time.sleep(rng.uniform(1.0, 4.0))
                self.signal_worker(w, signal.SIGKILL)
                w.proc.wait()
                time.sleep(0.3)
                self.spawn(w, wait=False)
            self.wait_healthy(w)
        elif f in ("kill_insert", "term"):
            for _ in range(self.kills):
                self.wait_healthy(w)
                time.sleep(rng.uniform(0.0, 1.0))
                if not self.wait_writing(w):
                    if done.is_set():
                        break
                    continue
                if f == "kill_insert":
                    self.signal_worker(w, signal.SIGKILL)
                    w.proc.wait()
                else:
                    self.signal_worker(w, signal.SIGTERM)
                    try:
                        w.proc.wait(60)
                    except subprocess.TimeoutExpired:
                        self.notes.append("a SIGTERM took over 60 s; SIGKILLed")
                        w.proc.kill()
                        w.proc.wait()
                time.sleep(0.3)
                self.spawn(w)
        elif f == "broker_kill":
            for _ in range(2):
                time.sleep(rng.uniform(3.0, 6.0))
                self.broker.proc.kill()
                self.broker.proc.wait()
                self.injected += 1
                time.sleep(2.0)
                self.broker.start(log=lambda m: None)
        elif f == "broker_stop":
            time.sleep(rng.uniform(2.0, 4.0))
            os.kill(self.broker.proc.pid, signal.SIGSTOP)
            self.injected += 1
            try:
                time.sleep(self.freeze_s)
            finally:
                os.kill(self.broker.proc.pid, signal.SIGCONT)
        elif f == "store_lock":
            time.sleep(rng.uniform(2.0, 4.0))
            self.signal_worker(w, signal.SIGKILL)  # chDB: the lock is per process
            w.proc.wait()
            holder = subprocess.Popen([self.python, "-c", _HOLD, f"chdb://{w.workdir / 'data' / 'store'}", "10"])
            time.sleep(1.0)
            self.spawn(w, wait=False)  # starts paused: the store is held
            holder.wait(60)
            self.wait_healthy(w)
        elif f == "members":
            # Each member has its own embedded store (a chDB path opens in one
            # process); a joining member starts where the group committed.
            leaving = w
            for k, name in enumerate(("w-b", "w-c")):  # b joins, a leaves; c joins, b leaves
                joining = self.new_worker(name)
                self.step(2 * k, rng, lambda: self.join(joining))
                self.step(2 * k + 1, rng, lambda: self.leave(leaving))
                leaving = joining

    def join(self, w: U.Worker) -> None:
        self.spawn(w)
        self.workers.append(w)
        self.injected += 1

    def leave(self, w: U.Worker) -> None:
        self.signal_worker(w, signal.SIGTERM)
        w.proc.wait(60)
        self.workers.remove(w)
        self.retired.append(w)
        t = C.read_target(f"chdb://{w.workdir / 'data' / 'store'}", "chaos")
        w.final_count = sum(t["ids"].values()) + len(t["dead"])

    # -- the run --------------------------------------------------------------
    def run(self) -> dict:
        try:
            return self._run()
        finally:  # also on Ctrl-C or a failed step: nothing of ours keeps running
            for w in self.workers + self.retired:
                U.stop_process(w.proc, kill=True)

    def _run(self) -> dict:
        t_start = time.time()
        from phasemeter.kafka_local import ensure_topics

        ensure_topics(self.broker.bootstrap, [self.topic], 4)
        first = self.new_worker("w-a")
        self.workers.append(first)
        stats: dict = {}
        watching = threading.Event()
        threading.Thread(target=self.watch, args=(watching,), daemon=True).start()
        with U.busy_loops(self.load):
            self.spawn(first)
            done = threading.Event()
            gw = threading.Thread(target=self.gateway, args=(stats,), daemon=True)
            gw.start()
            fault_error: list = []

            def faults():
                try:
                    self.inject(done)
                except Exception as exc:  # reported with the cell, never swallowed
                    fault_error.append(repr(exc))
            injector = threading.Thread(target=faults, daemon=True)
            injector.start()
            gw.join()
            done.set()
            injector.join(600)
            for w in self.workers:
                if w.proc.poll() is not None:
                    self.spawn(w)
            source = C.read_source(self.broker.bootstrap, self.topic)
            drained = self.drain(len(source["expected"]) if self.protocol == "phases" else source["generation_records"])
        watching.set()
        group = self.group_members()
        healths = {w.workdir.name: w.health() for w in self.workers}
        for w in self.workers:
            if healths[w.workdir.name]:
                self.seen[w.proc.pid] = {k: healths[w.workdir.name].get(k) or 0 for k in self.COUNTERS}
        inflight = [self.in_flight(w) for w in self.workers]
        for w in self.workers:
            w.stop()
        targets = [C.read_target(f"chdb://{w.workdir / 'data' / 'store'}", "chaos")
                   for w in self.workers + self.retired]
        verdict = C.compare(source, targets, self.protocol)
        left = sum(n for n in inflight if n)
        verdict.update(inflight_left=left, injected=self.injected, drained=drained, emitter=stats,
                       worker_counts=self.totals,
                       seconds=round(time.time() - t_start, 1), notes=self.notes + fault_error)
        verdict["ok"] = verdict["ok"] and left == 0 and not fault_error
        if left:  # which generations, and each one's records in every topic of the join
            try:
                verdict["join_story"] = C.join_story(self.broker.bootstrap, self.topic, self.group)
            except Exception as exc:  # a report, not a verdict
                verdict["join_story"] = {"error": repr(exc)}
        verdict["health"] = healths
        verdict["group"] = group
        verdict["logs"] = {w.workdir.name: tail(w) for w in self.workers + self.retired}
        verdict["stores"] = [str(w.workdir / "data" / "store") for w in self.workers + self.retired]
        return verdict

    def drain(self, expected: int, stall_s: float = 90.0) -> bool:
        """Until the stores hold `expected` generations + dead letters and stay there."""
        from clickhouse_connect.driver.exceptions import Error as ClickHouseError

        from phasemeter.query.runner import worker_runner
        from phasemeter.settings import Settings

        last, since = -1, time.monotonic()
        while time.monotonic() - since < stall_s:
            total = 0
            for w in self.workers:
                try:  # through the worker's SQL interface; a frozen or restarting worker counts next round
                    runner = worker_runner(Settings.from_env(w.env), timeout_s=10)
                    try:
                        df = runner.df("count_generations", {})
                    finally:
                        runner.close()
                    total += int(df["n"].iloc[0]) + int(df["dead"].iloc[0])
                except (RuntimeError, ClickHouseError):
                    pass
            total += sum(w.final_count for w in self.retired)
            if total != last:
                last, since = total, time.monotonic()
            if total >= expected and self.settled():
                time.sleep(3)  # a late duplicate, if any, lands now
                if self.settled():  # and no batch began meanwhile
                    return True
            time.sleep(0.5)
        return False

    def group_members(self) -> dict:
        """The workers' consumer group as the broker sees it once drained:
        its state and each member's partitions. A report that names partitions
        no live worker read tells a member still holding them (one the broker
        has not dropped) from a worker that owns them and never fetched them."""
        from kafka import KafkaAdminClient

        name = self.group
        try:
            admin = KafkaAdminClient(bootstrap_servers=self.broker.bootstrap, request_timeout_ms=10_000)
            try:
                g = admin.describe_groups([name])[name]
            finally:
                admin.close()
        except Exception as exc:  # a report, not a verdict: say why it is missing
            return {"error": repr(exc)}
        return {"state": g["group_state"],
                "members": [{"member": m["member_id"][-12:], "host": m["client_host"],
                             "assignment": _partitions(m["member_assignment"])} for m in g["members"]]}

    def settled(self) -> bool:
        """Every worker ready, no batch being written, and no generation open in its join. A worker restarted
        after the last fault finds every row already stored, so the count is reached before it has re-read its
        records: the join holds their phases until that batch sends its notes, after the write."""
        hs = [w.health() or {} for w in self.workers]
        if not all(h.get("ready") and not h.get("writing_since") for h in hs):
            return False
        return all(self.in_flight(w) == 0 for w in self.workers)

    @staticmethod
    def in_flight(w: U.Worker) -> int | None:
        """Generations open in a worker's join (its /inflight), None when it does not answer."""
        v = U.get_json(f"{w.url}/inflight")
        return sum(c["in_flight"] for c in v["in_flight"]) if v else None


# Holds a chDB store open (its process lock) for N seconds, then exits.
_HOLD = ("import sys, time, clickhouse_connect\n"
         "c = clickhouse_connect.get_client(dsn=sys.argv[1]); time.sleep(float(sys.argv[2])); c.close()")


def _partitions(assignment) -> dict:
    """{topic: [partitions]} of a member's assignment as kafka-python decodes
    it ({} while the group rebalances: the broker then holds none)."""
    if not isinstance(assignment, dict):
        return {}
    return {a["topic"]: a["partitions"] for a in assignment.get("assigned_partitions") or []}


def tail(w: U.Worker, n: int = 2500) -> str:
    try:
        return w.log.read_text(errors="replace")[-n:]
    except OSError:
        return ""


def rerun_command(fault: str, load: int, protocol: str, seed: int, events: int, kills: int,
                  session_s: float = SESSION_S, batch_bytes: int | None = None) -> str:
    return (f"python bench/chaos.py --cell {fault}:{load}:{protocol} --seed {seed} --events {events} "
            f"--kills {kills}" + (f" --session-s {session_s:g}" if session_s != SESSION_S else "")
            + (f" --batch-bytes {batch_bytes}" if batch_bytes else ""))


def report_failure(cell: str, v: dict, command: str) -> str:
    lines = [f"FAILED {cell}: produced {v['produced']} (distinct {v['distinct']}), stored {v['stored']}, "
             f"dead-lettered {v['dead']} {v['dead_reasons']}, lost {v['lost']}, duplicated {v['duplicated']}, "
             f"unexpected {v['unexpected']}, rollup mismatches {v['rollup_mismatches']} "
             f"(raw {v['raw_n']} vs rollup {v['rollup_n']}), in flight {v['inflight_left']}, "
             f"drained {v['drained']}, emitter {v['emitter']}",
             f"  missing offsets per partition: {v['missing_offsets']}",
             f"  duplicated ids: {v['duplicated_ids']}", f"  rollup cells: {v['rollup_mismatch_cells']}",
             f"  SLO count mismatches {v.get('slo_mismatches')} of {v.get('slo_declared')} declared SLO(s): "
             f"{v.get('slo_mismatch_cells')}",
             f"  notes: {v['notes']}", f"  rerun: {command}"]
    for name, h in v["health"].items():
        lines.append(f"  /health {name}: {json.dumps(h)}")
    if "join_story" in v:
        lines.append(f"  generations open in the join, by its changelog: {json.dumps(v['join_story'], default=str)}")
    lines.append(f"  group as the broker holds it: {json.dumps(v.get('group'), default=str)}")
    for name, text in v["logs"].items():
        lines.append(f"  --- log tail {name} ---\n{text}")
    return "\n".join(lines)


def run_one(broker, fault, load, protocol, seed, args, workroot: Path) -> dict:
    events = args.events or (40_000 if protocol == "single" else 10_000)
    cell = Cell(broker, fault, load, protocol, seed, events, workroot / f"{fault}-{load}-{protocol}-{seed}",
                args.python, args.kills, args.freeze_s, print, session_s=args.session_s, batch_bytes=args.batch_bytes)
    v = cell.run()
    v.update(fault=fault, load=load, protocol=protocol, seed=seed, events=events, topic=cell.topic,
             matrix_args=" ".join(a for a in sys.argv[1:] if a != "--write-docs"),
             command=rerun_command(fault, load, protocol, seed, events, args.kills, args.session_s, args.batch_bytes))
    return v


def matrix_table(results: list[dict]) -> str:
    groups: dict = {}
    for r in results:
        groups.setdefault((r["fault"], r["load"], r["protocol"]), []).append(r)
    rows = []
    for (fault, load, protocol), rs in groups.items():
        rows.append([fault, load, protocol, len(rs), sum(r["injected"] for r in rs), sum(r["produced"] for r in rs),
                     sum(r["lost"] for r in rs), sum(r["duplicated"] for r in rs),
                     sum(r["rollup_mismatches"] for r in rs), sum(r["inflight_left"] for r in rs),
                     "pass" if all(r["ok"] for r in rs) else "FAIL"])
    return U.md_table(["fault", "busy loops", "protocol", "runs", "faults injected", "generations", "lost",
                       "duplicated", "rollup mismatches", "left in flight", "result"], rows)


def write_docs(table: str, command: str, info: dict, extra: str = "") -> None:
    path = U.ROOT / "docs" / "delivery.md"
    text = path.read_text()
    begin, end = "<!-- chaos-results -->", "<!-- /chaos-results -->"
    body = (f"{begin}\nRun on {info['date']}, {info['nproc']} cores, Kafka {info['kafka']}, chDB {info['chdb']}, "
            f"with `{command}`:\n\n{table}\n{extra}{end}")
    if begin in text:
        text = text[:text.index(begin)] + body + text[text.index(end) + len(end):]
    else:
        text = text.rstrip() + "\n\n" + body + "\n"
    path.write_text(text)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cell", help="FAULT:LOAD:PROTOCOL, one cell (e.g. kill:1:single)")
    p.add_argument("--faults", default=",".join(FAULTS))
    p.add_argument("--loads", default="0,1,2")
    p.add_argument("--protocols", default=",".join(PROTOCOLS))
    p.add_argument("--runs", type=int, default=1, help="runs per cell (seeds seed, seed+1, ...)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--events", type=int, default=0, help="generations per cell (default 40,000 single, 10,000 phases)")
    p.add_argument("--kills", type=int, default=15, help="worker kills/terms per cell")
    p.add_argument("--freeze-s", type=float, default=60.0, help="broker_stop: seconds frozen")
    p.add_argument("--session-s", type=float, default=SESSION_S,
                   help="the workers' consumer session timeout (a killed member keeps its partitions this long)")
    p.add_argument("--batch-bytes", type=int, default=None,
                   help="the workers' PHASEMETER_BATCH_BYTES (small: the next batch is decoded while one is written)")
    p.add_argument("--python", default=sys.executable, help="interpreter whose phasemeter runs the worker")
    p.add_argument("--negative-control", action="store_true", help="also damage one passing store and re-check")
    p.add_argument("--write-docs", action="store_true", help="write the results table into docs/delivery.md")
    p.add_argument("--json", help="write every cell's result here")
    p.add_argument("--table-from", help="only render the table of a --json file (with --write-docs: into the docs)")
    args = p.parse_args(argv)
    U.exit_cleanly_on_sigterm()
    if args.table_from:
        results = json.loads(Path(args.table_from).read_text())
        table = matrix_table(results)
        print(table)
        if args.write_docs:
            command = "python bench/chaos.py " + results[0].get("matrix_args", "")
            write_docs(table, command.strip(), U.machine_info())
        return 0 if all(r["ok"] for r in results) else 1
    if args.cell:
        fault, load, protocol = args.cell.split(":")
        cells = [(fault, int(load), protocol)]
    else:
        cells = [(f, int(ld), pr) for f in args.faults.split(",") for ld in args.loads.split(",")
                 for pr in args.protocols.split(",")]
    seed0 = args.seed if args.seed is not None else random.randrange(1, 10_000)
    workroot = Path(tempfile.mkdtemp(prefix="pm-chaos-"))
    from phasemeter.kafka_local import LocalBroker

    broker = LocalBroker(workroot / "kafka", heap="768m").start(log=lambda m: None)
    results, failed = [], 0
    try:
        for i, (fault, load, protocol) in enumerate(cells):
            for run in range(args.runs):
                seed = seed0 + i * 100 + run
                v = run_one(broker, fault, load, protocol, seed, args, workroot)
                results.append(v)
                status = "ok" if v["ok"] else "FAILED"
                print(f"{fault:12s} load={load} {protocol:7s} seed={seed}: {status} produced={v['produced']} "
                      f"stored={v['stored']} dead={v['dead']} lost={v['lost']} dup={v['duplicated']} "
                      f"rollup_mismatch={v['rollup_mismatches']} inflight={v['inflight_left']} "
                      f"faults={v['injected']} {v['seconds']}s "
                      f"repaired_cells={v['worker_counts'].get('rollup_cells_repaired', 0)} "
                      f"gap_seeks={v['worker_counts'].get('gap_seeks', 0)} "
                      f"reread_skipped={v['worker_counts'].get('skipped_redelivered', 0)} "
                      f"decoded_ahead={v['worker_counts'].get('batches_decoded_ahead', 0)}", flush=True)
                if not v["ok"]:
                    failed += 1
                    print(report_failure(f"{fault}:{load}:{protocol}", v, v["command"]), flush=True)
                if args.json:  # after every cell: a long matrix cut short keeps what it ran
                    Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        extra = ""
        if args.negative_control:
            passing = next((r for r in results if r["ok"]), None)
            if passing is None:
                print("negative control skipped: no passing store to damage")
            else:
                nc = negative_control(broker, passing)
                extra = (f"\nNegative control: one row deleted and one duplicated in a passing store "
                         f"({passing['fault']}:{passing['load']}:{passing['protocol']}); the checker reported "
                         f"lost={nc['lost']}, duplicated={nc['duplicated']}, rollup mismatches="
                         f"{nc['rollup_mismatches']}: {'detected' if not nc['ok'] else 'NOT DETECTED'}.\n")
                print(extra.strip())
                failed += int(nc["ok"])
        table = matrix_table(results)
        print(table)
        if args.json:
            Path(args.json).write_text(json.dumps(results, indent=1, default=str))
        if args.write_docs:
            command = "python bench/chaos.py " + " ".join(argv if argv is not None else sys.argv[1:])
            write_docs(table, command.replace(" --write-docs", ""), U.machine_info(), extra)
    finally:
        broker.stop()
    print(f"{len(results) - failed} passed, {failed} failed")
    return 1 if failed else 0


def negative_control(broker, passing: dict) -> dict:
    """Damage a store that passed, then require the checker to fail it."""
    store = passing["stores"][0]
    C.damage(f"chdb://{store}", "chaos")
    source = C.read_source(broker.bootstrap, passing["topic"])
    targets = [C.read_target(f"chdb://{s}", "chaos") for s in passing["stores"]]
    return C.compare(source, targets, passing["protocol"])


if __name__ == "__main__":
    sys.exit(main())
