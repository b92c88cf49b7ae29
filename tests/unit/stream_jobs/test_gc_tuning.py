"""The worker's collector settings (stream_jobs/gc_tuning.py), in a child
process so that this test run keeps CPython's defaults."""

from __future__ import annotations

import subprocess
import sys

CHILD = """
import gc
from phasemeter.stream_jobs import gc_tuning
before = gc.get_freeze_count()
gc_tuning.tune()
assert gc.get_threshold() == gc_tuning.THRESHOLDS, gc.get_threshold()
assert gc.get_freeze_count() > before + 1000, (before, gc.get_freeze_count())
# Cycles are still collected, only less often.
class Node:
    pass
for _ in range(200_000):
    a, b = Node(), Node()
    a.b, b.a = b, a
del a, b
assert sum(type(o) is Node for o in gc.get_objects()) < 120_000
print("ok")
"""


def test_tune_freezes_start_up_objects_and_still_collects_cycles():
    out = subprocess.run([sys.executable, "-c", CHILD], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr
