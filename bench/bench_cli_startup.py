"""CLI start-up: whole-process wall time of short `phasemeter` commands.

Each command is a fresh process (what a user or a cron job pays), run from a
temp dir; the commands are interleaved round-robin and the median of --runs
is reported beside `python -c pass` measured in the same run, so the noise of
a shared machine hits the reference and the commands alike. CPU time
(user + sys of the child) is reported too: on a loaded machine wall time is
mostly waiting for a core, and CPU time is what an idle one would show.

Bytecode: an installed package has its .pyc files, so by default the children
get a private bytecode cache (PYTHONPYCACHEPREFIX under the temp dir, filled
by the warm-up run). With --no-bytecode-cache every run compiles phasemeter's
sources again (PYTHONDONTWRITEBYTECODE=1, as some CI and sandbox shells set).

* `phasemeter --help`, `phasemeter config`: no store, no heavy imports.
* `phasemeter query bands --from -1m` on an empty (migrated) store and on a
  small filled one (rows 50 min .. 5 min ago, so the 1-minute window is empty:
  the query's fixed cost), and `--from -1h` on the small one (rows found).
* floor: a bare script importing pandas and opening the same chDB store with
  clickhouse-connect for one `SELECT 1` -- what any embedded query pays.
* through the worker: a `phasemeter worker` (on a local broker) owns a third
  store, filled as the small one; `query bands`, `latency`, `slo` and
  `alerts check` there read the worker's ClickHouse HTTP interface with
  clickhouse-connect (phasemeter/query/runner.py), as they read a server.
  With --before-python (an interpreter with an older phasemeter installed,
  e.g. the main tree's venv) the same `query bands` runs with that CLI too,
  in the same rounds: the path before.

    python bench/bench_cli_startup.py              # 10 runs each
    python bench/bench_cli_startup.py --runs 20 --rows 5000 --json out.json
    python bench/bench_cli_startup.py --no-bytecode-cache
    python bench/bench_cli_startup.py --before-python /work/main/.venv/bin/python

With --keep the folder is reused and the small store filled only once (its
rows then age out of the `-1h` window).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402

PY = sys.executable
CLI = str(Path(PY).parent / "phasemeter")

# Runs in a child process: the chDB path is then released when it exits
# (one process may hold an embedded store), before the CLI opens it.
_FILL = """
import sys, time
import clickhouse_connect
from phasemeter.demo.rows import synthetic_frame
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.database = sys.argv[3]
if not client.command("SELECT count() FROM generations"):  # a --keep folder is filled once
    client.insert_df("generations", synthetic_frame(int(sys.argv[2]), time.time() - 50 * 60, 45 * 60, seed=3))
