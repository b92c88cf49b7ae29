"""`phasemeter demo`: the whole pipeline on this machine, then stop it all.

broker (local KRaft, or KAFKA_BOOTSTRAP_SERVERS) -> migrate -> worker process
-> synthetic gateway through the real emitter -> bands via the worker's API
-> table + PNG. Everything started here is stopped in `finally`, Ctrl-C too.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

from phasemeter.demo.phases import run_phase_load
from phasemeter.settings import Settings

PHASE_RATE = 100.0  # live phase-protocol generations per second


DEMO_SLOS = Path(__file__).with_name("slos.toml")


def _say(msg: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {msg}", flush=True)


def health(url: str, path: str = "/health") -> dict | None:
    try:
        with urllib.request.urlopen(f"{url}{path}", timeout=2) as resp:
            return json.loads(resp.read())
    except OSError:
        return None


def wait_stored(url: str, n: int, timeout_s: float) -> dict:
    deadline, h = time.monotonic() + timeout_s, {}
    while time.monotonic() < deadline:
        h = health(url) or h
        if h.get("accepted", 0) + h.get("rejected", 0) >= n:
            break
        time.sleep(0.2)
    return h


def inflight_line(url: str) -> str:
    view = health(url, "/inflight") or {"in_flight": []}
    parts = []
    for phase in ("prefill", "decode"):
        cells = [c for c in view["in_flight"] if c["phase"] == phase]
        oldest = max((c["oldest_age_s"] for c in cells), default=0.0)
        parts.append(f"{phase} {sum(c['in_flight'] for c in cells)} (oldest {oldest:.1f}s)")
    return "in flight: " + ", ".join(parts)


class Stack:
    """The processes the demo owns, stopped in reverse order."""

    def __init__(self, settings: Settings):
        self.settings = settings
        self.broker = None
        self.worker: subprocess.Popen | None = None

    def env(self, bootstrap: str) -> dict:
        s = self.settings
        return {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": bootstrap, "PHASEMETER_DATA_DIR": s.data_dir,
                "PHASEMETER_TOPIC": s.topic, "PHASEMETER_DLQ_TOPIC": s.dlq_topic,
                "PHASEMETER_WEB_PORT": str(s.web_port), "PHASEMETER_SQL_PORT": str(s.sql_port),
                "PHASEMETER_DATABASE": s.database,
                "PHASEMETER_ABANDON_AFTER_S": str(s.abandon_after_s),
                "PHASEMETER_EXPIRY_TICK_S": str(s.expiry_tick_s), "PHASEMETER_SLOS": s.slos}

    def start_worker(self, bootstrap: str, log_path: Path) -> str:
        cmd = [sys.executable, "-m", "phasemeter", "worker", "--loglevel", "warn"]
        with open(log_path, "ab") as log:
            self.worker = subprocess.Popen(cmd, env=self.env(bootstrap), stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True)
        url = f"http://127.0.0.1:{self.settings.web_port}"
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            if self.worker.poll() is not None:
                raise RuntimeError(f"worker exited ({self.worker.returncode}); see {log_path}")
            if health(url):
                return url
            time.sleep(0.3)
        raise RuntimeError(f"worker did not come up in 90 s; see {log_path}")

    def stop(self) -> None:
        if self.worker and self.worker.poll() is None:
            _say("stopping worker")
            self.worker.send_signal(signal.SIGTERM)
            try:
                self.worker.wait(20)
            except subprocess.TimeoutExpired:
                self.worker.kill()
                self.worker.wait()
        if self.broker:
            _say("stopping Kafka")
            self.broker.stop()


def run_load(bootstrap: str, settings: Settings, seconds: float, rate: float, worker_url: str, deployment=None):
    from phasemeter.producers import Meter

    from phasemeter.demo.synthetic import SyntheticGateway

    span = 3600.0
    gen = SyntheticGateway(start=time.time() - span - 60, span_s=span, deployment=deployment)
    meter = Meter(bootstrap_servers=bootstrap, topic=settings.topic, gateway="demo-gw",
                  queue_size=50_000, producer_config=settings.kafka_client_config())
    total = int(seconds * rate)
    began = time.monotonic()
    next_report = began + 5
    for i in range(total):
        g = gen.make(i / total)
        meter.record(model=g.model, input_tokens=g.input_tokens, output_tokens=g.output_tokens, t0=g.t0,
                     ttft_s=g.ttft_s, e2e_s=g.e2e_s, queue_s=g.queue_s, status=g.status, replica=g.replica,
                     chunks=g.chunks, max_gap_s=g.max_gap_s, gaps_over=g.gaps_over,
                     prefill_replica=g.prefill_replica, decode_replica=g.decode_replica,
                     kv_transfer_s=g.kv_transfer_s)
        # Pace to `rate` without sleeping per event (a gateway has its own pacing).
        ahead = (i + 1) / rate - (time.monotonic() - began)
        if ahead > 0.01:
            time.sleep(ahead)
        if time.monotonic() >= next_report:
            h = health(worker_url) or {}
            st = meter.stats()
            _say(f"emitted {i + 1:,}/{total:,}  sent {st.sent:,}  dropped {st.dropped}  "
                 f"worker stored {h.get('accepted', '?'):,}; {inflight_line(worker_url)}")
            next_report += 5
    meter.close(timeout_s=30)
    return meter.stats(), total


EXPLORE_HEAD = "Explore it with:"


def explore_commands(demo_dir: Path) -> list[str]:
    """The exact commands that read the demo's store afterwards: it lives
    under its own data dir, not the default one, and its SLOs are the demo's
    file, which a user's settings do not name (tests run each as printed)."""
    d = shlex.quote(str(demo_dir))
    return [f"phasemeter query bands --data-dir {d} --from -2h --step 5m",
            f"phasemeter latency --data-dir {d} --from -2h --step 5m",
            f"phasemeter slo --data-dir {d} --slos {shlex.quote(str(DEMO_SLOS))} --from -2h --by model",
            f"phasemeter chart --data-dir {d} --from -2h --out bands.html",
            f"phasemeter alerts check --data-dir {d}",
            f"phasemeter dlq inspect --data-dir {d}"]


