"""pandas, imported while a starting worker waits for Kafka, not in its
first batch.

The worker's own ingest code never builds a frame, but pyarrow checks every
`pa.array` input against pandas' types, and that check imports pandas when
it is installed (the worker's reads need it installed). So the first batch
after every start, deploy or crash restart paid 0.4-0.6 s of CPU for the
import: rows stored that much later (docs/performance/worker.md). A starting
worker spends seconds waiting on the broker (group join, assignment), with
the CPU idle, so the import runs then, in the batches' executor.

A batch waits for the import to end before it starts. Two threads that
import modules importing each other can deadlock on Python's module locks,
and pyarrow and pandas do import each other; waiting means no batch ever
imports them at the same time as the preload.
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
