"""`phasemeter otlp` (being written)."""

from __future__ import annotations


def register(sub, common, window_flags) -> None:
    p = sub.add_parser("otlp", help="(being written)")
    common(p)
    p.set_defaults(func=run)


def run(args, settings) -> int:
    return 2
