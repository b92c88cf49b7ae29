"""Spans per second the OTLP receiver maps and publishes on one core, against
references measured in the same run on the same requests.

    python bench/bench_otlp.py [--bootstrap HOST:PORT] [--requests 200] [--spans 100]

Without --bootstrap a local broker is started (and stopped). The process is
pinned to one CPU (os.sched_setaffinity), so the emitter's sender thread
(JSON encoding, kafka-python) shares that core with the mapping, as it
would in a receiver on a busy host. Each request is an ExportTraceServiceRequest
of `--spans` vLLM llm_request spans plus one non-LLM span per ten, built with
the real opentelemetry.proto classes, as vLLM's BatchSpanProcessor sends them.

Paths, each over the same bodies:
  parse        ExportTraceServiceRequest.ParseFromString alone (the floor)
  map          otlp_map.map_request (parse + mapping)
  record       Meter.record of the already-mapped events, until flushed to Kafka
               (the emitter alone: the reference for map+publish)
  map+publish  Receiver.handle(map_request(...)), until flushed: the receiver's work,
               one Kafka message per event, then envelopes of 100 (`--envelope-size`)
  http         the same through the HTTP server (envelopes of 100), from a client
               process on the other CPU
  grpc         the same through the gRPC server (otlp_grpc, envelopes of 100), from a
               grpcio client process on the other CPU; left out without grpcio
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import _util as U  # noqa: E402

from phasemeter.integrations.otlp_map import PROTOBUF, map_request  # noqa: E402
from phasemeter.integrations.otlp_receiver import Receiver  # noqa: E402
from phasemeter.producers import Meter  # noqa: E402


def build_bodies(n_requests: int, n_spans: int) -> list[bytes]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.resource.v1.resource_pb2 import Resource
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

    def kv(k, v):
        value = (AnyValue(string_value=v) if isinstance(v, str) else AnyValue(int_value=v)
                 if isinstance(v, int) else AnyValue(double_value=v))
        return KeyValue(key=k, value=value)

    t0 = int((time.time() - 3600) * 1e9)
    resource = Resource(attributes=[kv("service.name", "vllm"), kv("service.instance.id", "vllm-0")])
    bodies, i = [], 0
    for _ in range(n_requests):
        spans = []
        for j in range(n_spans):
            i += 1
            start = t0 + i * 1_000_000
            if j % 10 == 9:
                spans.append(Span(trace_id=os.urandom(16), span_id=os.urandom(8), name="GET /health",
                                  start_time_unix_nano=start, end_time_unix_nano=start + 10**6,
                                  attributes=[kv("http.route", "/health")]))
                continue
            attrs = {"gen_ai.request.id": f"cmpl-{uuid.uuid4().hex}", "gen_ai.response.model": "llama-3.1-8b",
                     "gen_ai.usage.prompt_tokens": 1000 + i % 3000, "gen_ai.usage.completion_tokens": 50 + i % 400,
                     "gen_ai.latency.time_in_queue": 0.004, "gen_ai.latency.time_to_first_token": 0.18,
                     "gen_ai.latency.e2e": 1.9, "gen_ai.latency.time_in_model_prefill": 0.17,
                     "gen_ai.latency.time_in_model_decode": 1.7, "gen_ai.latency.time_in_model_inference": 1.87,
                     "gen_ai.request.max_tokens": 512, "gen_ai.request.temperature": 0.7}
            spans.append(Span(trace_id=os.urandom(16), span_id=os.urandom(8), name="llm_request",
                              kind=Span.SPAN_KIND_SERVER, start_time_unix_nano=start,
                              end_time_unix_nano=start + 1_900_000_000,
                              attributes=[kv(k, v) for k, v in attrs.items()]))
        req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(resource=resource,
                                                                      scope_spans=[ScopeSpans(spans=spans)])])
        bodies.append(req.SerializeToString())
    return bodies


def timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def new_meter(bootstrap: str, n: int, envelope_size: int = 1) -> Meter:
    return Meter(bootstrap, topic=f"bench-otlp-{uuid.uuid4().hex[:8]}", queue_size=n + 10, flush_timeout_s=120,
                 envelope_size=envelope_size)


def warm(meter: Meter) -> None:
    """Connect and fetch metadata outside the timed region."""
    meter.record(model="warm", input_tokens=1, output_tokens=0, t0=time.time(), e2e_s=0.1)
    assert meter.flush(60)


HTTP_CLIENT = r"""
import http.client, os, sys
os.sched_setaffinity(0, {int(sys.argv[3])})
bodies = [open(p, "rb").read() for p in sys.argv[4:]]
conn = http.client.HTTPConnection("127.0.0.1", int(sys.argv[1]))
for body in bodies:
    conn.request("POST", "/v1/traces", body, {"Content-Type": sys.argv[2]})
    r = conn.getresponse(); r.read()
    assert r.status == 200, r.status
"""


GRPC_CLIENT = r"""
import os, sys, grpc
os.sched_setaffinity(0, {int(sys.argv[2])})
bodies = [open(p, "rb").read() for p in sys.argv[3:]]
with grpc.insecure_channel(f"127.0.0.1:{sys.argv[1]}") as channel:
    export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
    for body in bodies:
        export(body, timeout=60)  # raises unless OK
