"""Freshness: emit -> stored (queryable) latency with a worker running, at fixed emit rates.

    python bench/bench_freshness.py [--rates 2000,5000] [--envelopes 1,100] [--seconds 20]
                                    [--batch-seconds S] [--bootstrap H:P] [--probe] [--json OUT]
                                    [--sql-load 30]

For each rate and each emitter envelope size (alternated in one run), the real emitter (`Meter.record`, t0 = wall clock at emit,
durations of ~1 ms) sends at that rate for --seconds under its own gateway
label, into one `phasemeter worker` (default batching: 5000 rows or 1 s).
Latency per row = ingested_at (set by ClickHouse at insert) - ts (the emit
time, to the ms), read through the worker's SQL interface with the named query
sql/bench_freshness.sql; a row is queryable as soon as it is stored. Also
reported: the time from the last emit until every row of the rate step is
visible through the API (polled every 0.1 s), and per batch (from /health)
where the worker's time went. --probe adds a raw Kafka reader
that splits the latency into emitter/broker and worker parts. --sql-load S
keeps an analytical query running through the worker's SQL interface for the
whole of each step, S seconds each (a scan of every core until its
max_execution_time), so freshness is measured while a dashboard reads.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402


def emit(bootstrap: str, topic: str, gateway: str, rate: float, seconds: float, envelope_size: int) -> dict:
    from phasemeter.producers import Meter

    total = int(rate * seconds)
    meter = Meter(bootstrap_servers=bootstrap, topic=topic, gateway=gateway,
                  queue_size=max(50_000, total), flush_timeout_s=60, envelope_size=envelope_size)
    began = time.monotonic()
    clock = time.time
    try:
        for i in range(total):
            meter.record(model="bench-fresh", input_tokens=100, output_tokens=2, t0=clock(),
                         ttft_s=0.001, e2e_s=0.002, queue_s=0.0, replica="r0")
            ahead = (i + 1) / rate - (time.monotonic() - began)
            if ahead > 0.002:
                time.sleep(ahead)
        emitted_at = time.time()
        took = time.monotonic() - began
    finally:
        meter.close(timeout_s=60)
    s = meter.stats()
    return {"emitted": total, "achieved_rate": total / took, "emit_end": emitted_at,
            "sent": s.sent, "dropped": s.dropped, "failed": s.failed}


class KafkaProbe:
    """A raw aiokafka reader (no group, from the end) in a thread: for each
    event it records CreateTime - t0 (emitter queue + hand-off to the producer)
    and receipt - t0 (until a plain consumer could read it). That splits the
    end-to-end latency into "before the worker" and "in the worker"."""

    def __init__(self, bootstrap: str, topic: str, partitions: int = 4):
        import threading

        self.partitions = partitions
        self.bootstrap, self.topic = bootstrap, topic
        self.samples: dict[str, list[tuple[float, float]]] = {}
        self.ready, self.stop_flag = threading.Event(), threading.Event()
        self.thread = threading.Thread(target=self._thread, daemon=True, name="kafka-probe")

    def __enter__(self):
        self.thread.start()
        self.ready.wait(30)
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()
        self.thread.join(15)

    def _thread(self) -> None:
        import asyncio

        asyncio.run(self._run())

    async def _run(self) -> None:
        import json

        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, group_id=None, enable_auto_commit=False)
        await consumer.start()
        try:
            tps = [TopicPartition(self.topic, p) for p in range(self.partitions)]
            consumer.assign(tps)
            await consumer.seek_to_end(*tps)
            self.ready.set()
            while not self.stop_flag.is_set():
                batches = await consumer.getmany(timeout_ms=100, max_records=5000)
                now = time.time()
                for msgs in batches.values():
                    for m in msgs:
                        body = json.loads(m.value)
                        for e in body.get("events") or [body]:  # an envelope, or one event
                            self.samples.setdefault(e.get("gateway") or "", []).append(
                                (m.timestamp / 1000.0 - e["t0"], now - e["t0"]))
        finally:
            self.ready.set()
            await consumer.stop()

    def summary(self, gateway: str) -> dict:
        got = self.samples.get(gateway, [])
        if not got:
            return {"probe_n": 0}
        create = sorted(x[0] for x in got)
        recv = sorted(x[1] for x in got)

        def q(xs, p):
            return round(1000 * xs[min(len(xs) - 1, int(p * len(xs)))], 1)
        return {"probe_n": len(got), "handoff_p50_ms": q(create, .5), "handoff_p99_ms": q(create, .99),
                "consumable_p50_ms": q(recv, .5), "consumable_p99_ms": q(recv, .99)}


class BatchLog:
    """Polls the worker's /health every 50 ms in a thread and keeps each new
    `last_batch` (its split/write/forward seconds and the ages of its oldest
    and newest rows when the batch began): where the worker's share goes."""

    def __init__(self, worker):
        import threading

        self.worker, self.batches = worker, []
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._poll, daemon=True, name="batch-log")

    def _poll(self) -> None:
        seen = None
        while not self.stop_flag.is_set():
            h = self.worker.health() or {}
            if h.get("last_batch_at") and h["last_batch_at"] != seen:
                seen = h["last_batch_at"]
                self.batches.append(h.get("last_batch") or {})
            time.sleep(0.05)  # a batch shorter than this can be missed: the table says "seen"

    def take(self) -> list[dict]:
        got, self.batches = self.batches, []
        return [b for b in got if b.get("rows")]


