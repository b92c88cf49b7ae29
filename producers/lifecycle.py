"""A Meter's life around its process: flush and close (also at interpreter
exit), stats, and fork(): a Meter made before a fork works in the child.
"""

from __future__ import annotations

import atexit
import collections
import logging
import os
import time
import weakref

from .channel import EmitterStats

log = logging.getLogger("phasemeter.emitter")


class Lifecycle:
    """Meter's flush, close and fork handling; a subclass gives `_ch` (its
    Channel), `_sender` and `_flush_timeout_s`, then calls `_arm()`."""

    __slots__ = ()

    def _arm(self) -> None:
        # A weak reference: an unused Meter may still be garbage collected.
        ref = weakref.ref(self)
        self._atexit_hook = lambda: (m := ref()) is not None and m.close()
        atexit.register(self._atexit_hook)
        _LIVE.add(self)

    def stats(self) -> EmitterStats:
        return self._ch.snapshot()

    def refusals(self) -> collections.Counter:
        """Calls refused (BadArgument), per the worker's reason code."""
        with self._ch.lock:
            return collections.Counter(self._ch.refusals)

    def flush(self, timeout_s: float | None = None) -> bool:
        """Wait until every enqueued event is sent or failed; False on timeout."""
        timeout = self._flush_timeout_s if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + timeout
        ch = self._ch
        with ch.lock:
            if not ch.q and not ch.in_flight:
                return True
        self._sender.request_flush(deadline)
        with ch.drained:
            return ch.drained.wait_for(lambda: not ch.q and not ch.in_flight,
                                       max(0.0, deadline - time.monotonic()))

    def close(self, timeout_s: float | None = None) -> None:
        """Flush, stop the sender thread and close the producer; idempotent.
        Events not delivered within the timeout stay counted as queued."""
        with self._ch.lock:
            if self._ch.closed:
                return
            self._ch.closed = True  # from here on, new events are dropped and counted
        atexit.unregister(self._atexit_hook)
        timeout = self._flush_timeout_s if timeout_s is None else float(timeout_s)
        deadline = time.monotonic() + timeout
        try:
            if not self.flush(timeout):
                log.warning("phasemeter emitter: closed with %d events undelivered",
                            self._ch.snapshot().queued)
        finally:
            self._sender.stop(deadline)

    def _rearm_atexit(self) -> None:
        # KafkaProducer registers its own atexit close when built (lazily, so
        # after ours). atexit runs last-registered first; re-registering puts
        # our flush ahead of the producer closing itself.
        if not self._ch.closed:
            atexit.unregister(self._atexit_hook)
            atexit.register(self._atexit_hook)

    def _after_fork(self) -> None:
        self._ch.after_fork()
        self._sender.after_fork()

    def __enter__(self):
        return self

    def __exit__(self, *exc_info) -> None:
        self.close()


# Pre-fork servers (gunicorn, uvicorn --workers) make the Meter at import,
# then fork: the child has none of the parent's threads, and a lock held by
# one of them at the fork stays held forever. Every live Meter is re-made
# in the child (os.register_at_fork, as OpenTelemetry's batch processors
# do): a new lock, an empty queue, counters from zero, and its own sender
# thread on its first event. A WeakSet, so the hook keeps no Meter alive,
# and one hook for all (there is no way to unregister one).
_LIVE: weakref.WeakSet = weakref.WeakSet()


def _after_fork_in_child() -> None:
    for meter in list(_LIVE):
        meter._after_fork()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork_in_child)
