"""Where a partition's log starts and ends, asked before its first batch (and by the idle check, for a partition
never fetched: resume.reseek_behind) over a kafka-python connection of the worker's own: Faust's consumer
answers through its thread, slowly in a starting worker (docs/performance/worker.md). The client is not
thread-safe, so one thread makes every call. If it fails, the caller falls back on Faust's consumer: slower,
never lost.
"""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor

from faust.types import TP as FaustTP

from phasemeter.settings import Settings

from .sequence import TP

log = logging.getLogger("phasemeter.worker")

# Then Faust's consumer answers (in 1.1-1.5 s): a worker whose own connection fails waits at most this more.
TIMEOUT_MS = 3000


def _plain(got) -> dict[TP, int]:
    """kafka-python's or Faust's {TopicPartition: offset} -> {(topic, partition): offset}."""
    return {(tp.topic, tp.partition): int(o) for tp, o in got.items() if o is not None}


class LogOffsets:
    def __init__(self, app, settings: Settings, bootstrap: str):
        self.app = app  # its consumer is the fallback
        self._config = dict(bootstrap_servers=bootstrap.split(","), enable_auto_commit=False,
                            client_id=f"{settings.group_id}-offsets", bootstrap_timeout_ms=TIMEOUT_MS,
                            reconnect_backoff_max_ms=1000, **settings.kafka_client_config())
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="phasemeter-offsets")
        self._client = None
        self._closed = False

    def _consumer(self):
        if self._client is None:
            from kafka import KafkaConsumer

            self._client = KafkaConsumer(**self._config)
        return self._client

    def _ask(self, which: str, tps: list[TP]) -> dict[TP, int]:
        from kafka import TopicPartition

        return _plain(getattr(self._consumer(), which)([TopicPartition(t, p) for t, p in tps], timeout_ms=TIMEOUT_MS))

    async def _call(self, which: str, tps, faust_call) -> dict[TP, int]:
        tps = sorted(tps)
        if not tps:
            return {}
        try:
            return await asyncio.get_running_loop().run_in_executor(self._executor, self._ask, which, tps)
        except Exception as exc:
            log.warning("offsets client: %s of %d partition(s) failed (%s); asking Faust's consumer",
                        which, len(tps), exc)
        return _plain(await faust_call(*(FaustTP(*tp) for tp in tps)))

    async def ends(self, tps) -> dict[TP, int]:
        """{(topic, partition): the log's end offset (high watermark)}."""
        return await self._call("end_offsets", tps, self.app.consumer.highwaters)

    async def starts(self, tps) -> dict[TP, int]:
        """{(topic, partition): the first offset the log still has}."""
        return await self._call("beginning_offsets", tps, self.app.consumer.earliest_offsets)

    def warm(self) -> None:
        """Connect while the worker waits for its assignment, not in its first batch (a connection and metadata).
        Nothing once closed: a worker stopped as it starts closes this before its start task runs."""
        if self._closed:
            return

        def connect():
            try:
                self._consumer().topics()
            except Exception as exc:  # the first real call tries again, then falls back
                log.warning("offsets client: no connection yet (%s)", exc)
        self._executor.submit(connect)

    def close(self) -> None:
        """Once the app stops; a second call does nothing."""
        def close():
            if self._client is not None:  # nothing runs after it: the executor takes no more calls
                self._client.close()
        if not self._closed:
            self._closed = True
            self._executor.submit(close)
            self._executor.shutdown(wait=False)
