"""The one rule for a test that needs a program the suite cannot install
itself (Chromium, Go, Java): on a developer's machine the test skips and
says how to get the program; in CI (`CI=true`, which GitHub Actions, GitLab
and most runners set) it FAILS, so a green CI run never hides tests that did
not run. Every skip in the suite goes through here (tests/unit/test_guard.py
holds that).
"""

from __future__ import annotations

import os
import shutil

import pytest

# name -> (executables tried in order, how to get it). Chromium has several
# names across distributions; the others have one.
TOOLS: dict[str, tuple[tuple[str, ...], str]] = {
    "chromium": (("chromium", "chromium-browser", "google-chrome", "chrome"),
                 "install Debian's `chromium` package (apt-get install -y chromium)"),
    "go": (("go",), "install Go (https://go.dev/dl/ or apt-get install -y golang-go)"),
    "java": (("java",), "install a Java 17 runtime (apt-get install -y openjdk-17-jre-headless)"),
    "mvn": (("mvn",), "install Maven (apt-get install -y maven)"),
}


def in_ci(environ=os.environ) -> bool:
    """CI=true (any value but empty, 0, false, no), as CI runners set it."""
    return environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def find_tool(name: str) -> str | None:
    """The path of the first executable of `name` on PATH, or None."""
    for exe in TOOLS[name][0]:
        path = shutil.which(exe)
        if path:
            return path
    return None


def missing(reason: str, environ=os.environ) -> None:
    """Skip with `reason` on a developer's machine; fail in CI. For a
    requirement that is not a program on PATH (a service the test needs)."""
    if in_ci(environ):
        pytest.fail(f"CI=true and a required component is missing: {reason}", pytrace=False)
    pytest.skip(reason)


def require_tool(name: str, purpose: str = "") -> str:
    """The path of the program `name`, or the test skipped (developer's
    machine) or failed (CI) with how to get it."""
    path = find_tool(name)
    if path is None:
        how = TOOLS[name][1]
        missing(f"{name} not found: {how}" + (f" {purpose}" if purpose else ""))
    return path
