"""`phasemeter dlq inspect`: what was rejected, by reason code, in a window.

Reads the `dead_letters` table (exact, shares offsets with `generations`);
the dead-letter topic carries the same records for replay tools.
"""

from __future__ import annotations

import json


def register(sub, common, window_flags) -> None:
    dlq = sub.add_parser("dlq", help="dead letters").add_subparsers(dest="what", required=True)
    p = dlq.add_parser("inspect", help="dead letters by reason code")
    common(p)
    p.add_argument("--from", dest="start", default="-1d", help="'now', -15m, -2h, or ISO time (default -1d)")
    p.add_argument("--to", dest="end", default="now")
    p.add_argument("--via", help="ClickHouse HTTP interface to read through (default: the worker's, found from the data dir)")
    p.add_argument("--format", default="table", choices=["table", "json"])
    p.set_defaults(func=inspect)


def inspect(args, settings) -> int:
    from phasemeter.query.runner import open_runner
    from phasemeter.textgrid import printable
    from phasemeter.timeparse import window

    start, end = window(args.start, args.end)
    runner = open_runner(settings, args.via)
    try:
        df = runner.df("dead_letter_reasons", {"start": start, "end": end})
    finally:
        runner.close()
    rows = [] if df.empty else df.to_dict("records")
    if args.format == "json":
        print(json.dumps({"total": int(sum(r["n"] for r in rows)), "reasons": rows}, default=str, indent=1))
        return 0
    total = sum(int(r["n"]) for r in rows)
    print(f"dead letters {start:%Y-%m-%d %H:%M} .. {end:%Y-%m-%d %H:%M} UTC: {total}")
    for r in rows:
        print(f"  {printable(str(r['reason'])):<18} {int(r['n']):>8}   e.g. {printable(str(r['example'])[:100])}")
    return 0