def explore_hint(demo_dir: Path) -> str:
    return ("\nThe demo's store stays in " + str(demo_dir) + f". {EXPLORE_HEAD}\n"
            + "".join(f"  {c}\n" for c in explore_commands(demo_dir))
            + "(inside the repo, use .venv/bin/phasemeter, or activate .venv first)")


def run_demo(settings: Settings, seconds: float, rate: float, out_dir: str, keep: bool = False,
             pd: bool = False) -> int:
    """`pd`: the synthetic gateway serves through a prefill/decode
    disaggregated deployment with one slow decode pool (demo/disagg.py), and
    the results add the bands and latency per decode pool."""
    from phasemeter.kafka_local import LocalBroker, ensure_topics, free_port, port_free

    demo_dir = settings.data_path / "demo"
    shutil.rmtree(demo_dir, ignore_errors=True)
    demo_dir.mkdir(parents=True)
    # A short expiry so the demo's hung requests become `abandoned` while you watch.
    # The SQL interface on its documented port (docs/sql.md, README) when it is
    # free, so the README's lines work as written; another one otherwise.
    sql_port = settings.sql_port if port_free(settings.sql_port) else free_port()
    settings = settings.replace(data_dir=str(demo_dir), clickhouse_url="", web_port=free_port(), sql_port=sql_port,
                                abandon_after_s=15.0, expiry_tick_s=1.0, slos=str(DEMO_SLOS))
    out = Path(out_dir).resolve()
    out.mkdir(parents=True, exist_ok=True)
    stack = Stack(settings)
    previous = signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    # Ctrl-C must stop what we started even if we inherited SIGINT as ignored
    # (e.g. started in the background by a non-interactive shell).
    previous_int = signal.signal(signal.SIGINT, signal.default_int_handler)
    t_start = time.monotonic()
    try:
        if settings.kafka_bootstrap_servers:
            bootstrap = settings.kafka_bootstrap_servers
            _say(f"using Kafka at {bootstrap}")
        else:
            _say("starting Apache Kafka (KRaft, single node, loopback)")
            stack.broker = LocalBroker(demo_dir / "kafka").start(log=_say)
            bootstrap = stack.broker.bootstrap
            _say(f"Kafka up at {bootstrap}")
        ensure_topics(bootstrap, settings.topics, settings.topic_partitions,
                      settings.kafka_client_config())
        env = stack.env(bootstrap)
        subprocess.run([sys.executable, "-m", "phasemeter", "migrate"], env=env, check=True)
        _say("starting worker (Faust) — it owns the embedded chDB store")
        url = stack.start_worker(bootstrap, demo_dir / "worker.log")
        _say(f"worker up, read-only API at {url}; synthetic gateway: {rate:.0f} generations/s for "
             f"{seconds:.0f}s, 2 models, all buckets, prefill regression on long prompts at 65%")
        _say(f"plus a live gateway sending phase events (start/first_token/end) at {PHASE_RATE:.0f}/s, "
             f"~2% of them hanging; abandoned after {settings.abandon_after_s:.0f}s in this demo (default 600s)")
        t_load = time.monotonic()
        phases: dict = {}
        live = threading.Thread(target=lambda: phases.update(
            run_phase_load(bootstrap, settings, seconds, PHASE_RATE, _say)), daemon=True)
        live.start()
        if pd:
            from phasemeter.demo.disagg import DEPLOYMENT

            _say(f"disaggregated: prefill pools {', '.join(DEPLOYMENT.prefill_pools)}; decode pools "
                 f"{', '.join(DEPLOYMENT.decode_pools)}, {DEPLOYMENT.slow_pool} decoding "
                 f"{DEPLOYMENT.slow_factor:g}x slower; a KV transfer before every first token")
        stats, total = run_load(bootstrap, settings, seconds, rate, url, DEPLOYMENT if pd else None)
        _say(f"emitter: {stats.as_dict()}")
        live.join()
        # Every started phase-protocol request ends as a row: joined at once,
        # or abandoned once its expiry passes (hence the second, longer wait).
        ended = stats.sent + phases.get("ended", 0)
        h = wait_stored(url, ended, 60)
        drained = time.monotonic() - t_load
        _say(f"worker stored {h.get('accepted')} rows, dead-lettered {h.get('rejected')}; "
             f"{h.get('accepted', 0) / drained:,.0f} generations/s end to end; waiting for the hung ones "
             f"to expire")
        h = wait_stored(url, stats.sent + phases.get("started", 0), settings.abandon_after_s + 60)
        _say(f"worker stored {h.get('accepted')} rows in all, "
             f"{h.get('accepted', 0) - ended} of them abandoned")
        show_results(settings, out)
        if pd:
            show_pools(settings, out)
        _say(f"done in {time.monotonic() - t_start:.0f}s")
        if not keep:
            print(explore_hint(demo_dir) + "\n(`phasemeter demo --keep` leaves it running, with the live page)",
                  flush=True)
            return 0
        from phasemeter.demo.keep import hold, keep_hint

        print(keep_hint(url, settings.sql_url, demo_dir), flush=True)
        try:
            hold(stack.worker)
        except KeyboardInterrupt:  # the way out of --keep: not a failure
            _say("Ctrl-C: stopping")
            return 0
    except KeyboardInterrupt:
        _say("interrupted")
        return 130
    finally:
        stack.stop()
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)


