"""`phasemeter slo`: SLO attainment, misses per objective, error budget and
goodput per model × input bucket (× step), registered by phasemeter.cli.main."""

from __future__ import annotations

import sys

from phasemeter.timeparse import ArgError, window


def register(sub, common, window_flags) -> None:  # noqa: ARG001 -- its own flags: --step means something else here
    p = sub.add_parser("slo", help="SLO attainment per model × bucket: misses per objective, budget, goodput")
    common(p)
    p.add_argument("--slos", help="SLO file (default: PHASEMETER_SLOS); `example` = the shipped example_slos.toml")
    p.add_argument("--slo", action="append", default=[], help="only this SLO (repeatable; default: every SLO)")
    p.add_argument("--from", dest="start", default="-24h", help="'now', -30d, or ISO time (default -24h)")
    p.add_argument("--to", dest="end", default="now", help="end of window (default now)")
    p.add_argument("--step", default="window",
                   help="window (one row per cell for the whole window; default), auto, or 5m, 1h, 1d ...")
    p.add_argument("--by", default="cell", choices=["cell", "model"],
                   help="cell = model × input bucket (default), model = every bucket of the SLO together")
    p.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    p.add_argument("--bucket", action="append", default=[], help="only this input bucket (repeatable)")
    p.add_argument("--budget", action="store_true",
                   help="also the error budget left over the SLO period (the file's `period`, default 30d) "
                        "ending at --to, per model")
    p.add_argument("--objective", action="append", default=[], metavar="METRIC=LIMIT",
                   help="ad-hoc threshold replacing or adding one objective, e.g. ttft_s=1.5 (exact path)")
    g = p.add_mutually_exclusive_group()
    g.add_argument("--exact", action="store_true", help="count raw rows")
    g.add_argument("--rollup", action="store_true", help="read the per-minute counts of a declared SLO")
    p.add_argument("--via", help="ClickHouse HTTP interface to read through (default: the worker's, found from the data dir)")
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    p.set_defaults(func=cmd_slo)


def cmd_slo(args, settings) -> int:
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.analytics.core import step_from
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    from phasemeter.analytics.slo import attainment, period_meta, with_objectives
    from phasemeter.render.slo_table import render_many

    bucket_labels = labels(parse_edges(settings.bucket_edges))
    sloset = load_slos(args.slos or settings.slos or None, bucket_labels)
    if not sloset.slos:
        raise ArgError("--slos: no SLO is declared; pass --slos FILE or set PHASEMETER_SLOS "
                       "(`--slos example` reads the shipped example, docs/slo.md)")
    chosen = [sloset.get(name) for name in args.slo] or list(sloset.slos)
    if args.objective:
        chosen = [with_objectives(s, args.objective) for s in chosen]
    start, end = window(args.start, args.end)
    step_s = None if args.step == "window" else step_from(args.step, start, end)
    force = "exact" if args.exact else ("rollup" if args.rollup else None)
    from phasemeter.query.runner import open_runner

    runner = open_runner(settings, args.via)
    try:
        results = []
        for slo in chosen:
            rows, meta = attainment(runner, slo, start, end, step_s, args.model, args.bucket, bucket_labels,
                                    force=force, declared=not args.objective, by=args.by)
            if args.budget:
                meta["period"] = period_meta(runner, slo, sloset.period_s, end, args.model, bucket_labels)
            results.append((slo, rows, meta))
    finally:
        runner.close()
    sys.stdout.write(render_many(results, args.format) + "\n")
    return 0
