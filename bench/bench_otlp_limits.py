"""Memory and CPU of one OTLP request at the receiver's limits, per request.

    python bench/bench_otlp_limits.py                          # this checkout
    python bench/bench_otlp_limits.py --against /tmp/base      # and the code in /tmp/base, same run: records

Each case runs in a fresh child process, so its peak RSS is its own: the
decoding and mapping of one request body (otlp_map.map_request, with the
span limit where the code has one) and, for the gzip cases, its inflation
(otlp_wire.inflate, or the receiver's inflate in older code). Figures: CPU
seconds and peak RSS above the child's RSS before the request. Cases, at the
default limits (4 MiB body, 8192 spans):

  empty-spans-pb     4 MiB of protobuf holding 2M empty spans (refused: over the span limit)
  empty-spans-json   4 MiB of OTLP-JSON holding 1.3M empty spans (refused: over the span limit)
  max-spans-pb       8192 vLLM spans, protobuf (taken)
  attrs-flood-pb     one span carrying 2M empty attributes in 4 MiB (the multiplier the span limit leaves)
  gzip-bomb          4 MiB inflated from 4 KiB, in 20 gzip members (refused: 413)
  4-json-floods-http four empty-spans-json requests at once to a real Receiver over HTTP (the
                     whole process: request bodies, server, decoding)

With --against, bench/results/<date>-otlp-limits.json holds each figure of
this checkout beside the same case on the other code as its reference.
--code-root (used by the children) puts a checkout first on sys.path; a
checkout of this repository needs phasemeter/producers and
phasemeter/stream_jobs linked to its producers/ and stream_jobs/.
"""

from __future__ import annotations

import argparse
import gzip
import inspect
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from phasemeter.integrations.otlp_wire import varint

HERE = Path(__file__).resolve().parent
CASES = ("empty-spans-pb", "empty-spans-json", "max-spans-pb", "attrs-flood-pb", "gzip-bomb", "4-json-floods-http")
CONCURRENT = 4
LIMIT = 4 * 1024 * 1024
T0_NS = 1_764_000_000 * 10**9


def _len_field(number: int, payload: bytes) -> bytes:
    return varint(number << 3 | 2) + varint(len(payload)) + payload


KINDS = {"empty-spans-pb": (None, "application/x-protobuf", "identity"),
         "empty-spans-json": (None, "application/json", "identity"),
         "max-spans-pb": (None, "application/x-protobuf", "identity"),
         "attrs-flood-pb": (None, "application/x-protobuf", "identity"),
         "gzip-bomb": (None, "application/json", "gzip"),
         "4-json-floods-http": (None, "application/json", "identity")}


