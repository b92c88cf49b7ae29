"""`phasemeter demo --keep`: leave the broker and the worker running over the
demo's store, say where to look, and wait for Ctrl-C (which run_demo turns
into stopping everything it started, as without --keep)."""

from __future__ import annotations

import shlex
import time
from pathlib import Path


SQL_EXAMPLE = "SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model"


def keep_hint(url: str, sql_url: str, demo_dir: Path) -> str:
    """The live page and the exact commands for this store. With the worker
    up, `--data-dir` finds it (worker.json) and the commands read through it;
    any ClickHouse client reads the worker's SQL interface at `sql_url`."""
    d = shlex.quote(str(demo_dir))
    q = shlex.quote(SQL_EXAMPLE)
    return (f"\nThe broker and the worker keep running. Open the live page:\n  {url}/\n"
            "Query the demo's store (the worker answers for it):\n"
            f"  phasemeter query bands --data-dir {d} --from -2h --step 5m\n"
            f"  phasemeter inflight --data-dir {d}\n"
            f"  phasemeter alerts check --data-dir {d}\n"
            f"  phasemeter chart --data-dir {d} --from -2h --out bands.html\n"
            f"Your own SQL, from any ClickHouse client (docs/sql.md):\n"
            f"  curl -sS {sql_url}/ --data-binary {q}\n"
            f"  phasemeter sql --data-dir {d} {q}\n"
            f"  (or any read command with --via {sql_url})\n"
            "Ctrl-C stops what the demo started (the worker, and Kafka unless KAFKA_BOOTSTRAP_SERVERS was set).")


def hold(worker) -> None:
    """Block while the worker runs; a worker that dies ends the wait with an error,
    so the page is never advertised over a dead process."""
    while worker.poll() is None:
        time.sleep(0.5)
    raise RuntimeError(f"the worker exited ({worker.returncode}); see its worker.log")
