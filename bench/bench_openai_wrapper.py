"""What phasemeter.integrations.openai adds to the OpenAI SDK, per chunk and per request.

    python bench/bench_openai_wrapper.py [--chunks 2000] [--streams 10] [--requests 300] [--bootstrap HOST:PORT]

One run, the same local OpenAI-compatible server (tests/llm_server.py, in a
subprocess) for both, bare and instrumented clients alternating call by call
so that drift in machine load hits both alike:

* per chunk, isolated: the SDK's own chunk objects from a real stream,
  replayed through the bare iterator and through the wrapper's iterator
  (the code `instrument()` puts on every chunk: one generator step and
  `Call.observe`). Per-chunk samples with perf_counter_ns; the overhead is
  wrapped minus bare at each percentile.
* per chunk, in situ: whole streams from the server, timed between chunks
  as the caller sees them (SSE parsing and the SDK dominate; noisier).
* per request, isolated: a real 1-token stream's chunks replayed, bare and
  through the wrapper from `begin()` to `Meter.record()` (no I/O: the fixed
  cost per call, plus its four chunks).
* per request, in situ: whole calls, non-streaming and 1-token streams
  (a call takes milliseconds: the overhead drowns in the noise).

Without --bootstrap the Meter's producer discards events (its sender thread
still encodes every event, as in production); with it, events go to Kafka.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import subprocess
import sys
import time
from pathlib import Path

import openai

from phasemeter.integrations import openai as pm_openai
from phasemeter.producers import Meter

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402

TESTS = Path(__file__).resolve().parents[1] / "tests"
# The test suite's scripted server, in a process of its own so that its
# thread does not compete with the measured client for the GIL.
SERVE = """
import sys
sys.path.insert(0, sys.argv[1])
from llm_server import LLMServer, Script
with LLMServer() as srv:
    srv.default = Script(chunks=int(sys.argv[2]), usage="always")
    print(srv.base_url, flush=True)
    sys.stdin.read()
"""

MSG = [{"role": "user", "content": "hi"}]


def pct(samples: list[float], q: float) -> float:
    s = sorted(samples)
    return s[min(len(s) - 1, int(q * len(s)))]


def summary(bare: list[float], wrapped: list[float]) -> dict:
    """µs: both distributions and the wrapper's overhead at p50 and p99."""
    out = {"n": len(wrapped)}
    for q, name in ((0.5, "p50"), (0.99, "p99")):
        b, w = pct(bare, q) / 1000, pct(wrapped, q) / 1000
        out[name] = {"bare_us": round(b, 2), "wrapped_us": round(w, 2), "overhead_us": round(w - b, 2)}
    return out


def per_chunk_isolated(chunks: list, inst, rounds: int) -> dict:
    clock, bare, wrapped = time.perf_counter_ns, [], []
    for _ in range(rounds):
        for out, make in ((bare, lambda: iter(chunks)),
                          (wrapped, lambda: pm_openai._iterate(inst.begin(True, {"model": "m", "stream": True}),
                                                               iter(chunks)))):
            it = make()
            t = clock()
            for _chunk in it:
                now = clock()
                out.append(now - t)
                t = now
    return summary(bare, wrapped)


