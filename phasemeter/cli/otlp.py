"""`phasemeter otlp`: an OTLP/HTTP (4318) and OTLP/gRPC (4317) trace receiver
that turns LLM request spans (vLLM, SGLang, OTel GenAI instrumentations) into
generation events on the raw topic. docs/ingest/otlp.md says what is mapped,
ignored and rejected. gRPC is served when grpcio is installed (the
`otlp-grpc` extra), unless `--grpc-port 0`.

Runs until SIGINT or SIGTERM, then stops listening and flushes the emitter.
"""

from __future__ import annotations

import signal
import threading


GRPC_PORT = 4317  # OTLP/gRPC's (otlp_grpc.DEFAULT_PORT, not imported: it would load grpc for --help)
GRPC_EXTRA = "pip install 'phasemeter[otlp-grpc]'"


def register(sub, common, window_flags) -> None:  # noqa: ARG001 (the extension signature)
    from phasemeter.integrations.otlp_limits import DEFAULT_MAX_BODY, DEFAULT_MAX_SPANS  # not the mapping

    p = sub.add_parser("otlp", help="receive OTLP traces, HTTP and gRPC (vLLM --otlp-traces-endpoint), "
                                    "into the raw topic")
    common(p)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=4318, help="OTLP/HTTP port (default 4318)")
    p.add_argument("--grpc-port", type=int, default=None,
                   help=f"OTLP/gRPC port; 0 turns gRPC off (default {GRPC_PORT} when grpcio is installed, "
                        "else off; asking for a port without grpcio is an error)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY,
                   help="larger requests are refused (HTTP 413, gRPC RESOURCE_EXHAUSTED), also after gzip "
                        f"(default {DEFAULT_MAX_BODY})")
    p.add_argument("--model", help="model label for spans that carry none (vLLM's V1 engine sends no model name)")
    p.add_argument("--gateway", help="gateway label put on every event (default: none)")
    p.add_argument("--envelope-size", type=int, default=100,
                   help="events per Kafka message (1..2000; default 100: Kafka's per-message cost dominates)")
    p.add_argument("--queue-size", type=int, default=10_000,
                   help="emitter queue bound; a request that does not fit is answered 503 / UNAVAILABLE (retry)")
    p.add_argument("--max-spans", type=int, default=DEFAULT_MAX_SPANS,
                   help="spans one request may carry; more is refused whole (HTTP 413, gRPC RESOURCE_EXHAUSTED, "
                        f"not retried); at most --queue-size (default {DEFAULT_MAX_SPANS})")
    p.add_argument("--workers", type=int, default=16,
                   help="threads serving each transport (default 16); one more HTTP connection gets "
                        "503 + Retry-After; gRPC takes twice as many calls at once, then RESOURCE_EXHAUSTED")
    p.add_argument("--read-timeout", type=float, default=10.0, metavar="S",
                   help="seconds an HTTP connection has for each of a request's line (so: how long it may idle), "
                        "headers and body (default 10)")
    p.add_argument("--report-every", type=int, default=100, help="print counts every N requests (and at exit)")
    p.set_defaults(func=run)


def _check(args) -> None:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is not a port number")
    if args.grpc_port is not None and not 0 <= args.grpc_port <= 65535:
        raise ValueError(f"--grpc-port {args.grpc_port} is not a port number")
    for flag, value in (("--max-body-bytes", args.max_body_bytes), ("--queue-size", args.queue_size),
                        ("--report-every", args.report_every), ("--max-spans", args.max_spans),
                        ("--workers", args.workers)):
        if value < 1:
            raise ValueError(f"{flag} must be positive, got {value}")
    if args.max_spans > args.queue_size:
        raise ValueError(f"--max-spans {args.max_spans} is over --queue-size {args.queue_size}: such a request "
                         "could never be queued")
    if args.workers > 1000:
        raise ValueError(f"--workers must be at most 1000, got {args.workers}")
    if not 0 < args.read_timeout <= 3600:  # also refuses nan and inf
        raise ValueError(f"--read-timeout must be in (0, 3600] seconds, got {args.read_timeout}")
    if not 1 <= args.envelope_size <= 2000:
        raise ValueError(f"--envelope-size must be in 1..2000, got {args.envelope_size}")
    for flag, value in (("--model", args.model), ("--gateway", args.gateway)):
        if value is not None and not 0 < len(value) <= 200:
            raise ValueError(f"{flag} must be 1..200 characters")


