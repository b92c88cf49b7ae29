"""Overhead of PhasemeterMiddleware: the same ASGI app with and without it, in one run.

    python bench/bench_asgi.py [--requests 3000] [--chunks 2000] [--rounds 7]

The app is called directly (scope, receive, send) in one event loop, with
no server and no network: those costs are the same with or without the
middleware and would only hide the difference. The Meter is real; its
producer is an in-memory stand-in, so the sender thread still encodes every
event in the background and competes for the GIL as it would in a gateway.

Cases:
  * per request, SSE: a short stream (role, one content chunk, finish, usage,
    [DONE]) and a ~200-byte request body;
  * per request, SSE, 256 KiB request body: the body is copied as the app
    reads it and parsed once for `model`;
  * per request, JSON: a non-streaming response parsed once for `usage`;
  * per chunk: one stream of --chunks content chunks; (with - without) / chunks.

Bare and wrapped runs alternate within each round; the figures are medians
over rounds, in microseconds. Two clocks: the event loop thread's CPU time
(time.thread_time: what the middleware costs the gateway's loop, and the
steadier figure on a shared machine) and wall time (which also counts time
spent waiting for the CPU, other threads included).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _util as U  # noqa: E402

from phasemeter.integrations.asgi import PhasemeterMiddleware  # noqa: E402
from phasemeter.producers import Meter  # noqa: E402


def sse(obj) -> bytes:
    return b"data: " + (obj if isinstance(obj, bytes) else json.dumps(obj).encode()) + b"\n\n"


def content(text: str, finish=None) -> bytes:
    return sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1, "model": "llama-3.1-8b",
                "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": finish}]})


USAGE = sse({"id": "chatcmpl-1", "choices": [], "usage": {"prompt_tokens": 1200, "completion_tokens": 2}})
ROLE = sse({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
SHORT_STREAM = [ROLE, content("Hi"), content("", finish="stop"), USAGE, sse(b"[DONE]")]
JSON_BODY = json.dumps({"id": "x", "object": "chat.completion", "model": "llama-3.1-8b",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello there"},
                                     "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1200, "completion_tokens": 3}}).encode()
SCOPE = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
         "path": "/v1/chat/completions", "raw_path": b"/v1/chat/completions", "query_string": b"", "headers": []}


def request_body(prompt_bytes: int) -> bytes:
    return json.dumps({"messages": [{"role": "user", "content": "x" * prompt_bytes}], "model": "llama-3.1-8b",
                       "stream": True, "stream_options": {"include_usage": True}}).encode()


def make_app(chunks: list[bytes], content_type: bytes):
    start = {"type": "http.response.start", "status": 200, "headers": [(b"content-type", content_type)]}
    bodies = [{"type": "http.response.body", "body": c, "more_body": True} for c in chunks]
    end = {"type": "http.response.body", "body": b"", "more_body": False}

    async def app(scope, receive, send):
        while (await receive()).get("more_body"):  # read the request body, in 64 KiB parts
            pass
        await send(start)
        for message in bodies:
            await send(message)
        await send(end)
    return app


async def drive(app, parts: list[dict], n: int) -> tuple[float, float]:
    """(thread CPU seconds, wall seconds) per request over n requests."""
    async def send(message):
        pass

    cpu, wall = time.thread_time(), time.perf_counter()
    for _ in range(n):
        inbox = iter(parts)

        async def receive():
            return next(inbox)
        await app(SCOPE, receive, send)
    return (time.thread_time() - cpu) / n, (time.perf_counter() - wall) / n


def body_parts(body: bytes) -> list[dict]:
    step = 65_536
    pieces = [body[i:i + step] for i in range(0, len(body), step)]
    return [{"type": "http.request", "body": p, "more_body": i < len(pieces) - 1} for i, p in enumerate(pieces)]


def case(loop, meter, name, app, parts, n, rounds, per=1) -> dict:
    wrapped = PhasemeterMiddleware(app, meter)
    loop.run_until_complete(drive(app, parts, max(1, n // 10)))  # warm up both
    loop.run_until_complete(drive(wrapped, parts, max(1, n // 10)))
    bare, mw = [], []
    for _ in range(rounds):
        bare.append(loop.run_until_complete(drive(app, parts, n)))
        mw.append(loop.run_until_complete(drive(wrapped, parts, n)))
        meter.flush(10)  # keep the queue from filling: a full queue would drop, and be cheaper
    stats = wrapped.stats()
    assert stats["errors"] == 0 and not stats["skipped"], stats
    row = {"case": name, "recorded": stats["recorded"]}
    for i, clock in enumerate(("cpu", "wall")):
        b = statistics.median(x[i] for x in bare) * 1e6 / per
        m = statistics.median(x[i] for x in mw) * 1e6 / per
        row.update({f"{clock}_bare_us": b, f"{clock}_with_us": m, f"{clock}_overhead_us": m - b})
    return row


def reference_us(n: int = 20_000) -> float:
    """Thread CPU µs of json.loads on one SSE token chunk: the unit to scale
    the figures by when comparing machines (or a machine under load)."""
    data = content("tok")[6:-2]
    loads, t = json.loads, time.thread_time()
    for _ in range(n):
        loads(data)
    return (time.thread_time() - t) / n * 1e6


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--requests", type=int, default=3000, help="requests per round and case")
    ap.add_argument("--chunks", type=int, default=2000, help="content chunks in the per-chunk stream")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args(argv)
    meter = Meter("unused:9092", topic="bench", producer_factory=U.NullProducer, queue_size=1_000_000)
    loop = asyncio.new_event_loop()
    n, r = args.requests, args.rounds
    small, big = body_parts(request_body(200)), body_parts(request_body(256 * 1024))
    long_stream = [ROLE] + [content("tok") for _ in range(args.chunks)] + [content("", "stop"), USAGE]
    rows = [
        case(loop, meter, "per request, SSE (5 chunks), 0.2 KiB body", make_app(SHORT_STREAM, b"text/event-stream"),
             small, n, r),
        case(loop, meter, "per request, SSE (5 chunks), 256 KiB body", make_app(SHORT_STREAM, b"text/event-stream"),
             big, max(1, n // 10), r),
        case(loop, meter, "per request, JSON response, 0.2 KiB body", make_app([JSON_BODY], b"application/json"),
             small, n, r),
        case(loop, meter, f"per chunk, SSE stream of {args.chunks} chunks", make_app(long_stream, b"text/event-stream"),
             small, max(1, n // 300), r, per=len(long_stream)),
    ]
    meter.close()
    loop.close()
    print(f"PhasemeterMiddleware overhead (direct ASGI calls, median of {r} rounds, µs; "
          f"loop thread CPU | wall)")
    print(f"{'case':<46} {'bare':>7} {'with':>8} {'overhead':>9} | {'bare':>7} {'with':>8} {'overhead':>9}")
    for row in rows:
        print(f"{row['case']:<46} {row['cpu_bare_us']:>7.2f} {row['cpu_with_us']:>8.2f} "
              f"{row['cpu_overhead_us']:>9.2f} | {row['wall_bare_us']:>7.2f} {row['wall_with_us']:>8.2f} "
              f"{row['wall_overhead_us']:>9.2f}")
    ref = reference_us()
    print(f"reference: json.loads of one {len(content('tok')) - 8}-byte token chunk = {ref:.2f} µs CPU here")
    print(json.dumps({"reference_json_loads_us": ref, "rows": rows}))


if __name__ == "__main__":
    main()
