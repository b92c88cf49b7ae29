"""The worker's web port under idle and half-sent connections.

A `phasemeter worker` on a local broker (or --bootstrap); /health is asked
--requests times with nothing else open (the reference), then again while
--idle connections that never send a request and one half-sent body are held
open. Reported: /health's median and p99 latency in both phases (same run),
the worker's resident memory before and with the connections open, the CPU
it spent holding them, and how long until the port closed them
(web_guard.IDLE_S and BODY_READ_S bound it).

    python bench/bench_web_port.py                   # 200 idle, 200 requests
    python bench/bench_web_port.py --idle 500 --json out.json
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402


def latencies(port: int, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("GET", "/health")
        resp = conn.getresponse()
        resp.read()
        conn.close()
        assert resp.status == 200, resp.status
        out.append(time.perf_counter() - t)
    return out


def summary(xs: list[float]) -> dict:
    xs = sorted(xs)
    return {"median_ms": round(1000 * statistics.median(xs), 2), "p99_ms": round(1000 * xs[int(0.99 * (len(xs) - 1))], 2)}


def closed(s: socket.socket) -> bool:
    s.setblocking(False)
    try:
        return s.recv(65536) == b""
    except BlockingIOError:
        return False
    except OSError:
        return True


def run(bootstrap: str | None, idle: int, requests: int) -> dict:
    from phasemeter.stream_jobs.web_guard import BODY_READ_S, IDLE_S

    with U.broker(bootstrap) as boot, tempfile.TemporaryDirectory(prefix="pm-bench-web-") as tmp:
        w = U.Worker(boot, f"bench-web-{time.time_ns()}", Path(tmp))
        w.migrate()
        w.start()
        try:
            latencies(w.port, 20)  # warm
            alone = latencies(w.port, requests)
            rss0, cpu0 = U.memory_mib(w.proc.pid), U.cpu_seconds(w.proc.pid)
            opened = time.monotonic()
            socks = [socket.create_connection(("127.0.0.1", w.port), timeout=5) for _ in range(idle)]
            half = socket.create_connection(("127.0.0.1", w.port), timeout=5)
            half.sendall(b"POST /query/command HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                         b"Content-Length: 1000\r\n\r\n{")
            socks.append(half)
            loaded = latencies(w.port, requests)
            rss1 = U.memory_mib(w.proc.pid)
            deadline = time.monotonic() + IDLE_S + BODY_READ_S + 30
            while time.monotonic() < deadline and not all(closed(s) for s in socks):
                time.sleep(0.2)
            closed_s = time.monotonic() - opened
            cpu1 = U.cpu_seconds(w.proc.pid)
            left = sum(not closed(s) for s in socks)
            for s in socks:
                s.close()
        finally:
            w.stop()
    return {"machine": U.machine_info(), "idle": idle, "requests": requests,
            "health_alone": summary(alone), "health_with_idle": summary(loaded),
            "rss_mib_before": rss0, "rss_mib_with_idle": rss1,
            "cpu_s_while_held": round(cpu1 - cpu0, 2) if cpu0 is not None and cpu1 is not None else None,
            "all_closed_after_s": round(closed_s, 1), "still_open": left, "idle_s": IDLE_S,
            "body_read_s": BODY_READ_S}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="an existing broker (default: a fresh local one)")
    ap.add_argument("--idle", type=int, default=200)
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--json", help="write the result here")
    args = ap.parse_args()
    U.exit_cleanly_on_sigterm()
    r = run(args.bootstrap, args.idle, args.requests)
    print(U.md_table(["", "median ms", "p99 ms"],
                     [["/health alone", r["health_alone"]["median_ms"], r["health_alone"]["p99_ms"]],
                      [f"/health with {r['idle']} idle + 1 half-sent", r["health_with_idle"]["median_ms"],
                       r["health_with_idle"]["p99_ms"]]]))
    print(f"worker RSS {r['rss_mib_before']:.0f} -> {r['rss_mib_with_idle']:.0f} MiB; CPU while held "
          f"{r['cpu_s_while_held']} s; all closed after {r['all_closed_after_s']} s "
          f"(idle {r['idle_s']:g} s, body {r['body_read_s']:g} s); still open: {r['still_open']}")
    U.write_json(args.json, r)


if __name__ == "__main__":
    main()
