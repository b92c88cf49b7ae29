"""`phasemeter otlp`: an OTLP/HTTP trace receiver that turns LLM request
spans (vLLM, SGLang, OTel GenAI instrumentations) into generation events on
the raw topic. docs/ingest/otlp.md says what is mapped, ignored and rejected.

Runs until SIGINT or SIGTERM, then stops listening and flushes the emitter.
"""

from __future__ import annotations

import signal
import threading


def register(sub, common, window_flags) -> None:  # noqa: ARG001 (the extension signature)
    from phasemeter.integrations.otlp_receiver import DEFAULT_MAX_BODY

    p = sub.add_parser("otlp", help="receive OTLP/HTTP traces (vLLM --otlp-traces-endpoint) into the raw topic")
    common(p)
    p.add_argument("--host", default="127.0.0.1", help="bind address (default 127.0.0.1; 0.0.0.0 for all)")
    p.add_argument("--port", type=int, default=4318, help="port (default 4318, OTLP/HTTP's)")
    p.add_argument("--max-body-bytes", type=int, default=DEFAULT_MAX_BODY,
                   help=f"larger request bodies are refused with 413, also after gzip (default {DEFAULT_MAX_BODY})")
    p.add_argument("--model", help="model label for spans that carry none (vLLM's V1 engine sends no model name)")
    p.add_argument("--gateway", help="gateway label put on every event (default: none)")
    p.add_argument("--envelope-size", type=int, default=100,
                   help="events per Kafka message (1..2000; default 100: Kafka's per-message cost dominates)")
    p.add_argument("--queue-size", type=int, default=10_000,
                   help="emitter queue bound; a request that does not fit is answered 503 (retry)")
    p.add_argument("--report-every", type=int, default=100, help="print counts every N requests (and at exit)")
    p.set_defaults(func=run)


def _check(args) -> None:
    if not 0 <= args.port <= 65535:
        raise ValueError(f"--port {args.port} is not a port number")
    for flag, value in (("--max-body-bytes", args.max_body_bytes), ("--queue-size", args.queue_size),
                        ("--report-every", args.report_every)):
        if value < 1:
            raise ValueError(f"{flag} must be positive, got {value}")
    if not 1 <= args.envelope_size <= 2000:
        raise ValueError(f"--envelope-size must be in 1..2000, got {args.envelope_size}")
    for flag, value in (("--model", args.model), ("--gateway", args.gateway)):
        if value is not None and not 0 < len(value) <= 200:
            raise ValueError(f"{flag} must be 1..200 characters")


def run(args, settings) -> int:
    from kafka.errors import KafkaError

    from phasemeter.integrations.otlp_receiver import Receiver
    from phasemeter.kafka_local import bootstrap_servers, ensure_topics
    from phasemeter.producers import Meter

    _check(args)
    bootstrap = bootstrap_servers(settings)
    # Envelopes carry no Kafka key; that is safe here: each is whole generations,
    # and the worker finds duplicates by request_id in the store, not by partition.
    meter = Meter(bootstrap, topic=settings.topic, gateway=args.gateway, queue_size=args.queue_size,
                  envelope_size=args.envelope_size, producer_config=settings.kafka_client_config())
    try:  # bind first: a taken port fails at once, not after Kafka's timeouts
        rx = Receiver(meter, host=args.host, port=args.port, queue_size=args.queue_size,
                      max_body_bytes=args.max_body_bytes, default_model=args.model,
                      report_every=args.report_every, log=lambda line: print(line, flush=True))
    except OSError as exc:
        meter.close(0)
        raise RuntimeError(f"cannot listen on {args.host}:{args.port}: {exc.strerror or exc}") from None
    try:  # as the worker does: a cluster without auto-creation would fail every send
        ensure_topics(bootstrap, [settings.topic], settings.topic_partitions, settings.kafka_client_config())
    except KafkaError as exc:
        rx.server.server_close()
        meter.close(0)
        raise RuntimeError(f"Kafka at {bootstrap}: {exc}") from None
    stop = threading.Event()
    previous = {s: signal.signal(s, lambda signum, frame: stop.set()) for s in (signal.SIGINT, signal.SIGTERM)}
    rx.start()
    print(f"phasemeter otlp: listening on {rx.url} -> Kafka {bootstrap}, topic {settings.topic}", flush=True)
    try:
        while not stop.wait(0.5):
            pass
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)
        rx.stop()  # stop listening, flush the emitter, print the counts
    return 0
