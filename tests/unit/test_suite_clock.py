"""The suite's "today" is fixed once per run (tests/clock.py): a subprocess
started after the run crossed midnight UTC writes its data on the day the
test process reads."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_the_run_has_fixed_its_day_for_the_processes_it_starts():
    from clock import DAY_S, TODAY

    assert int(os.environ["PHASEMETER_TEST_TODAY"]) * DAY_S == TODAY


def test_modules_whose_data_a_subprocess_writes_place_it_on_the_runs_day_not_the_clocks():
    from clock import DAY_S

    yesterday = int(time.time() // DAY_S) - 1  # as if the run began before midnight and this process after
    env = {**os.environ, "PHASEMETER_TEST_TODAY": str(yesterday),
           "PYTHONPATH": os.pathsep.join([str(TESTS), str(TESTS / "integration"), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", "import test_read_paths as r, test_grafana_queries as g; "
                          "print(r.T0, g.T0)"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert [float(x) for x in out.stdout.split()] == [float((yesterday - 2) * DAY_S), float((yesterday - 1) * DAY_S)]
