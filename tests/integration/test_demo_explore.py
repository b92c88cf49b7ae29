"""Every command the demo prints under "Explore it with:" works as printed,
on a store shaped as the demo leaves it: its own data dir, the demo's SLOs
registered before the rows (as its worker does), two hours of rows."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from datetime import datetime, timezone

from phasemeter.alerts.slo_rules import load_slos
from phasemeter.demo.rows import synthetic_rows
from phasemeter.demo.run import DEMO_SLOS, EXPLORE_HEAD, explore_hint
from phasemeter.store import slo_defs
from phasemeter.stream_jobs.buckets import labels, parse_edges
from phasemeter.stream_jobs.sink import Sink
from tests.stores import migrated_client


def printed_commands(text: str) -> list[list[str]]:
    lines = text.split(EXPLORE_HEAD, 1)[1].splitlines()
    return [shlex.split(ln) for ln in lines if ln.startswith("  phasemeter ")]


def test_each_explore_command_works_as_printed(tmp_path):
    demo_dir = tmp_path / "data" / "demo"
    now = time.time()
    with migrated_client(demo_dir, "phasemeter") as client:
        sloset = load_slos(DEMO_SLOS, labels(parse_edges("default")))
        slo_defs.register(client, sloset, at=datetime.fromtimestamp(now - 3 * 3600, timezone.utc))
        Sink.over(client, "chdb").write(synthetic_rows(3000, now - 7000, 6900), [])
    commands = printed_commands(explore_hint(demo_dir))
    assert len(commands) == 6 and {c[1] for c in commands} >= {"slo", "query", "chart", "alerts", "dlq"}
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEMETER_", "CLICKHOUSE_", "KAFKA_"))}
    work = tmp_path / "cwd"
    work.mkdir()
    for argv in commands:
        assert argv[0] == "phasemeter"
        proc = subprocess.run([sys.executable, "-m", "phasemeter", *argv[1:]], cwd=work, env=env,
                              capture_output=True, text=True, timeout=120)
        # `alerts check` exits 1 when a rule fires (the demo's incident may): that is its answer, not a failure.
        allowed = (0, 1) if argv[1] == "alerts" else (0,)
        assert proc.returncode in allowed, (argv, proc.returncode, proc.stderr[-2000:])
        assert proc.stdout.strip() or (work / "bands.html").exists(), argv
        if argv[1] == "slo":
            assert len(sloset.slos) >= 2 and all(f"# SLO {s.name}:" in proc.stdout for s in sloset.slos)
    assert (work / "bands.html").stat().st_size > 1000
