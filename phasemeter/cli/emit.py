"""`phasemeter emit`: NDJSON event lines (files or stdin) -> the raw Kafka topic.

For gateways not written in Python (they write NDJSON, this sends it) and for
backfills. Every line is checked with the worker's own validation
(integrations/ndjson.py) before it is sent, so a line the worker would
dead-letter is refused here with the same reason code, and never sent.
"Sent" means acknowledged by Kafka (acks=all), not merely handed over.

Exit status: 0 every line sent (or valid, with --dry-run); 1 a line refused
or a send failed; 2 a bad flag or a missing file, and then nothing is sent.
"""

from __future__ import annotations

import io
import json
import os
import re
import sys
import threading
import time
from collections import Counter
from dataclasses import dataclass, field

from phasemeter.timeparse import ArgError

# phasemeter.integrations.ndjson (and the worker's validation behind it) is
# imported where it is used: every `phasemeter` command builds this parser.

_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")  # Kafka's rule for topic names
_WINDOW = 10_000  # unacknowledged messages at most: kafka-python buffers without a bound
_READ_BUFFER = 1 << 20


def register(sub, common, window_flags) -> None:  # noqa: ARG001 (the extension signature)
    p = sub.add_parser("emit", help="send NDJSON events (files or stdin) to Kafka, checked as the worker checks them")
    common(p)
    p.add_argument("files", nargs="*", metavar="FILE", help="NDJSON files, sent in order; '-' or none: stdin")
    p.add_argument("--topic", help="raw event topic (default: env PHASEMETER_TOPIC, else phasemeter.generations)")
    p.add_argument("--dry-run", action="store_true", help="check the lines only: send nothing, need no broker")
    p.add_argument("--format", default="text", choices=["text", "json"], help="summary on stdout (default text)")
    p.add_argument("--show", type=int, default=20, metavar="N",
                   help="list at most N refused and N failed lines (default 20; counts are always complete)")
    p.add_argument("--timeout", type=float, default=60.0, metavar="S",
                   help="seconds to wait for Kafka: to connect, for metadata, and for the acknowledgements "
                        "at the end (default 60)")
    p.add_argument("--no-progress", action="store_true", help="no progress line on stderr (shown only on a TTY)")
    p.set_defaults(func=run)


@dataclass
class Summary:
    topic: str
    dry_run: bool
    show: int = 20
    lines: int = 0        # every line read, blank ones included
    blank: int = 0
    valid: int = 0        # lines that passed the check
    events: int = 0       # events in the valid lines (an envelope holds several)
    refused: int = 0
    sent: int = 0         # acknowledged by Kafka
    failed: int = 0       # valid, but Kafka did not acknowledge them
    reasons: Counter = field(default_factory=Counter)  # per event the worker would dead-letter
    refused_lines: list = field(default_factory=list)
    failed_lines: list = field(default_factory=list)

    def refuse(self, where: str, r) -> None:  # r: integrations.ndjson.Refused
        self.refused += 1
        self.reasons.update(x.reason for x in r.rejections)
        if len(self.refused_lines) < self.show:
            extra = {"more": len(r.rejections) - 1} if len(r.rejections) > 1 else {}
            self.refused_lines.append({"where": where, "reason": r.reason, "detail": r.detail[:200], **extra})

    def fail(self, where: str, error: str) -> None:
        self.failed += 1
        if len(self.failed_lines) < self.show:
            self.failed_lines.append({"where": where, "error": error[:200]})

    def as_dict(self) -> dict:
        return {"topic": self.topic, "dry_run": self.dry_run, "lines": self.lines, "blank": self.blank,
                "valid": self.valid, "events": self.events, "refused": self.refused, "sent": self.sent,
                "failed": self.failed, "reasons": dict(sorted(self.reasons.items())),
                "refused_lines": self.refused_lines, "failed_lines": self.failed_lines, "listed_max": self.show}