def show_results(settings: Settings, out: Path) -> None:
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    from phasemeter.render.png import render_bands_png
    from phasemeter.render.table import to_csv, to_table
    from phasemeter.query.queries import bands, order_bands
    from phasemeter.query.runner import open_runner
    from phasemeter.timeparse import window

    order = labels(parse_edges(settings.bucket_edges))
    runner = open_runner(settings)  # the worker owns the embedded store: its SQL interface
    start, end = window("-60m", "now")
    table = to_table(order_bands(bands(runner, start, end, 900), order))
    print(table)
    (out / "bands.txt").write_text(table + "\n")
    step = 60
    fine = order_bands(bands(runner, start, end, step), order)
    (out / "bands.csv").write_text(to_csv(fine))
    png = render_bands_png(fine, out / "bands.png", bucket_order=order,
                           title="phasemeter demo — prefill of long prompts regresses, decode stays flat")
    _say(f"wrote {png} and {out / 'bands.csv'} (step {step}s)")
    recent, now = window("-15m", "now")
    live = runner.df("summary", {"start": recent, "end": now})
    live = order_bands(live[live["abandoned"] > 0].assign(t=0), order)[
        ["model", "input_bucket", "n", "abandoned", "abandoned_prefill", "abandoned_decode"]]
    text = ("abandoned generations (started, never ended; docs/metrics.md), last 15 min:\n"
            + (live.to_string(index=False) if len(live) else "  none"))
    print(text)
    (out / "abandoned.txt").write_text(text + "\n")
    from phasemeter.alerts import demo_check

    _say("alerts check (per phase, routed to its runbook):")
    text = demo_check(runner, settings)
    print(text)
    (out / "alerts.txt").write_text(text + "\n")
    show_slos(settings, runner, out, order)