def _grpc_port(args) -> tuple[int, str]:
    """The gRPC port to serve (0: none) and, when none, why. ValueError (exit 2)
    when a port was asked for and grpcio is missing."""
    import importlib.util

    if args.grpc_port == 0:
        return 0, "off (--grpc-port 0)"
    if importlib.util.find_spec("grpc") is None:
        if args.grpc_port is not None:
            raise ValueError(f"--grpc-port {args.grpc_port} needs grpcio: {GRPC_EXTRA} (or --grpc-port 0)")
        return 0, f"off (grpcio is not installed: {GRPC_EXTRA})"
    return (GRPC_PORT if args.grpc_port is None else args.grpc_port), ""


def run(args, settings) -> int:
    from kafka.errors import KafkaError

    from phasemeter.callers import allowed_names
    from phasemeter.integrations.otlp_receiver import Receiver
    from phasemeter.kafka_local import bootstrap_servers, ensure_topics
    from phasemeter.producers import Meter

    _check(args)
    grpc_port, grpc_off = _grpc_port(args)
    bootstrap = bootstrap_servers(settings)
    # Envelopes carry no Kafka key; that is safe here: each is whole generations,
    # and the worker finds duplicates by request_id in the store, not by partition.
    meter = Meter(bootstrap, topic=settings.topic, gateway=args.gateway, queue_size=args.queue_size,
                  envelope_size=args.envelope_size, producer_config=settings.kafka_client_config())
    try:  # bind first: a taken port fails at once, not after Kafka's timeouts
        rx = Receiver(meter, host=args.host, port=args.port, queue_size=args.queue_size,
                      max_body_bytes=args.max_body_bytes, max_spans=args.max_spans, default_model=args.model,
                      report_every=args.report_every, workers=args.workers, read_timeout_s=args.read_timeout,
                      allowed_hosts=allowed_names(args.host, settings.allowed_hosts),
                      log=lambda line: print(line, flush=True))
    except OSError as exc:
        meter.close(0)
        raise RuntimeError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    grpc_rx = None
    if grpc_port:
        from phasemeter.integrations.otlp_grpc import GrpcReceiver

        try:  # stopped by rx.stop() from here on
            grpc_rx = GrpcReceiver(rx, host=args.host, port=grpc_port, max_workers=args.workers,
                                   max_concurrent_rpcs=2 * args.workers)
        except OSError as exc:
            rx.server.server_close()
            meter.close(0)
            raise RuntimeError(f"OTLP/gRPC: {exc}; --grpc-port 0 turns gRPC off") from None
    try:  # as the worker does: a cluster without auto-creation would fail every send
        ensure_topics(bootstrap, [settings.topic], settings.topic_partitions, settings.kafka_client_config())
    except KafkaError as exc:
        rx.server.server_close()
        if grpc_rx is not None:
            grpc_rx.stop(0)
        meter.close(0)
        raise RuntimeError(f"Kafka at {bootstrap}: {exc}") from None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    rx.start()
    if grpc_rx is not None:
        grpc_rx.start()
    grpc_line = f"OTLP/gRPC on {grpc_rx.address}" if grpc_rx is not None else f"OTLP/gRPC {grpc_off}"
    print(f"phasemeter otlp: listening for OTLP/HTTP on {rx.url}, {grpc_line} -> Kafka {bootstrap}, "
          f"topic {settings.topic}", flush=True)
    # A remote exporter's Host name is refused (403) until it is listed: say which ones are served.
    print(f"phasemeter otlp: HTTP answers Host {', '.join(sorted(rx.allowed_hosts))} "
          "(PHASEMETER_ALLOWED_HOSTS adds names)", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        rx.stop()  # stop listening, flush the emitter, print the counts
    return 0
