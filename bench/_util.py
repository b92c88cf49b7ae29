"""Shared helpers for the benchmark scripts (not part of the installed package).

Machine info, markdown tables, synthetic events in the event-v1 shape, topic
pre-filling, and start/stop of the processes a benchmark owns (a local Kafka
broker, a `phasemeter worker`). Everything started here is stopped by its
context manager, and every wait loop has a deadline.
"""

from __future__ import annotations

import contextlib
import json
import os
import platform
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR = ROOT / "bench"


# -- reporting ----------------------------------------------------------------
def machine_info() -> dict:
    info = {"date": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "nproc": os.cpu_count(), "python": platform.python_version(),
            "platform": platform.platform(terse=True)}
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                info["ram_gib"] = round(int(line.split()[1]) / 1024 / 1024, 1)
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    from phasemeter.kafka_local import KAFKA_VERSION

    info["kafka"] = KAFKA_VERSION
    from importlib.metadata import PackageNotFoundError, version

    for dist in ("chdb", "faust-streaming", "aiokafka", "kafka-python", "clickhouse-connect", "pandas"):
        try:
            info[dist] = version(dist)
        except PackageNotFoundError:
            info[dist] = "n/a"
    return info


def md_table(headers: list[str], rows: list[list]) -> str:
    def cell(v):
        if isinstance(v, float):
            return f"{v:,.3f}" if abs(v) < 10 else f"{v:,.0f}"
        return str(v)
    align = ["---:" if rows and isinstance(rows[0][i], (int, float)) else "---" for i in range(len(headers))]
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(lines)


def ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a and b else None


def write_json(path: str | None, result: dict) -> None:
    if path:
        Path(path).write_text(json.dumps(result, indent=2, default=str))


# -- synthetic events ---------------------------------------------------------
def synthetic_events(n: int, seed: int = 7, start: float | None = None, span_s: float = 3600.0,
                     gateway: str = "bench") -> list[dict]:
    """`n` generation events, exactly the JSON shape of schema/event-v1.schema.json."""
    from phasemeter.demo.synthetic import SyntheticGateway

    start = time.time() - span_s - 60 if start is None else start
    gen = SyntheticGateway(start=start, span_s=span_s, seed=seed)
    tag = uuid.uuid4().hex[:8]
    out = []
    for i in range(n):
        g = gen.make(i / max(1, n))
        out.append({"schema_version": 1, "kind": "generation", "request_id": f"b{tag}-{i}",
                    "model": g.model, "t0": g.t0, "ttft_s": g.ttft_s, "e2e_s": g.e2e_s,
                    "queue_s": g.queue_s, "input_tokens": g.input_tokens, "output_tokens": g.output_tokens,
                    "cached_input_tokens": None, "status": g.status,
                    "finish_reason": "stop" if g.status == "ok" else None,
                    "gateway": gateway, "replica": g.replica})
    return out


def phase_events(event: dict) -> list[dict]:
    """One v1 generation event as the phase events a gateway would send (docs/phases.md):
    start, first_token (none when no token came out), end; unknown optional fields omitted,
    queue_s on first_token if there is one, else on end (as producers/phases.py does)."""
    rid, q = event["request_id"], event.get("queue_s")
    head = {"schema_version": 2, "request_id": rid}
    out = [{**head, "kind": "start", "model": event["model"], "t0": event["t0"],
            "input_tokens": event["input_tokens"], "gateway": event.get("gateway"), "replica": event.get("replica"),
            "cached_input_tokens": event.get("cached_input_tokens")}]
    if event.get("ttft_s") is not None:
        out.append({**head, "kind": "first_token", "ttft_s": event["ttft_s"], "queue_s": q})
        q = None
    out.append({**head, "kind": "end", "output_tokens": event["output_tokens"], "e2e_s": event["e2e_s"],
                "status": event["status"], "finish_reason": event.get("finish_reason"), "queue_s": q})
    return [{k: v for k, v in e.items() if v is not None} for e in out]


def phase_time(event: dict, phase: dict) -> float:
    """When a gateway sends `phase` (one of phase_events(event)): at t0, at the
    first token, at the end."""
    return event["t0"] + {"start": 0.0, "first_token": event.get("ttft_s") or 0.0,
                          "end": event["e2e_s"]}[phase["kind"]]