def body_of(case: str) -> tuple[bytes, str, str]:
    """(body, content type, content encoding) of a case."""
    if case == "empty-spans-pb":  # request{resource_spans{scope_spans{spans: 2M x empty}}}
        spans = b"\x12\x00" * ((LIMIT - 16) // 2)
        return _len_field(1, _len_field(2, spans)), "application/x-protobuf", "identity"
    if case == "empty-spans-json":
        n = (LIMIT - 60) // 3
        return (b'{"resourceSpans":[{"scopeSpans":[{"spans":[' + b",".join([b"{}"] * n) + b"]}]}]}",
                "application/json", "identity")
    if case == "max-spans-pb":
        from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
        from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
        from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span

        def kv(k, v):
            return KeyValue(key=k, value=AnyValue(**{{int: "int_value", float: "double_value",
                                                      str: "string_value"}[type(v)]: v}))
        attrs = {"gen_ai.response.model": "llama-3.1-8b", "gen_ai.usage.prompt_tokens": 1500,
                 "gen_ai.usage.completion_tokens": 120, "gen_ai.latency.time_to_first_token": 0.21,
                 "gen_ai.latency.e2e": 2.4, "gen_ai.latency.time_in_queue": 0.01}
        ss = ScopeSpans(spans=[Span(name="llm_request", span_id=i.to_bytes(8, "big"), trace_id=b"\x01" * 16,
                                    start_time_unix_nano=T0_NS + i, end_time_unix_nano=T0_NS + i + 2 * 10**9,
                                    attributes=[kv(k, v) for k, v in attrs.items()] +
                                    [kv("gen_ai.request.id", f"cmpl-{i}")]) for i in range(8192)])
        req = ExportTraceServiceRequest(resource_spans=[ResourceSpans(scope_spans=[ss])])
        return req.SerializeToString(), "application/x-protobuf", "identity"
    if case == "attrs-flood-pb":  # one span, attributes (field 9) of empty KeyValues
        span = b"\x0a\x0b" + b"x" * 11 + b"\x4a\x00" * ((LIMIT - 64) // 2)
        return _len_field(1, _len_field(2, _len_field(2, span))), "application/x-protobuf", "identity"
    if case == "4-json-floods-http":
        return body_of("empty-spans-json")
    if case == "gzip-bomb":
        member = gzip.compress(b" " * (LIMIT // 20 + 1))
        return member * 21, "application/json", "gzip"
    raise ValueError(case)


def run_case(case: str, body_file: str) -> dict:
    """In the child: one request's decoding, timed and measured. The body
    is read from a file the parent wrote, so building it never sets the
    child's peak RSS."""
    from phasemeter.integrations import otlp_map

    try:
        from phasemeter.integrations.otlp_wire import inflate
    except ImportError:  # the code before otlp_wire
        from phasemeter.integrations.otlp_receiver import inflate
    _, ctype, encoding = KINDS[case]
    body = Path(body_file).read_bytes()
    if case == "4-json-floods-http":
        return run_http(case, body, ctype)
    kwargs = {"max_spans": 8192} if "max_spans" in inspect.signature(otlp_map.map_request).parameters else {}
    # The peak is this process's own high-water mark, reset here: ru_maxrss
    # would carry the parent's across fork and exec (it built the bodies).
    Path("/proc/self/clear_refs").write_text("5")
    before = _status_mb("VmRSS")
    cpu = time.process_time()
    try:
        if encoding != "identity":
            body = inflate(body, encoding, LIMIT)
        m = otlp_map.map_request(body, ctype, now=T0_NS / 1e9 + 3600, **kwargs)
        outcome = f"mapped {len(m.events)}, rejected {len(m.rejected)}, ignored {m.ignored}"
    except Exception as exc:  # noqa: BLE001 (the outcome is what is measured)
        outcome = f"{type(exc).__name__}: {str(exc)[:80]}"
    cpu = time.process_time() - cpu
    peak = _status_mb("VmHWM")
    return {"case": case, "cpu_s": round(cpu, 4), "peak_rss_mb": round(peak - before, 1), "outcome": outcome}


def run_http(case: str, body: bytes, ctype: str) -> dict:
    """In the child: CONCURRENT requests at once to a real Receiver (HTTP),
    its Meter pointed at a port nothing listens on (the floods are refused,
    or mapped to nothing, before any event is queued)."""
    import socket
    import threading
    import urllib.error
    import urllib.request

    from phasemeter.integrations.otlp_receiver import Receiver
    from phasemeter.producers import Meter

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        unused = s.getsockname()[1]
    meter = Meter(f"127.0.0.1:{unused}", queue_size=10_000, flush_timeout_s=0)
    rx = Receiver(meter, port=0, queue_size=10_000, max_body_bytes=LIMIT, log=lambda line: None).start()
    statuses: list = []

    def post() -> None:
        req = urllib.request.Request(rx.url, data=body, method="POST", headers={"Content-Type": ctype})
        try:
            with urllib.request.urlopen(req, timeout=100) as resp:
                statuses.append(resp.status)
        except urllib.error.HTTPError as exc:
            statuses.append(exc.code)

    Path("/proc/self/clear_refs").write_text("5")
    before = _status_mb("VmRSS")
    cpu = time.process_time()
    threads = [threading.Thread(target=post) for _ in range(CONCURRENT)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    cpu = time.process_time() - cpu
    peak = _status_mb("VmHWM")
    rx.stop(0)
    return {"case": case, "cpu_s": round(cpu, 4), "peak_rss_mb": round(peak - before, 1),
            "outcome": f"{CONCURRENT} requests at once: HTTP {sorted(statuses)}"}


def _status_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(case: str, root: str | None, body_file: Path) -> dict:
    cmd = [sys.executable, str(Path(__file__).resolve()), "--case", case, "--body", str(body_file)]
    if root:
        cmd += ["--code-root", root]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--case", choices=CASES, help="(child) run one case and print its figures")
    ap.add_argument("--code-root", help="(child) a checkout to import phasemeter from")
    ap.add_argument("--body", help="(child) the file holding the case's body")
    ap.add_argument("--against", help="another checkout, measured in the same run as the reference; records")
    args = ap.parse_args()
    if args.case:
        if args.code_root:
            sys.path.insert(0, args.code_root)
        print(json.dumps(run_case(args.case, args.body)))
        return
    with tempfile.TemporaryDirectory() as tmp:
        files = {}
        for c in CASES:
            files[c] = Path(tmp) / c
            files[c].write_bytes(body_of(c)[0])
        now = {c: child(c, None, files[c]) for c in CASES}
        ref = {c: child(c, args.against, files[c]) for c in CASES} if args.against else {}
    for c in CASES:
        print(f"{c:18} this: {now[c]['cpu_s']:7.3f} s CPU {now[c]['peak_rss_mb']:8.1f} MB  {now[c]['outcome']}")
        if ref:
            print(f"{'':18} ref:  {ref[c]['cpu_s']:7.3f} s CPU {ref[c]['peak_rss_mb']:8.1f} MB  {ref[c]['outcome']}")
    if not ref:
        return
    sys.path.insert(0, str(HERE))
    from results import figure, record

    figures = []
    for c in CASES:
        for key, unit, what in (("cpu_s", "s", "CPU seconds"), ("peak_rss_mb", "MB", "peak RSS added")):
            figures.append(figure("otlp-request-cost", f"{c}: {what} for one request ({now[c]['outcome']})",
                                  now[c][key], unit, reference={"what": f"code before the limits ({ref[c]['outcome']})",
                                                                "value": ref[c][key]},
                                  target="bounded by the body and span limits", met=None))
    print(record("otlp-limits", figures, notes="one request decoded and mapped per child process; reference: "
                                               "the same case on the code given by --against, same run"))


if __name__ == "__main__":
    main()
