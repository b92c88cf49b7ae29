"""cli/emit.py's KafkaOut: how each line's send ends up counted, with a
scripted producer (the round trip through the real broker is
tests/integration/test_emit_cli.py's)."""

from __future__ import annotations

from phasemeter.cli.emit import KafkaOut, Summary


class FailingFuture:
    def __init__(self, outcome):
        self.outcome = outcome

    def add_callback(self, f):
        if self.outcome == "ok":
            f(None)

    def add_errback(self, f):
        if isinstance(self.outcome, Exception):
            f(self.outcome)


class ScriptedProducer:
    """Answers by line: ok, an error, a raise in send(), or never."""

    def __init__(self, script):
        self.script, self.flushed, self.closed = list(script), None, False

    def send(self, topic, key=None, value=None):
        outcome = self.script.pop(0)
        if outcome == "raise":
            raise ValueError("record too large")
        return FailingFuture(outcome)

    def flush(self, timeout=None):
        self.flushed = timeout

    def close(self, timeout=None):
        self.closed = True


def test_send_failures_are_reported_as_such_with_their_lines():
    class NotLeader(Exception):
        pass

    summary = Summary("t", dry_run=False)
    producer = ScriptedProducer(["ok", NotLeader("partition moved"), "raise", "never", "ok"])
    out = KafkaOut(producer, "t", summary)
    for n in range(1, 6):
        out.send(f"f:{n}", b"k", b"v")
    out.finish(0.5)
    out.close()
    assert (summary.sent, summary.failed, producer.flushed, producer.closed) == (2, 3, 0.5, True)
    assert summary.failed_lines == [{"where": "f:2", "error": "NotLeader: partition moved"},
                                    {"where": "f:3", "error": "ValueError: record too large"},
                                    {"where": "f:4", "error": "no acknowledgement from Kafka within 0.5s"}]