def batch_summary(batches: list[dict]) -> dict:
    """Medians and maxima over the batches of one rate step."""
    if not batches:
        return {"batches": 0}

    def med(k):
        xs = sorted(b[k] for b in batches if b.get(k) is not None)
        return xs[len(xs) // 2] if xs else None
    return {"batches": len(batches), "batch_rows_med": med("rows"), "split_s_med": med("split_s"),
            "write_s_med": med("write_s"), "forward_s_med": med("forward_s"),
            "oldest_age_s_med": med("oldest_age_s"),
            "oldest_age_s_max": max(b.get("oldest_age_s") or 0 for b in batches)}


def visible(runner, gateway: str) -> dict:
    df = runner.df("bench_freshness", {"gateway": gateway})
    return {k: (float(df[k].iloc[0]) if len(df) else 0.0) for k in ("n", "p50_ms", "p99_ms", "max_ms")}


class SqlLoad:
    """Analytical queries through the worker's SQL interface, one after the
    other, each running S seconds (until its lowered max_execution_time)."""

    QUERY = b"SELECT count() FROM numbers_mt(1000000000000) WHERE sipHash64(number) % 7 = 1"

    def __init__(self, url: str, seconds: float):
        import threading

        self.url, self.seconds, self.stop_flag = url, seconds, threading.Event()
        self.ran, self.started = [], 0
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        import urllib.error
        import urllib.request

        while not self.stop_flag.is_set():
            began = time.monotonic()
            self.started += 1
            target = f"{self.url}/?max_execution_time={self.seconds:g}"
            try:
                with urllib.request.urlopen(urllib.request.Request(target, data=self.QUERY), timeout=600) as r:
                    r.read()
            except urllib.error.HTTPError as exc:  # 159 TIMEOUT_EXCEEDED: it ran its S seconds
                exc.read()
            self.ran.append(round(time.monotonic() - began, 1))

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop_flag.set()


def run(bootstrap: str, rates: list[float], envelopes: list[int], seconds: float, timeout_s: float,
        batch_rows: int | None,
        batch_seconds: float, with_probe: bool = False, worker_python: str = "",
        sql_load_s: float = 0.0) -> list[dict]:
    from phasemeter.kafka_local import ensure_topics, free_port
    from phasemeter.query.runner import worker_runner
    from phasemeter.settings import Settings

    topic = f"bench-fresh-{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, [topic, f"{topic}.dlq"], 4)
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-fresh-"))
    out = []
    try:
        sql_port = free_port()
        with U.Worker(bootstrap, topic, tmp, batch_rows=batch_rows, batch_seconds=batch_seconds,
                      python=worker_python or sys.executable, extra_env={"PHASEMETER_SQL_PORT": str(sql_port)}) as w:
            w.migrate()
            w.start()
            runner = worker_runner(Settings.from_env(w.env), timeout_s=30)  # its SQL interface
            probe = KafkaProbe(bootstrap, topic).__enter__() if with_probe else None
            blog = BatchLog(w)
            blog.thread.start()
            try:
                load = (lambda: SqlLoad(f"http://127.0.0.1:{sql_port}", sql_load_s)) if sql_load_s else None
                out = _steps(bootstrap, topic, rates, envelopes, seconds, timeout_s, batch_seconds, runner, probe, blog,
                             load)
            finally:
                blog.stop_flag.set()
                if probe:
                    probe.__exit__()
            out_health = w.health() or {}
            for r in out:
                r["worker_rejected"] = out_health.get("rejected")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _steps(bootstrap, topic, rates, envelopes, seconds, timeout_s, batch_seconds, runner, probe,
           blog, load=None) -> list[dict]:
    """Each rate with each emitter envelope size, alternated in this run,
    after a warm-up step (not reported): a fresh worker's first batch loads
    every partition's position and the stored offsets, seconds on a busy
    machine, which is start-up, not freshness. `load` makes a SqlLoad that
    runs during each step (--sql-load)."""
    out = []
    warm = f"fresh-warmup-{uuid.uuid4().hex[:4]}"
    sent = emit(bootstrap, topic, warm, 200, 2, 1)["sent"]
    deadline = time.monotonic() + timeout_s
    while visible(runner, warm)["n"] < sent and time.monotonic() < deadline:
        time.sleep(0.1)
    for rate in rates:
        for envelope in envelopes:
            blog.take()
            gateway = f"fresh-{int(rate)}-{envelope}-{uuid.uuid4().hex[:4]}"
            running = load().__enter__() if load else None
            if running:
                time.sleep(1.0)  # the query is running before the first emit
            e = emit(bootstrap, topic, gateway, rate, seconds, envelope)
            deadline = time.monotonic() + timeout_s
            v = visible(runner, gateway)
            while v["n"] < e["sent"] and time.monotonic() < deadline:
                time.sleep(0.1)
                v = visible(runner, gateway)
            drain = time.time() - e["emit_end"]
            if running:
                running.__exit__()
            out.append({"rate": rate, "envelope_size": envelope, "seconds": seconds, **e, "stored": int(v["n"]),
                        "p50_ms": v["p50_ms"], "p99_ms": v["p99_ms"], "max_ms": v["max_ms"],
                        "last_emit_to_all_visible_s": round(drain, 2),
                        "complete": v["n"] >= e["sent"],
                        "meets_target": v["p99_ms"] <= 1000, **(probe.summary(gateway) if probe else {}),
                        "sql_queries_started": running.started if running else None,
                        "sql_queries_s": list(running.ran) if running else None,
                        **batch_summary(blog.take())})
            time.sleep((batch_seconds or 1.0) + 0.5)  # let the worker go idle between steps
    return out


def render(rows: list[dict], batch_rows: int, batch_seconds: float) -> str:
    table = U.md_table(
        ["target rate /s", "envelope", "achieved /s", "emitted", "stored", "p50 ms", "p99 ms", "max ms",
         "last emit → all visible s", "p99 ≤ 1 s", "hand-off p50/p99 ms", "raw-consumable p50/p99 ms"],
        [[int(r["rate"]), r["envelope_size"], round(r["achieved_rate"]), r["emitted"], r["stored"], r["p50_ms"], r["p99_ms"],
          r["max_ms"], r["last_emit_to_all_visible_s"], "yes" if r["meets_target"] else "NO",
          f"{r.get('handoff_p50_ms', 'n/a')} / {r.get('handoff_p99_ms', 'n/a')}",
          f"{r.get('consumable_p50_ms', 'n/a')} / {r.get('consumable_p99_ms', 'n/a')}"] for r in rows])
    batches = U.md_table(
        ["target rate /s", "envelope", "batches seen", "rows/batch (median)", "split s", "write s", "forward+commit s",
         "oldest row's age at batch start s (median / max)"],
        [[int(r["rate"]), r["envelope_size"], r.get("batches", 0), r.get("batch_rows_med"), r.get("split_s_med"),
          r.get("write_s_med"), r.get("forward_s_med"),
          f"{r.get('oldest_age_s_med')} / {r.get('oldest_age_s_max')}"] for r in rows])
    return table + "\n\nPer batch, from the worker's /health (polled every 50 ms):\n\n" + batches + (
        f"\n\nWorker batching: PHASEMETER_BATCH_ROWS={batch_rows}, PHASEMETER_BATCH_SECONDS="
                    f"{batch_seconds} (None: the worker's default); emitter linger 5 ms, acks=all. p50/p99 = ingested_at - t0 (emit) "
                    "per row. Hand-off = Kafka CreateTime - t0 (emitter queue until the sender thread "
                    "called KafkaProducer.send); raw-consumable = when a group-less aiokafka reader in the "
                    "bench process got it - t0. The rest is the worker.")


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="")
    ap.add_argument("--rates", default="2000", help="comma-separated generations/s")
    ap.add_argument("--envelopes", default="1",
                    help="comma-separated emitter envelope sizes (Meter(envelope_size=)), alternated per rate")
    ap.add_argument("--seconds", type=float, default=20.0, help="emit duration per rate")
    ap.add_argument("--batch-rows", type=int, default=None, help="PHASEMETER_BATCH_ROWS (default: the worker's)")
    ap.add_argument("--batch-seconds", type=float, default=None, help="PHASEMETER_BATCH_SECONDS (same)")
    ap.add_argument("--worker-python", default="",
                    help="run the worker of another venv (e.g. the previous version) instead of this one")
    ap.add_argument("--timeout", type=float, default=120.0, help="max wait for rows to become visible")
    ap.add_argument("--probe", action="store_true",
                    help="also read the topic with a raw consumer to split emitter/broker vs worker latency "
                         "(costs CPU in this process)")
    ap.add_argument("--json", default="")
    ap.add_argument("--sql-load", type=float, default=0.0,
                    help="keep an analytical query of this many seconds running through the SQL interface")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()
    rates = [float(r) for r in args.rates.split(",") if r]
    envelopes = [int(x) for x in args.envelopes.split(",") if x]
    with U.broker(args.bootstrap or None) as bootstrap:
        rows = run(bootstrap, rates, envelopes, args.seconds, args.timeout, args.batch_rows, args.batch_seconds, args.probe,
                   args.worker_python, args.sql_load)
    result = {"params": vars(args), "rates": rows}
    print(render(rows, args.batch_rows, args.batch_seconds))
    U.write_json(args.json, result)
    print(f"result: {R.record('freshness', figures(rows))}")
    return result


def figures(rows: list[dict]) -> list[dict]:
    """p99 emit → queryable per rate and envelope size (the goal key names the rate)."""
    return [R.figure(f"freshness-{r['rate'] / 1000:g}k", f"emit → queryable p99 at {r['rate']:,.0f}/s, "
                     + ("one event per message" if r["envelope_size"] == 1 else f"envelopes of {r['envelope_size']}"),
                     r["p99_ms"], "ms", target="p99 ≤ 1 s", met=r["meets_target"]) for r in rows]


if __name__ == "__main__":
    main()
