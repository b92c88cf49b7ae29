"""Session fixtures that start REAL services: an Apache Kafka broker started
by the same code as `phasemeter demo` (phasemeter.kafka_local), and worker
processes running `phasemeter worker` against a per-test chDB store.

Every test gets its own topic, consumer group and data dir.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, settings

# Fixes the run's "today" in the environment before xdist starts its test
# processes, so they and every subprocess they start place data on the same day.
from clock import TODAY  # noqa: F401

# Importing litellm fetches its model price list from GitHub unless told to
# use the copy it ships: the tests stay offline and do not wait on the network.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

# Property tests judge answers, never time: hypothesis's 200 ms deadline per
# example and its too-slow health check failed runs beside the reliability
# tests' busy loops (a 268 ms example). Speed is the benchmarks' business.
settings.register_profile("phasemeter", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("phasemeter")


def pytest_collection_modifyitems(config, items):
    """Files that hold slow tests first, the most items first (`make test`
    runs with --dist loadfile --no-loadscope-reorder, so this order is the
    order the test processes take whole files in). xdist's own order is
    by item count alone, which put the few-test, minute-long reliability
    files last: one process then ran one alone while the other sat idle.
    Longest first and the many short files last keeps both busy to the end.

    The files with a test that holds the busy loops (one test at a time, see
    `busy_loops`) go first and third, the one with fewer items first: xdist's
    load-file scheduling hands the first file to one process, the second to
    the other, and the third to the process whose first file has two items
    or fewer left (xdist/scheduler/loadscope.py, `schedule`). So one process
    runs them in turn while the other works; as the second and fifth files,
    the phase-join kill test sat 87 s waiting for the member hand-off's loops."""
    count = Counter(item.path for item in items)
    slow = {item.path for item in items if item.get_closest_marker("slow")}
    files = sorted(count, key=lambda path: (path not in slow, -count[path]))
    busy = sorted({item.path for item in items if "busy_loops" in item.fixturenames}, key=count.__getitem__)
    rest = [path for path in files if path not in busy]
    order = []
    for i, path in enumerate(busy):  # busy, other, busy, ..., busy, then the rest
        order.append(path)
        if i < len(busy) - 1 and rest:
            order.append(rest.pop(0))
    order += rest
    rank = {path: i for i, path in enumerate(order)}
    items.sort(key=lambda item: rank[item.path])  # stable: a file's own order is kept


def wait_for(predicate, timeout_s: float, what: str, explain=None):
    """Poll until `predicate()` is truthy; return its value. On a timeout,
    `explain()` (e.g. WorkerProc.diagnose) says what a person needs to debug it."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout_s:.0f}s waiting for {what}"
                         + (f"\n{explain()}" if explain else ""))


@pytest.fixture
def busy_loops(tmp_path_factory):
    """Two processes spinning on the 2 CPUs for the whole test: production
    workers share CPUs, and a reliability test that passes only on an idle
    machine hides a real failure mode.

    One test at a time holds them, across the suite's test processes (a file
    lock in the run's shared temporary folder): two such tests at once stood
    four loops beside each other, and each ran twice as long (a member
    hand-off of 102 s against 52 s, the phase-join kill 45 s against 19 s)."""
    import fcntl

    base = tmp_path_factory.getbasetemp()
    shared = base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base  # popen-gwN/.. under xdist
    with open(shared / "busy-loops.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], start_new_session=True)
                 for _ in range(2)]
        try:
            yield procs
        finally:
            for proc in procs:
                proc.kill()
                proc.wait()


@pytest.fixture(scope="session")
def kafka_broker(tmp_path_factory):
    """The session's LocalBroker, or None when KAFKA_BOOTSTRAP_SERVERS names a cluster."""
    if os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield None
        return
    from phasemeter.kafka_local import LocalBroker

    broker = LocalBroker(tmp_path_factory.mktemp("kafka")).start(log=lambda m: None)
    yield broker
    broker.stop()


@pytest.fixture(scope="session")
def kafka_bootstrap(kafka_broker):
    return kafka_broker.bootstrap if kafka_broker else os.environ["KAFKA_BOOTSTRAP_SERVERS"]