print(client.query("SELECT count() FROM generations").result_rows[0][0])
client.close()
"""


def fill(data_dir: Path, rows: int, env: dict, database: str = "phasemeter") -> None:
    """Migrate, then write the synthetic rows (before any worker opens the store)."""
    subprocess.run([CLI, "migrate", "--data-dir", str(data_dir)], check=True, cwd=data_dir.parent,
                   env={**env, "PHASEMETER_DATABASE": database}, stdout=subprocess.DEVNULL)
    if rows:
        out = subprocess.run([PY, "-c", _FILL, str(data_dir / "store"), str(rows), database], check=True,
                             env=env, capture_output=True, text=True).stdout.split()
        print(f"{data_dir}: {out[-1]} rows", file=sys.stderr)


def make_stores(root: Path, rows: int, env: dict) -> dict[str, Path]:
    stores = {"empty": root / "empty", "small": root / "small"}
    fill(stores["empty"], 0, env)
    fill(stores["small"], rows, env)
    return stores


@contextlib.contextmanager
def owned_store(root: Path, rows: int, env: dict):
    """A worker (and its broker) owning a store filled as the small one: yields its data dir."""
    from phasemeter.kafka_local import free_port

    with U.broker() as bootstrap:
        # The default database, so the commands name none, as a user's do (a
        # named one costs a check of the worker's /health, cli/main.py).
        # Its SQL interface on a free port: the default one may be another worker's.
        worker = U.Worker(bootstrap, f"bench-cli-{os.getpid()}", root / "owned", extra_env={
            "PHASEMETER_DATABASE": "phasemeter", "PHASEMETER_SQL_PORT": str(free_port()),
            **{k: v for k, v in env.items() if k.startswith("PYTHON")}})
        fill(Path(worker.env["PHASEMETER_DATA_DIR"]), rows, env, worker.env["PHASEMETER_DATABASE"])
        with worker:
            print(f"worker healthy after {worker.start():.1f}s at {worker.url}", file=sys.stderr)
            yield Path(worker.env["PHASEMETER_DATA_DIR"])


_FLOOR = """
import sys
import pandas, clickhouse_connect
client = clickhouse_connect.get_client(dsn="chdb://" + sys.argv[1])
client.query_df("SELECT 1")
client.close()
"""


def commands(stores: dict[str, Path], owned: Path | None = None,
             before: str | None = None) -> list[tuple[str, list[str]]]:
    q = [CLI, "query", "bands"]
    via = []
    if owned is not None:
        d = ["--data-dir", str(owned)]
        via = [("worker: query bands --from -1m", q + d + ["--from", "-1m"]),
               ("worker: query bands --from -1h (rows)", q + d + ["--from", "-1h"]),
               ("worker: latency --from -1h (rows)", [CLI, "latency", *d, "--from", "-1h"]),
               ("worker: slo --slos example", [CLI, "slo", *d, "--slos", "example"]),
               ("worker: alerts check", [CLI, "alerts", "check", *d]),
               ("worker: sql SELECT 1", [CLI, "sql", *d, "SELECT 1"])]
        if before:
            via.append(("worker, CLI before: query bands --from -1h",
                        [before, "-m", "phasemeter", "query", "bands", *d, "--from", "-1h"]))
    return [
        ("python -c pass (reference)", [PY, "-c", "pass"]),
        ("floor: import pandas + open chDB store + SELECT 1", [PY, "-c", _FLOOR, str(stores["small"] / "store")]),
        ("phasemeter --help", [CLI, "--help"]),
        ("phasemeter config", [CLI, "config"]),
        ("query bands --from -1m, empty store", q + ["--data-dir", str(stores["empty"]), "--from", "-1m"]),
        ("query bands --from -1m, small store", q + ["--data-dir", str(stores["small"]), "--from", "-1m"]),
        ("query bands --from -1h, small store (rows)", q + ["--data-dir", str(stores["small"]), "--from", "-1h"]),
    ] + via


def _cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def child_env(root: Path, bytecode_cache: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PHASEMETER_", "CLICKHOUSE_", "PYTHONDONTWRITEBYTECODE", "PYTHONPYCACHEPREFIX"))}
    if bytecode_cache:
        env["PYTHONPYCACHEPREFIX"] = str(root / "pycache")
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    return env


def measure(cmds: list[tuple[str, list[str]]], runs: int, cwd: Path, env: dict) -> dict[str, dict[str, list[float]]]:
    times = {label: {"wall": [], "cpu": []} for label, _ in cmds}
    for label, argv in cmds:  # one unmeasured warm-up each (page cache, .pyc files)
        subprocess.run(argv, check=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
    for _ in range(runs):
        for label, argv in cmds:
            c, t = _cpu(), time.perf_counter()
            subprocess.run(argv, check=True, cwd=cwd, env=env, stdout=subprocess.DEVNULL)
            times[label]["wall"].append(time.perf_counter() - t)
            times[label]["cpu"].append(_cpu() - c)
    return times


def render(times: dict[str, dict[str, list[float]]], runs: int, bytecode_cache: bool) -> str:
    med = {label: {k: statistics.median(v) for k, v in ts.items()} for label, ts in times.items()}
    ref = next(iter(med.values()))
    rows = [[label, m["wall"], min(times[label]["wall"]), m["wall"] - ref["wall"], m["cpu"], m["cpu"] - ref["cpu"]]
            for label, m in med.items()]
    load = os.getloadavg()[0]
    pyc = "bytecode cached" if bytecode_cache else "no bytecode cache (sources compiled every run)"
    return (f"{runs} runs each, interleaved; seconds for the whole process; {pyc}; load average {load:.1f} "
            f"on {os.cpu_count()} CPUs\n\n"
            + U.md_table(["command", "wall median", "wall min", "wall − ref", "CPU median", "CPU − ref"], rows))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--rows", type=int, default=2000, help="rows in the small store")
    ap.add_argument("--keep", help="folder for the stores, kept (default: a temp dir, deleted)")
    ap.add_argument("--json", help="also write the raw times here")
    ap.add_argument("--no-bytecode-cache", action="store_true",
                    help="compile phasemeter's sources in every run (PYTHONDONTWRITEBYTECODE=1)")
    ap.add_argument("--no-worker", action="store_true", help="skip the rows through a running worker")
    ap.add_argument("--before-python", help="an interpreter with an older phasemeter: its `query bands` "
                                            "through the same worker, measured in the same rounds")
    args = ap.parse_args()
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="pm-bench-cli-"))
    root.mkdir(parents=True, exist_ok=True)
    try:
        cache = not args.no_bytecode_cache
        env = child_env(root, cache)
        stores = make_stores(root, args.rows, env)
        with contextlib.ExitStack() as stack:
            owned = None if args.no_worker else stack.enter_context(owned_store(root, args.rows, env))
            times = measure(commands(stores, owned, args.before_python), args.runs, root, env)
        print(render(times, args.runs, cache))
        print("result:", R.record("cli-startup", figures(times)))
        U.write_json(args.json, {"machine": U.machine_info(), "runs": args.runs, "rows": args.rows,
                                 "bytecode_cache": cache, "times": times})
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    return 0


# The read commands through a running worker (its ClickHouse HTTP interface),
# each a goal of its own: target 0.3 s for the whole process.
WORKER_READS = (("cli-read-bands", "worker: query bands --from -1h (rows)"),
                ("cli-read-latency", "worker: latency --from -1h (rows)"),
                ("cli-read-slo", "worker: slo --slos example"), ("cli-read-alerts", "worker: alerts check"),
                ("cli-read-before", "worker, CLI before: query bands --from -1h"))


def figures(times: dict[str, dict[str, list[float]]]) -> list[dict]:
    """`--help` and `config`, and the read commands through a worker when
    measured, whole processes, beside `python -c pass` in the same rounds;
    `phasemeter sql SELECT 1` through the worker (no pandas, no
    clickhouse-connect) is a figure of its own, the floor of a read there."""
    med = {label: statistics.median(t["wall"]) for label, t in times.items()}
    ref = {"what": "`python -c pass`, same rounds", "value": med["python -c pass (reference)"]}
    out = [R.figure(goal, f"`{label}`, whole process, median", med[label], "s", reference=ref, target="≤ 0.2 s",
                    met=med[label] <= 0.2)
           for goal, label in (("cli-help", "phasemeter --help"), ("cli-config", "phasemeter config"))]
    if "worker: sql SELECT 1" in med:
        out.append(R.figure("cli-read-sql", "`phasemeter sql SELECT 1` through a running worker, whole process, "
                            "median", med["worker: sql SELECT 1"], "s", reference=ref, target="≤ 0.3 s",
                            met=med["worker: sql SELECT 1"] <= 0.3))
    # CPU time of the command's process (not the worker's share of the query):
    # what an idle machine's wall time would be, less the worker's few ms.
    for goal, label in WORKER_READS:
        if label not in med:
            continue
        cpu = {k: statistics.median(times[k]["cpu"]) for k in (label, "python -c pass (reference)")}
        cpu_ref = {"what": "`python -c pass` CPU time, same rounds", "value": cpu["python -c pass (reference)"]}
        what = (f"`{label.partition(': ')[2]}` through a running worker"
                f"{' (the CLI before this change)' if 'before' in label else ''}, whole process")
        out.append(R.figure(goal, f"{what}, wall median", med[label], "s", reference=ref, target="≤ 0.3 s",
                            met=med[label] <= 0.3))
        out.append(R.figure(f"{goal}-cpu", f"{what}, CPU median (user + sys)", cpu[label], "s",
                            reference=cpu_ref, target="≤ 0.3 s", met=cpu[label] <= 0.3))
    return out


if __name__ == "__main__":
    raise SystemExit(main())
