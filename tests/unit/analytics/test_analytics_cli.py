"""CLI wiring: new flags, `latency` and `analytics backfill` subcommands, rendering."""

from __future__ import annotations

import argparse
import json

import pandas as pd

from phasemeter.analytics.cli import extend_window_flags, register
from phasemeter.analytics.present import render
from phasemeter.cli.main import _common, _window_flags, build_parser
from phasemeter.query.queries import BAND_COLUMNS


def test_extend_window_flags():
    p = argparse.ArgumentParser()
    _window_flags(p)
    if not any(a.dest == "exact" for a in p._actions):
        extend_window_flags(p)
    a = p.parse_args(["--rollup", "--buckets", "litellm", "--latency"])
    assert a.rollup and not a.exact and a.buckets == "litellm" and a.latency


def test_register_subcommands():
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers(dest="command")
    register(sub, _common, _window_flags)
    a = parser.parse_args(["latency", "--exact", "--format", "json"])
    assert a.exact and a.func.__name__ == "cmd_latency"
    a = parser.parse_args(["analytics", "backfill", "--from", "2026-11-01T00:00:00Z"])
    assert a.func.__name__ == "cmd_backfill" and a.end == "now"
    build_parser()  # the real parser loads this module without clashes


def test_render_says_which_path():
    df = pd.DataFrame({c: pd.Series(dtype="float64") for c in BAND_COLUMNS})
    meta = {"kind": "bands", "path": "rollup", "reason": "window 720.0 h > 6 h", "method": "rollup: ...",
            "step_s": 10800, "start": "a", "end": "b"}
    text = render(df, "table", meta)
    assert "# path: rollup (window 720.0 h > 6 h)" in text and "# method: rollup: ..." in text
    assert json.loads(render(df, "json", meta))["path"] == "rollup"
