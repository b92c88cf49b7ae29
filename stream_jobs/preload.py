"""pandas, imported while a starting worker waits for Kafka, not in its first batch.

pyarrow checks every `pa.array` input against pandas' types, importing pandas when installed (the reads need
it): the first batch after each start paid 0.4-0.6 s of CPU for it (docs/performance/worker.md). A starting
worker waits seconds on the broker, CPU idle, so the import runs then, in the batches' executor. A batch waits
for it to end: pyarrow and pandas import each other, and two threads importing them can deadlock on module locks.
"""

from __future__ import annotations

import asyncio
import importlib
import logging

log = logging.getLogger("phasemeter.worker")


def _import(name: str) -> None:
    try:
        importlib.import_module(name)
    except ImportError:  # not installed: pyarrow will not import it either
        log.debug("preload: %s is not installed", name)
    except Exception:  # broken: said here, and left to the first batch as before
        log.warning("preload: importing %s failed", name, exc_info=True)


class Preload:
    def __init__(self, name: str = "pandas"):
        self.name = name
        self._future: asyncio.Future | None = None

    def start(self) -> None:
        """From the event loop, once, as the worker starts."""
        if self._future is None:
            self._future = asyncio.get_running_loop().run_in_executor(None, _import, self.name)

    async def wait(self) -> None:
        """Before a batch: returns at once when the import has ended (or never started)."""
        if self._future is not None:
            await self._future
