"""`phasemeter demo --keep`: what it prints, and that a dead worker ends the wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from phasemeter.cli.main import build_parser
from phasemeter.demo.keep import hold, keep_hint


def test_hint_names_the_page_and_the_commands_for_the_demo_store():
    text = keep_hint("http://127.0.0.1:40659", "http://127.0.0.1:6067", Path("/tmp/a b/demo"))
    assert "  http://127.0.0.1:40659/\n" in text
    assert "phasemeter query bands --data-dir '/tmp/a b/demo' --from -2h --step 5m" in text
    assert "curl -sS http://127.0.0.1:6067/ --data-binary 'SELECT model" in text
    assert "phasemeter sql --data-dir '/tmp/a b/demo' 'SELECT model" in text
    assert "--via http://127.0.0.1:6067" in text and "Ctrl-C" in text


def test_hold_returns_only_by_error_when_the_worker_exits():
    class Exited:
        returncode = 3

        def poll(self):
            return 3

    with pytest.raises(RuntimeError, match=r"worker exited \(3\)"):
        hold(Exited())


def test_demo_takes_keep():
    assert build_parser().parse_args(["demo", "--keep"]).keep is True
    assert build_parser().parse_args(["demo"]).keep is False