def encode_event(event: dict) -> bytes:
    return json.dumps(event, separators=(",", ":"), ensure_ascii=False).encode("utf-8")


def envelope(events: list[dict]) -> bytes:
    return encode_event({"schema_version": 1, "kind": "batch", "events": events})


def prefill(bootstrap: str, topic: str, messages: list[tuple[bytes, bytes]], partitions: int = 4,
            timeout_s: float = 300.0) -> float:
    """Create `topic` and write (key, value) pairs with a batching producer; seconds taken."""
    from kafka import KafkaProducer

    from phasemeter.kafka_local import ensure_topics

    ensure_topics(bootstrap, [topic], partitions)
    max_value = max((len(v) for _, v in messages), default=0)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks=1, linger_ms=20,
                             batch_size=max(512 * 1024, max_value + 1024),
                             max_request_size=max(2 * 1024 * 1024, max_value + 65536),
                             enable_idempotence=False)
    t = time.perf_counter()
    try:
        for key, value in messages:
            producer.send(topic, key=key, value=value)
        producer.flush(timeout_s)
    finally:
        producer.close(10)
    return time.perf_counter() - t


# -- processes ----------------------------------------------------------------
@contextlib.contextmanager
def broker(bootstrap: str | None = None):
    """Yield a bootstrap address: the given one, or a fresh local broker in its own tmp dir."""
    if bootstrap:
        yield bootstrap
        return
    from phasemeter.kafka_local import LocalBroker

    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-kafka-"))
    b = LocalBroker(tmp, heap="768m")
    try:
        b.start(log=lambda m: print(m, file=sys.stderr))
        yield b.bootstrap
    finally:
        b.stop()
        shutil.rmtree(tmp, ignore_errors=True)