def show_slos(settings: Settings, runner, out: Path, order: list[str]) -> None:
    """The demo's SLOs per model and 15 min: attainment drops when prefill
    regresses, the misses are ttft's; and the stalling model's stall share."""
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.analytics.core import run_query
    from phasemeter.analytics.present import render
    from phasemeter.analytics.slo import attainment
    from phasemeter.render.slo_table import render_many
    from phasemeter.timeparse import window

    sloset = load_slos(settings.slos, order)
    start, end = window("-65m", "now")
    results = [(slo, *attainment(runner, slo, start, end, 900, bucket_labels=order, by="model"))
               for slo in sloset.slos]
    _say("SLO attainment per model and 15 min (phasemeter slo --by model --step 15m):")
    text = render_many(results, "table")
    print(text)
    (out / "slo.txt").write_text(text + "\n")
    df, meta = run_query(runner, start, end, 86_400, kind="stalls", default_edges=settings.bucket_edges)
    _say("decode stalls, whole window (phasemeter query bands --stalls):")
    text = render(df, "table", meta, ["model", "input_bucket", "chunk_n", "gap_p50", "gap_p99", "gap_max",
                                      "stalled_share"])
    print(text)
    (out / "stalls.txt").write_text(text + "\n")


def show_pools(settings: Settings, out: Path) -> None:
    """The disaggregated deployment per decode pool, whole window, one input
    bucket (decode hardly depends on the prompt): decode bands (the slow
    pool's median and slow tail), then TTFT, TPOT and the KV transfer
    (phasemeter query bands / latency --by decode_replica --bucket ...)."""
    from phasemeter.analytics.core import run_query
    from phasemeter.analytics.present import render
    from phasemeter.query.runner import open_runner
    from phasemeter.stream_jobs.buckets import labels, parse_edges
    from phasemeter.timeparse import window

    runner = open_runner(settings)
    start, end = window("-65m", "now")
    order = labels(parse_edges(settings.bucket_edges))
    bucket = order[min(2, len(order) - 1)]
    parts = []
    for kind, columns in (("bands", ["model", "decode_replica", "input_bucket", "n", "decode_p1", "decode_p5",
                                     "decode_p50"]),
                          ("latency", ["model", "decode_replica", "input_bucket", "n", "ttft_p50", "tpot_p50",
                                       "tpot_p99", "kv_transfer_p50", "kv_transfer_p99"])):
        df, meta = run_query(runner, start, end, 86_400, buckets=[bucket], kind=kind,
                             default_edges=settings.bucket_edges, by="decode_replica")
        parts.append(render(df, "table", meta, columns))
    _say(f"per decode pool, whole window, bucket {bucket} (phasemeter query bands / latency "
         f"--by decode_replica --bucket {bucket}):")
    text = "\n\n".join(parts)
    print(text)
    (out / "pools.txt").write_text(text + "\n")