"""


def run(bootstrap: str, bodies: list[bytes], n_spans: int, tmp: Path, client_cpu: int) -> list[list]:
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    total = len(bodies) * n_spans
    parse = timed(lambda: [ExportTraceServiceRequest.FromString(b) for b in bodies])
    mapped = []
    map_s = timed(lambda: mapped.extend(map_request(b, PROTOBUF) for b in bodies))
    events = [e for m in mapped for e in m.events]

    def record_all(meter):
        for e in events:
            meter.record(model=e["model"], input_tokens=e["input_tokens"], output_tokens=e["output_tokens"],
                         t0=e["t0"], ttft_s=e["ttft_s"], e2e_s=e["e2e_s"], queue_s=e["queue_s"],
                         cached_input_tokens=e["cached_input_tokens"], status=e["status"],
                         finish_reason=e["finish_reason"], request_id=e["request_id"], replica=e["replica"])
        assert meter.flush(120)

    record_s = {}
    for size in (1, 100):
        meter = new_meter(bootstrap, len(events), size)
        warm(meter)
        record_s[size] = timed(lambda: record_all(meter))
        meter.close()

    publish_s = {}
    for size in (1, 100):
        rx = Receiver(new_meter(bootstrap, len(events), size), port=0, queue_size=len(events) + 10,
                      log=lambda line: None)
        warm(rx.meter)
        publish_s[size] = timed(lambda: ([rx.handle(map_request(b, PROTOBUF)) for b in bodies],
                                         rx.meter.flush(120)))
        assert rx.meter.stats().dropped == 0 and rx.mapped == len(events)
        rx.server.server_close()
        rx.meter.close()

    rx = Receiver(new_meter(bootstrap, len(events), 100), port=0, queue_size=len(events) + 10,
                  log=lambda line: None)
    warm(rx.meter)
    rx.start()
    paths = []
    for i, b in enumerate(bodies):
        paths.append(tmp / f"req{i}.pb")
        paths[-1].write_bytes(b)
    cmd = [sys.executable, "-c", HTTP_CLIENT, str(rx.server.server_address[1]), PROTOBUF, str(client_cpu),
           *map(str, paths)]
    http_s = timed(lambda: (subprocess.run(cmd, check=True, timeout=600), rx.meter.flush(120)))
    assert rx.mapped == len(events) and rx.meter.stats().sent == len(events) + 1
    rx.stop()

    grpc_s = None
    if importlib.util.find_spec("grpc") is not None:  # else grpcio is not installed: no gRPC row
        from phasemeter.integrations.otlp_grpc import GrpcReceiver

        rx = Receiver(new_meter(bootstrap, len(events), 100), port=0, queue_size=len(events) + 10,
                      log=lambda line: None)
        g = GrpcReceiver(rx, port=0, max_workers=4)
        warm(rx.meter)
        rx.start()
        g.start()
        cmd = [sys.executable, "-c", GRPC_CLIENT, str(g.port), str(client_cpu), *map(str, paths)]
        grpc_s = timed(lambda: (subprocess.run(cmd, check=True, timeout=600), rx.meter.flush(120)))
        assert rx.mapped == len(events) and rx.meter.stats().sent == len(events) + 1
        rx.stop()

    rows = [["parse (protobuf only)", parse], ["map (parse + mapping)", map_s],
            ["record (Meter.record of the mapped events, one per message)", record_s[1]],
            ["map+publish (Receiver.handle, one event per message)", publish_s[1]],
            ["record (Meter.record of the mapped events, envelopes of 100)", record_s[100]],
            ["map+publish (Receiver.handle, envelopes of 100)", publish_s[100]],
            ["http (POST /v1/traces, envelopes of 100)", http_s]]
    if grpc_s is not None:
        rows.append(["grpc (TraceService/Export, envelopes of 100)", grpc_s])
    return [[name, total, round(total / s), U.ratio(parse, s)] for name, s in rows]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", help="Kafka to publish to (default: start a local broker)")
    ap.add_argument("--requests", type=int, default=200)
    ap.add_argument("--spans", type=int, default=100, help="spans per request (vLLM's batch default is 512)")
    ap.add_argument("--cpu", type=int, default=0, help="the one CPU this process runs on")
    args = ap.parse_args()
    U.exit_cleanly_on_sigterm()
    cpus = sorted(os.sched_getaffinity(0))
    client_cpu = next((c for c in cpus if c != args.cpu), args.cpu)  # the HTTP client's, when there is one
    bodies = build_bodies(args.requests, args.spans)
    with U.broker(args.bootstrap) as bootstrap, tempfile.TemporaryDirectory() as tmp:
        os.sched_setaffinity(0, {args.cpu})  # after the broker started: it keeps every CPU
        rows = run(bootstrap, bodies, args.spans, Path(tmp), client_cpu)
    info = U.machine_info()
    print(f"# OTLP receiver, one core (cpu {args.cpu}); {args.requests} requests x {args.spans} spans "
          f"(9 in 10 are LLM spans); {info['cpu'] if 'cpu' in info else ''}, Python {info['python']}")
    print(U.md_table(["path", "spans", "spans/s", "speed vs parse"], rows))


if __name__ == "__main__":
    main()