class WorkerProc:
    """One `phasemeter worker` process with its own settings."""

    def __init__(self, env: dict, data_dir: Path, port: int):
        from ports import free_port

        # Every test worker serves its SQL interface on a port of its own: two
        # at once on the default one would answer each other's readers.
        env = env if env.get("PHASEMETER_SQL_PORT") else {**env, "PHASEMETER_SQL_PORT": str(free_port())}
        self.env, self.data_dir, self.port = env, data_dir, port
        self.url = f"http://127.0.0.1:{port}"
        self.sql_url = f"http://127.0.0.1:{env['PHASEMETER_SQL_PORT']}"  # its SQL interface: what --via takes
        self.proc: subprocess.Popen | None = None
        self.log = data_dir / "worker.log"
        self.restarts = 0

    def run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "phasemeter", *args], env=self.env,
                              capture_output=True, text=True, check=check, timeout=120)

    def migrate(self) -> "WorkerProc":
        """Its store as `phasemeter migrate` leaves it (stores.migrated: a copy
        of one the command made in this test process)."""
        from stores import migrated

        migrated(self.env)
        return self

    def start(self, timeout_s: float = 90) -> "WorkerProc":
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "phasemeter", "worker", "--loglevel", "warn"],
                                         env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                         start_new_session=True)
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text()[-3000:]
            if self.health() is not None and self.sql_up():
                return self
            time.sleep(0.2)
        raise AssertionError("worker did not start:\n" + self.log.read_text()[-3000:])

    def sql_up(self) -> bool:
        """The worker's SQL interface answers (its listener starts with the
        worker's tasks, a moment after /health): readers go there. A worker
        over a ClickHouse server serves none."""
        if self.env.get("CLICKHOUSE_URL", "").startswith("http"):
            return True
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.env['PHASEMETER_SQL_PORT']}/ping", timeout=2) as r:
                return r.read() == b"Ok.\n"
        except OSError:
            return False

    def restart_after_exit_75(self) -> bool:
        """What the worker's supervisor does (systemd Restart=on-failure, a
        Kubernetes pod): a worker that exited with 75 (its table recovery
        stopped making progress inside Faust; docs/delivery.md) is started
        again. Any other exit fails the test. -> True when it restarted."""
        from phasemeter.stream_jobs.recovery_watch import EXIT_RECOVERY_STALLED

        rc = self.proc.poll() if self.proc else None
        if rc is None:
            return False
        assert rc == EXIT_RECOVERY_STALLED, f"worker exited with {rc}\n{self.diagnose()}"
        self.restarts += 1
        self.start()
        return True

    def health(self) -> dict | None:
        try:
            with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                return json.loads(resp.read())
        except OSError:
            return None

    def diagnose(self) -> str:
        """/health and the log tail, for a failing reliability test's message."""
        try:
            tail = self.log.read_text(errors="replace")[-3000:]
        except OSError:
            tail = "(no log)"
        return (f"/health: {json.dumps(self.health())}\n--- worker log tail ---\n{tail}"
                f"\n--- where the worker's tasks wait (/debug/tasks) ---\n{self.waits()}")

    def waits(self) -> str:
        """One line per task of the worker's own code: its chain of awaits,
        outermost first; a stalled partition shows where it is stuck."""
        try:
            with urllib.request.urlopen(f"{self.url}/debug/tasks", timeout=5) as resp:
                found = json.loads(resp.read())["tasks"]
        except (OSError, ValueError, KeyError) as exc:
            return f"(not read: {exc})"
        return "\n".join(f"{t['name']}: " + " -> ".join(t["awaiting"]) for t in found)

    def sql(self, timeout_s: float = 120.0):
        """A Runner on the worker's read-only ClickHouse HTTP interface (its
        worker.json's sql_url), never the store itself."""
        from phasemeter.query.runner import worker_runner
        from phasemeter.settings import Settings

        return worker_runner(Settings.from_env(self.env), timeout_s)

    def stored_count(self) -> int:
        """Rows in the store, asked through the worker's SQL interface."""
        runner = self.sql()
        try:
            return int(runner.df("count_generations", {})["n"].iloc[0])
        finally:
            runner.close()

    def wait_processed(self, n: int, timeout_s: float = 120) -> dict:
        deadline = time.monotonic() + timeout_s
        h = {}
        while time.monotonic() < deadline:
            h = self.health() or h
            if h.get("accepted", 0) + h.get("rejected", 0) >= n:
                return h
            time.sleep(0.2)
        raise AssertionError(f"worker processed {h} of {n} in {timeout_s}s")

    def terminate(self, wait_s: float) -> tuple[int | None, float]:
        """SIGTERM, then wait up to `wait_s` for the worker to exit by itself:
        (its exit code, None if still running; the seconds it took)."""
        t0 = time.monotonic()
        self.proc.terminate()
        try:
            rc = self.proc.wait(wait_s)
        except subprocess.TimeoutExpired:
            rc = None
        return rc, time.monotonic() - t0

    def stop(self, kill: bool = False) -> None:
        if self.proc and self.proc.poll() is None:
            if kill or self.terminate(30)[0] is None:
                self.proc.kill()
            self.proc.wait()


def worker_env(kafka_bootstrap: str, data_dir, pythonpath=(), **extra: str) -> dict:
    """A worker's environment of its own: unique topics and group, a data dir
    (so a store) of its own, and free web and SQL ports (a worker that cannot
    bind its SQL port serves none, so two workers on one default port would
    leave a reader without its store). `pythonpath`: directories a subprocess
    imports tests from."""
    from ports import free_port
    from stores import DATABASE

    tag = uuid.uuid4().hex[:10]
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
           "PHASEMETER_TOPIC": f"gen-{tag}", "PHASEMETER_DLQ_TOPIC": f"gen-{tag}.dlq",
           "PHASEMETER_GROUP_ID": f"grp-{tag}", "PHASEMETER_DATABASE": DATABASE,
           "PHASEMETER_DATA_DIR": str(data_dir), "PHASEMETER_WEB_PORT": str(free_port()),
           "PHASEMETER_SQL_PORT": str(free_port()), "PHASEMETER_BATCH_SECONDS": "0.5"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join([*map(str, pythonpath), os.environ.get("PYTHONPATH", "")])
    env.update(extra)
    env.pop("CLICKHOUSE_URL", None)
    return env


def write_store_in_subprocess(env: dict, module: str, t0: float) -> None:
    """`module`.write_store(t0) in a process of its own (chDB opens a path in
    one process only), before a worker owns the store; `env` (worker_env,
    with `pythonpath` reaching `module`) names the store, which is migrated first."""
    from stores import migrated

    migrated(env)
    done = subprocess.run([sys.executable, "-c", f"import {module}; {module}.write_store({t0!r})"], env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.fixture
def pm_env(kafka_bootstrap, tmp_path):
    """Unique topic / group / data dir for one test."""
    return worker_env(kafka_bootstrap, tmp_path / "data", PHASEMETER_SESSION_TIMEOUT_S="6")


@pytest.fixture
def worker(pm_env, tmp_path):
    w = WorkerProc(pm_env, tmp_path, int(pm_env["PHASEMETER_WEB_PORT"])).migrate()
    yield w
    w.stop()


@pytest.fixture
def settings_for():
    from phasemeter.settings import Settings

    return lambda env: Settings.from_env(env)
