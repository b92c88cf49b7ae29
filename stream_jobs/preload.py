"""pandas, imported while a starting worker waits for Kafka, not in its first batch.

pyarrow checks every `pa.array` input against pandas' types, importing pandas when installed (the reads need
it): the first batch after each start paid 0.4-0.6 s of CPU for it (docs/performance/worker.md). A starting
worker waits seconds on the broker, CPU idle, so the import runs then, in the batches' executor. A batch waits
for it to end: pyarrow and pandas import each other, and two threads importing them can deadlock on module locks.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger("phasemeter.worker")


def preload(name: str = "pandas") -> None:
    """In the batches' executor, once, as the worker starts (ingest_agent.install); a module that fails is said
    here, never raised."""
    try:
        importlib.import_module(name)
    except ImportError:  # not installed: pyarrow will not import it either
        log.debug("preload: %s is not installed", name)
    except Exception:  # broken: said here, and left to the first batch as before
        log.warning("preload: importing %s failed", name, exc_info=True)
