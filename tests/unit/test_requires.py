"""tests/requires.py: a missing program skips a test on a developer's
machine, with how to get it, and fails it in CI (CI=true). Shown on a PATH
without the program, in this process and as pytest runs a browser test."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from requires import TOOLS, find_tool, in_ci, require_tool

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("value, ci", [("true", True), ("1", True), ("yes", True), ("", False), ("0", False),
                                       ("false", False), ("False", False), ("no", False)])
def test_ci_is_what_runners_set(value, ci):
    assert in_ci({"CI": value}) is ci
    assert in_ci({}) is False


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_a_missing_program_skips_here_and_fails_in_ci(name, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # an empty folder: no program at all
    assert find_tool(name) is None
    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=f"{name} not found: install"):
        require_tool(name, "to run it")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match=f"CI=true and a required component is missing: {name} not found"):
        require_tool(name, "to run it")


def test_a_program_on_path_is_found(monkeypatch, tmp_path):
    exe = tmp_path / "go"
    exe.write_text("#!/bin/sh\n")
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("CI", "true")
    assert require_tool("go") == str(exe)


@pytest.mark.parametrize("ci, outcome", [("", "1 skipped"), ("true", "1 failed")])
def test_a_browser_test_without_chromium(ci, outcome, tmp_path):
    """The DevTools harness test, run by pytest with no chromium on PATH:
    skipped with today's message, or failed under CI=true."""
    python_dir = str(Path(sys.executable).parent)  # the venv's python, and nothing else
    env = {**os.environ, "PATH": python_dir, "CI": ci}
    # --basetemp: its own temporary folder. Without it pytest numbers one under
    # the shared /tmp/pytest-of-<user> and sweeps the older numbered ones there,
    # which held whole earlier suite runs (brokers' logs, stores): this run
    # took 30-67 s instead of 3 s.
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider",
                           "--basetemp", str(tmp_path / "basetemp"), "tests/integration/test_cdp.py"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert all(n not in TOOLS["chromium"][0] for n in os.listdir(python_dir))
    assert outcome in done.stdout, done.stdout[-3000:]
    assert "chromium not found: install Debian's `chromium` package (apt-get install -y chromium)" in done.stdout
    assert done.returncode == (1 if ci else 0), done.stdout[-3000:]