class KafkaOut:
    """Sends valid lines and counts Kafka's answers. The callbacks run in
    kafka-python's I/O thread, hence one condition around the counters."""

    def __init__(self, producer, topic: str, summary: Summary) -> None:
        self._producer, self._topic, self._summary = producer, topic, summary
        self._cond = threading.Condition()
        self._pending: dict[int, str] = {}  # message number -> "file:line", until Kafka answers
        self._seq = 0

    def send(self, where: str, key: bytes | None, value: bytes) -> None:
        with self._cond:
            self._cond.wait_for(lambda: len(self._pending) < _WINDOW)
            self._seq += 1
            seq = self._seq
            self._pending[seq] = where
        try:
            future = self._producer.send(self._topic, key=key, value=value)
        except Exception as exc:  # metadata timeout, record too large, producer closed
            self._answer(seq, exc)
            return
        future.add_callback(lambda _md: self._answer(seq, None))
        future.add_errback(lambda exc: self._answer(seq, exc))

    def _answer(self, seq: int, exc: BaseException | None) -> None:
        with self._cond:
            where = self._pending.pop(seq, None)
            if where is not None:  # None: already written off by finish()
                if exc is None:
                    self._summary.sent += 1
                else:
                    self._summary.fail(where, f"{type(exc).__name__}: {exc}")
            self._cond.notify_all()

    def finish(self, timeout_s: float) -> None:
        """Wait for every answer; what is still unanswered then counts as failed."""
        try:
            self._producer.flush(timeout=timeout_s)
        except Exception:  # KafkaTimeoutError: the leftovers are written off below
            pass
        with self._cond:
            left, self._pending = self._pending, {}
            for where in left.values():
                self._summary.fail(where, f"no acknowledgement from Kafka within {timeout_s:g}s")

    def close(self) -> None:
        try:
            self._producer.close(timeout=5)
        except Exception:
            pass


def open_producer(settings, timeout_s: float):
    from kafka import KafkaProducer

    from phasemeter.kafka_local import bootstrap_servers

    bootstrap = bootstrap_servers(settings)  # BrokerError (exit 1) if none is configured or running
    try:
        return KafkaProducer(bootstrap_servers=bootstrap, acks="all", linger_ms=10,
                             # the worker's size limit plus room for the key and headers
                             max_request_size=max(1_048_576, settings.max_message_bytes + 65_536),
                             bootstrap_timeout_ms=int(timeout_s * 1000), max_block_ms=int(timeout_s * 1000),
                             **settings.kafka_client_config())
    except Exception as exc:  # class name only: the config may carry SASL secrets
        raise RuntimeError(f"cannot connect to Kafka at {bootstrap} ({type(exc).__name__}); nothing sent") from None


class Progress:
    """One `\\r`-rewritten line on a terminal, at most ten times a second."""

    def __init__(self, stream) -> None:
        self._stream, self._next = stream, 0.0

    def tick(self, name: str, s: Summary, stream, size: int | None) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + 0.1
        pct = f" {100 * stream.tell() / size:5.1f}%" if size else ""  # a file's size; stdin has none
        done = f"{s.valid} valid" if s.dry_run else f"{s.sent} sent"
        self._stream.write(f"\r{name}{pct}  {s.lines} lines  {done}  {s.refused} refused\x1b[K")
        self._stream.flush()

    def clear(self) -> None:
        self._stream.write("\r\x1b[K")
        self._stream.flush()


def check_sources(files: list[str]) -> list[str]:
    """Every named file is there and readable before anything is sent."""
    sources = files or ["-"]
    if sources.count("-") > 1:
        raise ArgError("FILE '-' (stdin) can be given only once")
    for path in sources:
        if path == "-":
            continue
        if not os.path.exists(path):
            raise ArgError(f"FILE {path!r}: no such file")
        if os.path.isdir(path):
            raise ArgError(f"FILE {path!r}: is a directory")
        if not os.access(path, os.R_OK):
            raise ArgError(f"FILE {path!r}: not readable")
    return sources