@contextlib.contextmanager
def server(chunks: int):
    """A local server whose every stream has `chunks` content chunks; yields its base URL."""
    proc = subprocess.Popen([sys.executable, "-c", SERVE, str(TESTS), str(chunks)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        yield proc.stdout.readline().strip()
    finally:
        proc.stdin.close()
        proc.wait(10)


def clients(base_url: str, meter):
    http = openai.DefaultHttpxClient()  # one pool for both: same connections, same warm-up
    plain = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, http_client=http)
    measured = openai.OpenAI(base_url=base_url, api_key="k", max_retries=0, http_client=http)
    return plain, measured, pm_openai.instrument(measured, meter)


def per_request_isolated(chunks: list, inst, n: int) -> dict:
    """A whole 1-token stream replayed (role, token, finish, usage chunks):
    begin() with its stream_options copy, every chunk, end() and Meter.record()."""
    clock, bare, wrapped = time.perf_counter_ns, [], []
    kwargs = {"model": "m", "messages": MSG, "stream": True}
    for _ in range(n):
        t = clock()
        for _chunk in iter(chunks):
            pass
        bare.append(clock() - t)
        t = clock()
        for _chunk in pm_openai._iterate(inst.begin(True, kwargs), iter(chunks)):
            pass
        wrapped.append(clock() - t)
    return summary(bare, wrapped)


def per_chunk_in_situ(plain, measured, streams: int) -> dict:
    clock, bare, wrapped = time.perf_counter_ns, [], []
    for _ in range(streams):
        for client, out in ((plain, bare), (measured, wrapped)):
            stream = client.chat.completions.create(model="m", messages=MSG, stream=True)
            t = clock()
            for _chunk in stream:
                now = clock()
                out.append(now - t)
                t = now
    return summary(bare, wrapped)


def per_request(plain, measured, n: int, stream: bool) -> dict:
    clock, bare, wrapped = time.perf_counter_ns, [], []
    for _ in range(n):
        for client, out in ((plain, bare), (measured, wrapped)):
            t = clock()
            if stream:
                for _chunk in client.chat.completions.create(model="m", messages=MSG, stream=True):
                    pass
            else:
                client.chat.completions.create(model="m", messages=MSG)
            out.append(clock() - t)
    return summary(bare, wrapped)


def run(n_chunks: int = 2000, streams: int = 10, requests: int = 300, bootstrap: str | None = None) -> dict:
    meter = Meter(bootstrap or "null:0", topic="bench-openai-wrapper",
                  producer_factory=None if bootstrap else U.NullProducer)
    result, recorded = {}, 0
    gc.collect()
    gc.freeze()  # a full collection mid-sample would land on one side only
    try:
        with server(n_chunks) as url:
            plain, measured, inst = clients(url, meter)
            chunks = list(plain.chat.completions.create(model="m", messages=MSG, stream=True))  # real SDK objects
            per_chunk_in_situ(plain, measured, 2)  # warm-up
            result["per_chunk_isolated"] = per_chunk_isolated(chunks, inst, streams)
            result["per_chunk_in_situ"] = per_chunk_in_situ(plain, measured, streams)
            recorded += inst.stats["recorded"]
        with server(1) as url:
            plain, measured, inst = clients(url, meter)
            per_request(plain, measured, 20, stream=True)  # warm-up
            one = list(plain.chat.completions.create(model="m", messages=MSG, stream=True))
            result["per_request_isolated_1_token"] = per_request_isolated(one, inst, requests * 10)
            result["per_request_whole"] = per_request(plain, measured, requests, stream=False)
            result["per_request_stream_1_token"] = per_request(plain, measured, requests, stream=True)
            recorded += inst.stats["recorded"]
    finally:
        gc.unfreeze()
    meter.close(5)
    result["recorded"] = recorded
    result["meter"] = meter.stats().as_dict()
    return result


def render(r: dict) -> str:
    lines = ["| measure | n | p50 bare µs | p50 wrapped µs | p50 overhead µs | p99 bare µs | p99 wrapped µs | p99 overhead µs |",
             "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for name in ("per_chunk_isolated", "per_chunk_in_situ", "per_request_isolated_1_token", "per_request_whole",
                 "per_request_stream_1_token"):
        m = r[name]
        lines.append(f"| {name} | {m['n']} | {m['p50']['bare_us']} | {m['p50']['wrapped_us']} | "
                     f"{m['p50']['overhead_us']} | {m['p99']['bare_us']} | {m['p99']['wrapped_us']} | "
                     f"{m['p99']['overhead_us']} |")
    lines.append(f"\nevents recorded: {r['recorded']}; meter: {r['meter']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--chunks", type=int, default=2000, help="chunks per stream")
    ap.add_argument("--streams", type=int, default=10, help="rounds of streams, each side")
    ap.add_argument("--requests", type=int, default=300, help="whole calls, each side")
    ap.add_argument("--bootstrap", help="send events to this Kafka instead of discarding them")
    args = ap.parse_args(argv)
    print(render(run(args.chunks, args.streams, args.requests, args.bootstrap)))


if __name__ == "__main__":
    main()
