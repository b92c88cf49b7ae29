"""CLI for analytics: flags the lead adds to the window flags, plus
`phasemeter latency` and `phasemeter analytics backfill`.

Wiring (phasemeter/cli/main.py, phasemeter/cli/commands.py):
* `_window_flags(p)` calls `extend_window_flags(p)`;
* `fetch_bands(args, settings)` returns `phasemeter.analytics.fetch(args, settings)`
  as (df, meta) -- meta["step_s"] is the step;
* `cmd_query` prints `analytics.render(df, args.format, meta)`;
* `cmd_chart` calls `analytics.write_chart(df, meta, args.out)` (.html -> HTML).
"""

from __future__ import annotations

import argparse
import sys

from phasemeter.analytics.variants import ABANDONED_CHOICES, BY_CHOICES, PREFILL_VARIANTS


MAX_EDGE = 2**32 - 1  # input_tokens is a UInt32, and so are the re-bucketing queries' edges


def edges_flag(text: str) -> str:
    """`--buckets`: edges or a preset, checked here so argparse names the flag;
    the text itself goes on to run_query."""
    from phasemeter.stream_jobs.buckets import parse_edges

    try:
        edges = parse_edges(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if edges[-1] > MAX_EDGE:
        raise argparse.ArgumentTypeError(f"bucket edges {text!r}: an edge is a token count, at most {MAX_EDGE}")
    return text


def path_flags(p) -> None:
    g = p.add_mutually_exclusive_group()
    g.add_argument("--exact", action="store_true",
                   help="force the exact path (raw rows, quantilesExactInclusive == numpy linear)")
    g.add_argument("--rollup", action="store_true",
                   help="force the per-minute rollup (fast for long windows; step must be whole minutes)")
    p.add_argument("--no-tiers", action="store_true",
                   help="on the rollup path read the per-minute tier only, not the hour/day tiers (the same "
                        "numbers up to the sketch's merge order; for comparing and benchmarking)")
    p.add_argument("--buckets", metavar="EDGES", type=edges_flag,
                   help="re-bucket at query time from raw input_tokens: edges like 0,1024,4096,16384,65536 "
                        "or a preset (default, litellm); exact path only")
    p.add_argument("--abandoned", default="include", choices=ABANDONED_CHOICES,
                   help="generations that never ended (status=abandoned): include them in n and the "
                        "percentiles (default: no survivorship bias) or exclude them; every row counts them "
                        "either way. exclude needs the exact path (chosen automatically)")
    p.add_argument("--by", choices=list(BY_CHOICES),
                   help="one row per prefill/decode disaggregated pool too (the column named, after model; '' = "
                        "the event named none); latency adds the KV transfer's kv_transfer_p50/p90/p99. Raw rows "
                        "only: chooses the exact path; refused with --rollup, --buckets and --stalls")
    p.add_argument("--prefill", default="total", choices=list(PREFILL_VARIANTS),
                   help="prefill throughput shown: total = input_tokens/ttft_s (includes queue, what users "
                        "feel; default), engine = input_tokens/(ttft_s - queue_s) (excludes queue), uncached "
                        "= prefill_tps_uncached. engine/uncached need the exact path (chosen automatically)")


def extend_window_flags(p) -> None:
    """New flags for `query bands` and `chart` (called from cli._window_flags):
    --exact/--rollup, --buckets, --abandoned include|exclude, --prefill total|engine|uncached, --latency, --stalls."""
    path_flags(p)
    p.add_argument("--latency", action="store_true",
                   help="latency view instead of throughput: ttft_s / tpot_s / queue_s p50, p90, p99 "
                        "(high = slow tail)")
    p.add_argument("--stalls", action="store_true",
                   help="decode-stall view instead of throughput: per cell, generations with chunk data, "
                        "p50/p99/max of max_gap_s (largest gap between streamed chunks) and the stalled share. "
                        "Raw rows only: chooses the exact path; refused with --rollup (the rollup has no gap data)")


def cmd_latency(args, settings) -> int:
    from phasemeter.analytics import fetch, render, write_chart

    args.latency = True
    from phasemeter.render.table import check_columns

    from phasemeter.analytics.present import table_columns

    check_columns(args.columns, table_columns("latency"))  # before any store is opened
    df, meta = fetch(args, settings)
    if args.out:
        path = write_chart(df, meta, args.out)
        print(f"wrote {path} ({len(df)} rows, {meta['path']} path, step {meta['step_s']}s)")
        return 0
    sys.stdout.write(render(df, args.format, meta, args.columns, args.wide) + "\n")
    return 0


def cmd_backfill(args, settings) -> int:
    from phasemeter.store.client import open_migrated_store
    from phasemeter.query.remote import worker_url
    from phasemeter.timeparse import window

    from phasemeter.analytics import backfill

    if settings.is_embedded and worker_url(settings.data_path):
        raise RuntimeError("a worker owns the embedded store and its HTTP API is read-only: stop the worker, "
                           "run the backfill, start it again (or use a ClickHouse server)")
    start, end = window(args.start, args.end)
    client = open_migrated_store(settings)
    try:
        res = backfill(client, start, end)
    finally:
        client.close()
    tiers = ", ".join(f"{name} {n:,}" for name, n in res["tier_cells_rebuilt"].items())
    print(f"rollup backfilled for [{res['start']}, {res['end']}): {res['generations_added']:,} generations added "
          f"(cells already in the rollup were skipped); cells rebuilt from raw in the coarser tiers: {tiers}")
    return 0


def _column_list(text: str) -> list[str]:
    return [c.strip() for c in text.split(",") if c.strip()]


def table_flags(p) -> None:
    """The table's width: the default columns fit 120 characters."""
    g = p.add_mutually_exclusive_group()
    g.add_argument("--wide", action="store_true", help="table: every column (csv/json always have all)")
    g.add_argument("--columns", type=_column_list, metavar="NAME,...",
                   help="table: these columns after time, model and bucket (names as in --format csv)")


def register(sub, common, window_flags) -> None:
    p = sub.add_parser("latency", help="ttft_s / tpot_s / queue_s p50, p90, p99 per model × bucket × step")
    common(p)
    window_flags(p)
    if not any(a.dest == "exact" for a in p._actions):  # the lead's window flags may already include ours
        path_flags(p)
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    table_flags(p)
    p.add_argument("--out", help="write an interactive .html chart instead of printing")
    p.set_defaults(func=cmd_latency)

    a = sub.add_parser("analytics", help="analytics maintenance (rollup backfill)")
    asub = a.add_subparsers(dest="analytics_command", required=True)
    p = asub.add_parser("backfill", help="fill the per-minute rollup from raw rows for a window "
                                         "(the materialized view only sees new inserts); idempotent per minute")
    common(p)
    p.add_argument("--from", dest="start", required=True, help="'now', -15m, -2h, or ISO time")
    p.add_argument("--to", dest="end", default="now", help="end of window (default now)")
    p.set_defaults(func=cmd_backfill)
