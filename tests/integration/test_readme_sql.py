"""The README's own SQL lines work as written against `phasemeter demo --keep`:
the curl one-liner, `phasemeter sql` and the clickhouse-connect snippet each
read the running worker's SQL interface and give the same answer.

The demo runs in a temporary data dir, so `.phasemeter/demo` in a line becomes
that dir; its SQL interface takes the documented port when it is free (as on
CI), and a line's `127.0.0.1:6067` becomes the port the demo printed otherwise.
"""

from __future__ import annotations

import os
import queue
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEADING = "### Your own SQL and BI tools"

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def readme_blocks() -> dict[str, list[str]]:
    """The section's first bash and python code blocks."""
    text = (ROOT / "README.md").read_text()
    section = text.split(HEADING, 1)[1].split("\n### ", 1)[0]
    blocks = dict(re.findall(r"```(bash|python)\n(.*?)```", section, re.S)[::-1])
    assert set(blocks) == {"bash", "python"}, blocks.keys()
    return {"bash": [ln for ln in blocks["bash"].splitlines() if ln.strip()], "python": [blocks["python"]]}


class Demo:
    """`phasemeter demo --keep` in a subprocess, its output read line by line."""

    def __init__(self, tmp: Path):
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEMETER_", "CLICKHOUSE_"))}
        env["PHASEMETER_DATA_DIR"] = str(tmp / "data")
        self.env = env
        self.proc = subprocess.Popen([sys.executable, "-m", "phasemeter", "demo", "--keep", "--seconds", "5",
                                      "--rate", "200", "--out-dir", str(tmp / "out")], env=env, cwd=tmp,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                     start_new_session=True)
        self.lines: queue.Queue = queue.Queue()
        self.seen: list[str] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def wait_for(self, pattern: str, timeout_s: float) -> re.Match:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=1)
            except queue.Empty:
                continue
            if line is None:
                break
            self.seen.append(line)
            m = re.search(pattern, line)
            if m:
                return m
        raise AssertionError(f"the demo never printed {pattern!r}; rc={self.proc.poll()}; last lines:\n"
                             + "".join(self.seen[-30:]))

    def stop(self) -> int:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)
        return self.proc.wait(60)


def test_the_readmes_sql_lines_work_against_demo_keep(tmp_path):
    blocks = readme_blocks()
    assert len(blocks["bash"]) == 2 and blocks["bash"][0].startswith("curl ") \
        and blocks["bash"][1].startswith("phasemeter sql "), blocks["bash"]
    demo = Demo(tmp_path)
    try:
        sql_url = demo.wait_for(r"curl -sS (http://127\.0\.0\.1:\d+)/ ", 300).group(1)
        demo.wait_for(r"Ctrl-C stops", 30)

        def as_run(text: str) -> str:
            return text.replace(".phasemeter/demo", str(tmp_path / "data" / "demo")).replace(
                "http://127.0.0.1:6067", sql_url).replace('port=6067', f"port={sql_url.rsplit(':', 1)[1]}")

        answers = []
        for line in blocks["bash"]:
            argv = shlex.split(as_run(line))
            if argv[0] == "phasemeter":
                argv = [sys.executable, "-m", "phasemeter", *argv[1:]]
            proc = subprocess.run(argv, env=demo.env, cwd=tmp_path, capture_output=True, text=True, timeout=60)
            assert proc.returncode == 0, (line, proc.stdout[-1000:], proc.stderr[-2000:])
            answers.append(proc.stdout)
        rows = [ln.split("\t") for ln in answers[0].splitlines()]
        assert len(rows) >= 2 and all(int(n) > 0 for _, n in rows), answers[0]  # the demo's models, each counted
        assert answers[1] == answers[0], answers  # phasemeter sql through the worker: the same bytes as curl
        proc = subprocess.run([sys.executable, "-c", as_run(blocks["python"][0])], env=demo.env, cwd=tmp_path,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr[-2000:]
        printed = proc.stdout.split()
        assert len(rows) == sum(1 for model, _ in rows if model in printed), (rows, proc.stdout)
    finally:
        code = demo.stop()
    assert code == 0, "".join(demo.seen[-30:])