def emit_source(src: str, checker, s: Summary, out: KafkaOut | None, progress) -> None:
    from phasemeter.integrations.ndjson import Refused, read_lines

    name = "<stdin>" if src == "-" else src
    stream = open_stdin() if src == "-" else None
    if stream is None:
        try:
            stream = open(src, "rb", buffering=_READ_BUFFER)
        except OSError as exc:  # removed or locked since check_sources
            raise RuntimeError(f"cannot read {src}: {exc.strerror}") from None
    size = None if src == "-" else os.fstat(stream.fileno()).st_size
    try:
        for raw in read_lines(stream, checker.max_bytes):
            s.lines += 1
            result = checker.check(raw)
            if result is None:
                s.blank += 1
            elif isinstance(result, Refused):
                s.refuse(f"{name}:{result.lineno}", result)
            else:
                s.valid += 1
                s.events += result.events
                if out is not None:
                    out.send(f"{name}:{result.lineno}", result.key, result.value)
            if progress is not None:
                progress.tick(name, s, stream, size)
    finally:
        if stream is not sys.stdin.buffer:  # for stdin, only our wrapper (closefd=False): fd 0 stays open
            stream.close()


def open_stdin():
    """Standard input with a large buffer. Every refill of a small one
    releases the GIL, and getting it back from kafka-python's I/O thread can
    take a switch interval (5 ms): with 8 KiB reads, reading was the slowest part."""
    stdin = sys.stdin
    if stdin is None or getattr(stdin, "buffer", None) is None:
        raise RuntimeError("no standard input to read (name a FILE)")
    if stdin.isatty():  # someone typed `phasemeter emit` alone: say why nothing happens
        print("phasemeter emit: reading NDJSON from the terminal; end with Ctrl-D", file=sys.stderr)
    try:
        fd = stdin.fileno()
    except (OSError, ValueError):  # replaced by an in-memory stream (embedding, tests): read it as it is
        return stdin.buffer
    return io.BufferedReader(io.FileIO(fd, "rb", closefd=False), _READ_BUFFER)


def run(args, settings) -> int:
    if args.show < 0:
        raise ArgError(f"--show must be >= 0, got {args.show}")
    if not 0 < args.timeout <= 86_400:  # also refuses nan and inf
        raise ArgError(f"--timeout must be in (0, 86400] seconds, got {args.timeout}")
    topic = args.topic or settings.topic
    if not _TOPIC.fullmatch(topic):
        raise ArgError(f"--topic (or PHASEMETER_TOPIC) {topic!r}: a Kafka topic name is 1..249 characters "
                       "of [A-Za-z0-9._-]")
    sources = check_sources(args.files)
    from phasemeter.integrations.ndjson import LineChecker

    checker = LineChecker(settings.max_message_bytes, settings.bucket_edges, settings.raw_ttl_days)
    summary = Summary(topic, args.dry_run, show=args.show)
    out = None if args.dry_run else KafkaOut(open_producer(settings, args.timeout), topic, summary)
    progress = Progress(sys.stderr) if not args.no_progress and sys.stderr.isatty() else None
    try:
        for src in sources:
            emit_source(src, checker, summary, out, progress)
        if out is not None:
            out.finish(args.timeout)
    finally:
        if progress is not None:
            progress.clear()
        if out is not None:
            out.close()
    print_summary(summary, args.format)
    return 1 if summary.refused or summary.failed else 0


def print_summary(s: Summary, fmt: str) -> None:
    if fmt == "json":
        print(json.dumps(s.as_dict(), indent=1))
        return
    done = f"{s.valid} valid (dry run: nothing sent)" if s.dry_run else f"{s.sent} sent to {s.topic}"
    print(f"phasemeter emit: {s.lines} lines read ({s.blank} blank), {done}, {s.refused} refused"
          + ("" if s.dry_run else f", {s.failed} failed"))
    for title, rows, total in (("refused", s.refused_lines, s.refused), ("failed", s.failed_lines, s.failed)):
        if not total:
            continue
        print(f"{title}:")
        for r in rows:
            more = f" (+{r['more']} more in this envelope)" if r.get("more") else ""
            print(f"  {r['where']}  {r.get('reason', 'send')}  {r.get('detail', r.get('error'))}{more}")
        if total > len(rows):
            print(f"  ... and {total - len(rows)} more (--show N lists more)")
    if s.reasons:
        print("refused events by reason: " + ", ".join(f"{k}={n}" for k, n in sorted(s.reasons.items())))