def stop_process(proc: subprocess.Popen | None, kill: bool = False, wait_s: float = 20.0) -> None:
    """Stop one process we started (by its own pid, never by name)."""
    if proc is None or proc.poll() is not None:
        return
    try:
        proc.send_signal(signal.SIGKILL if kill else signal.SIGTERM)
        proc.wait(wait_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


def get_json(url: str, timeout: float = 2.0) -> dict | None:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


class Worker:
    """One `python -m phasemeter worker` with its own topic, group, store and tmp dir
    (Faust writes its `<group>-data` folder into the cwd, so the cwd is the tmp dir)."""

    def __init__(self, bootstrap: str, topic: str, workdir: Path, batch_rows: int | None = None,
                 batch_seconds: float | None = None, extra_env: dict | None = None,
                 python: str = sys.executable):
        from phasemeter.kafka_local import free_port

        self.python = python  # another venv's interpreter runs another version of the worker
        tag = uuid.uuid4().hex[:10]
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        # Its own SQL port too: beside another worker (a test, a benchmark,
        # the demo), the default one is taken, and its readers would reach
        # the other worker's store.
        self.sql_port = free_port()
        self.env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PHASEMETER_TOPIC": topic,
                    "PHASEMETER_DLQ_TOPIC": f"{topic}.dlq", "PHASEMETER_GROUP_ID": f"bench-{tag}",
                    "PHASEMETER_DATABASE": f"bench_{tag}", "PHASEMETER_DATA_DIR": str(self.workdir / "data"),
                    "PHASEMETER_WEB_PORT": str(self.port), "PHASEMETER_SQL_PORT": str(self.sql_port),
                    **(extra_env or {})}
        # None: the worker's own defaults (another venv's worker: that version's).
        for env, value in (("PHASEMETER_BATCH_ROWS", batch_rows), ("PHASEMETER_BATCH_SECONDS", batch_seconds)):
            if value is not None:
                self.env[env] = str(value)
        self.env.pop("CLICKHOUSE_URL", None)
        self.log = self.workdir / "worker.log"
        self.proc: subprocess.Popen | None = None

    def migrate(self) -> None:
        subprocess.run([self.python, "-m", "phasemeter", "migrate"], env=self.env, cwd=self.workdir,
                       capture_output=True, text=True, check=True, timeout=120)

    def start(self, timeout_s: float = 90.0) -> float:
        """Start and wait for /health; returns seconds from spawn to healthy."""
        t = time.perf_counter()
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([self.python, "-m", "phasemeter", "worker", "--loglevel", "warn"],
                                         env=self.env, cwd=self.workdir, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("worker exited:\n" + self.log.read_text(errors="replace")[-3000:])
            if self.health() is not None:
                return time.perf_counter() - t
            time.sleep(0.1)
        raise RuntimeError("worker did not start:\n" + self.log.read_text(errors="replace")[-3000:])

    def health(self) -> dict | None:
        return get_json(f"{self.url}/health")

    def stop(self) -> None:
        stop_process(self.proc)

    def __enter__(self) -> "Worker":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


def watch_stored(worker: Worker, generations: int, timeout_s: float, poll_s: float = 0.1) -> dict:
    """Poll /health until `generations` rows are stored. `gens_per_s` is taken between two
    store-completion points (first poll with accepted > 0 .. accepted == N), as bench_worker does;
    `drain_gens_per_s` is N over first consumed .. all stored (`from_first_consumed_s`), the fair
    figure when a path's first rows come out late (the phase join). Start-up is in neither."""
    out: dict = {"seconds": None, "gens_per_s": None, "complete": False}
    first_consumed = first_accept = None
    h: dict = {}
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if worker.proc is not None and worker.proc.poll() is not None:
            out["exited"] = worker.proc.returncode  # crashed: say so now, not after the timeout
            break
        h = worker.health() or h
        now = time.time()
        acc = h.get("accepted", 0)
        if first_consumed is None and h.get("consumed", 0) > 0:
            first_consumed = now
        if first_accept is None and acc > 0:
            first_accept = (now, acc)
        if acc >= generations:
            secs, rows = now - first_accept[0], acc - first_accept[1]
            if secs <= 0:  # everything landed within one poll: fall back to first consumed
                secs, rows = now - first_consumed, acc
            out.update(seconds=secs, gens_per_s=rows / secs, complete=True,
                       from_first_consumed_s=round(now - first_consumed, 3),
                       drain_gens_per_s=acc / max(now - first_consumed, poll_s))
            break
        time.sleep(poll_s)
    out["health"] = h
    return out


def cpu_seconds(pid: int) -> float | None:
    """user + system CPU seconds of one process so far (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def memory_mib(pid: int, field: str = "VmRSS") -> float | None:
    """A process's memory from /proc/<pid>/status, MiB: resident now (VmRSS)
    or its peak so far (VmHWM). None once the process is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def run_script(cmd: list[str], timeout_s: float, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run a bench script to completion (bounded); its own process group is killed on timeout."""
    proc = subprocess.Popen(cmd, cwd=cwd or ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the group of the child we started, nothing else
        out, err = proc.communicate()
        err = (err or "") + f"\n[timed out after {timeout_s:.0f}s]"
        return subprocess.CompletedProcess(cmd, -9, out, err)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


def exit_cleanly_on_sigterm() -> None:
    """Turn SIGTERM into KeyboardInterrupt so `finally` blocks stop what we started."""
    def handler(signum, frame):  # noqa: ARG001
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, handler)


@contextlib.contextmanager
def busy_loops(n: int):
    """`n` processes spinning on the CPU for as long as the block runs: the
    competing load that production workers see on shared machines. Each is
    our own child in its own session, stopped by pid on the way out."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
             for _ in range(n)]
    try:
        yield procs
    finally:
        for proc in procs:
            stop_process(proc, kill=True)


class NullProducer:
    """A KafkaProducer stand-in that accepts and forgets, for `Meter(...,
    producer_factory=NullProducer)`: the integration benches time the
    caller's side, not Kafka."""

    def __init__(self, **kwargs):
        pass

    def send(self, topic, key=None, value=None, partition=None):
        return self

    def partitions_for(self, topic):
        return {0, 1, 2, 3}

    def add_callback(self, f):
        f(None)
        return self

    def add_errback(self, f):
        return self

    def flush(self, timeout=None):
        pass

    def close(self, timeout=None):
        pass
