"""The suite's "today": fixed once per run, for every test process and every
subprocess a test starts.

Tests place their data whole days before today (inside every TTL, away from
the edges of "now"). A process that works out "today" for itself after the
run crossed midnight UTC puts that data a day later than the test process
that reads it looks for it. The first process to import this module (pytest's
main process, through conftest) fixes the day in the environment, which xdist's
test processes and the subprocesses they start inherit."""

from __future__ import annotations

import os
import time

DAY_S = 86400
TODAY = int(os.environ.setdefault("PHASEMETER_TEST_TODAY", str(int(time.time() // DAY_S)))) * DAY_S


def days_ago(n: int) -> float:
    """Midnight UTC `n` days before the run's today, in epoch seconds."""
    return float(TODAY - n * DAY_S)
