"""`phasemeter` command line: migrate, worker, query, chart, kafka, config, demo.

Errors name the flag or value at fault and exit with status 2.
"""

from __future__ import annotations

import argparse
import os
import sys

from phasemeter.cli import commands, dlq, emit, inflight, otlp, slo, sql
from phasemeter.alerts import cli as alerts_cli
from phasemeter.analytics import cli as analytics_cli
from phasemeter.settings import Settings
from phasemeter.textgrid import printable
from phasemeter.timeparse import ArgError, number

PORT = number(int, 1, 65_535)

# Feature modules that add their own subcommands, each with
# register(sub, common, window_flags) setting `func=(args, settings) -> int`.
# Listed by import, not by name, so a reader (or a tool) can follow every command.
FEATURES = (alerts_cli, analytics_cli, dlq, emit, inflight, otlp, slo, sql)


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--clickhouse-url", help="store DSN (env CLICKHOUSE_URL); default: chdb under --data-dir")
    p.add_argument("--database", help="ClickHouse database (env PHASEMETER_DATABASE)")
    p.add_argument("--data-dir", help="data folder (env PHASEMETER_DATA_DIR)")
    p.add_argument("--bootstrap-servers", help="Kafka bootstrap (env KAFKA_BOOTSTRAP_SERVERS)")


def _window_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--from", dest="start", default="-1h", help="'now', -15m, -2h, or ISO time (default -1h)")
    p.add_argument("--to", dest="end", default="now", help="end of window (default now)")
    p.add_argument("--step", default="auto",
                   help="time step: 30s, 1m, 5m, 1h or auto (the finest at which most cells hold the samples "
                        "p1/p99 need; docs/live.md)")
    p.add_argument("--model", action="append", default=[], help="only this model (repeatable)")
    p.add_argument("--bucket", action="append", default=[], help="only this input bucket (repeatable)")
    p.add_argument("--via", help="ClickHouse HTTP interface to read through, http(s)://host:port (default: the "
                                 "SQL interface of the worker that holds the embedded store, found from the data dir)")
    analytics_cli.extend_window_flags(p)  # --exact/--rollup, --buckets, --latency


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="phasemeter", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("migrate", help="apply schema/NNNN_*.sql to the store")
    _common(p)
    p.add_argument("--status", action="store_true", help="list pending migrations, change nothing")
    p.set_defaults(func=commands.cmd_migrate)

    p = sub.add_parser("worker", help="run the stream job (Faust)")
    _common(p)
    p.add_argument("--web-port", type=PORT, help="read-only HTTP port (env PHASEMETER_WEB_PORT)")
    p.add_argument("--loglevel", default="info", choices=["crit", "error", "warn", "info", "debug"])
    p.set_defaults(func=commands.cmd_worker)

    q = sub.add_parser("query", help="query the store").add_subparsers(dest="what", required=True)
    p = q.add_parser("bands", help="percentile bands per model × input bucket × time step")
    _common(p)
    _window_flags(p)
    p.add_argument("--format", default="table", choices=["table", "csv", "json"])
    analytics_cli.table_flags(p)
    p.set_defaults(func=commands.cmd_query)

    p = sub.add_parser("chart", help="write the bands as a PNG, or a self-contained HTML file")
    _common(p)
    _window_flags(p)
    p.add_argument("--out", default="phasemeter-bands.png", help="output path: .png, .svg, or .html (interactive)")
    p.set_defaults(func=commands.cmd_chart)

    p = sub.add_parser("kafka", help="the local single-node KRaft broker")
    _common(p)
    p.add_argument("action", choices=["fetch", "start", "stop", "status"])
    p.add_argument("--port", type=PORT, help="broker port (default: a free one)")
    p.set_defaults(func=commands.cmd_kafka)

    p = sub.add_parser("config", help="show effective settings (secrets masked)")
    _common(p)
    p.set_defaults(func=commands.cmd_config)

    p = sub.add_parser("demo", help="end-to-end demo: broker, worker, synthetic load, table, chart")
    _common(p)
    p.add_argument("--seconds", type=number(float, 1, 86_400), default=25.0,
                   help="how long the synthetic gateway runs")
    p.add_argument("--rate", type=number(float, 1, 1_000_000), default=3000.0, help="generations per second")
    p.add_argument("--out-dir", default="demo-out", help="where the PNG and table go")
    p.add_argument("--keep", action="store_true",
                   help="leave the broker and the worker running afterwards, print the live page's URL "
                        "and the commands for the demo's store; Ctrl-C stops them")
    p.add_argument("--pd", action="store_true",
                   help="serve the synthetic traffic through a prefill/decode disaggregated deployment (2 prefill "
                        "pools, 3 decode pools, decode-2 slow, a KV transfer per request) and show the bands and "
                        "latency per decode pool")
    p.set_defaults(func=commands.cmd_demo)
    for module in FEATURES:
        module.register(sub, _common, _window_flags)
    return parser


def settings_from(args) -> Settings:
    return Settings.from_env(
        clickhouse_url=getattr(args, "clickhouse_url", None), database=getattr(args, "database", None),
        data_dir=getattr(args, "data_dir", None), web_port=getattr(args, "web_port", None),
        kafka_bootstrap_servers=getattr(args, "bootstrap_servers", None))


def _glue_relative_times(argv: list[str]) -> list[str]:
    """Let `--from -2h` work: argparse would read -2h as an option."""
    out, i = [], 0
    while i < len(argv):
        if argv[i] in ("--from", "--to", "--at") and i + 1 < len(argv) and argv[i + 1][:1] == "-":
            out.append(f"{argv[i]}={argv[i + 1]}")
            i += 2
        else:
            out.append(argv[i])
            i += 1
    return out


def main(argv: list[str] | None = None) -> int:
    argv = _glue_relative_times(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)

    def run() -> int:
        settings = settings_from(args)
        check_worker_database(args, settings)
        return args.func(args, settings)

    return guarded(args, run)


def check_worker_database(args, settings: Settings) -> None:
    """A read through a worker sees the worker's database only: a database
    the operator named (--database, PHASEMETER_DATABASE) that is not the
    worker's is an error naming it, not silently another database's answer."""
    if args.func is inflight.show or not hasattr(args, "via"):  # inflight: the worker's memory, no store
        return
    if getattr(args, "database", None):
        named = f"--database {args.database!r}"
    elif "PHASEMETER_DATABASE" in os.environ:
        named = f"PHASEMETER_DATABASE={settings.database!r}"
    else:
        return
    from phasemeter.query.remote import DATABASE, worker_state

    # The worker's own state file names its database: no round trip (~20 ms
    # of a read's process, urllib's import with it); --via asks its /health.
    info = None if args.via or not settings.is_embedded else worker_state(settings.data_path)
    url = args.via or (info["url"] if info else None)
    theirs = info.get(DATABASE) if info and DATABASE in info else (_worker_database(url) if url else None)
    if theirs is not None and theirs != settings.database:
        raise ArgError(f"{named}: the worker at {url} reads database {theirs!r}, and a read through it sees "
                       f"that one only; name {theirs!r}, or read {settings.database!r} without the worker "
                       "(stop it, or leave out --via)")


def _worker_database(url: str) -> str | None:
    """The database the worker at `url` reads (its /health), None when it does not say or answer."""
    import json
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=5) as resp:
            return json.loads(resp.read()).get("database")
    except (OSError, ValueError, AttributeError):
        return None


def guarded(args, run) -> int:
    """`run()`'s exit code; errors name the flag or value at fault (exit 2),
    operational failures are one line (exit 1), no traceback."""
    try:
        return run() or 0
    except (ArgError, ValueError) as exc:
        # printable: an error may quote stored values (the models in a window)
        print(f"phasemeter {args.command}: error: {printable(str(exc))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `phasemeter config | head`: the reader left; not an error
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as exc:  # known operational failures: short message, no traceback
        from phasemeter.kafka_local import BrokerError
        from phasemeter.store.client import StoreError
        if isinstance(exc, (BrokerError, StoreError, RuntimeError)):
            print(f"phasemeter {args.command}: {printable(str(exc))}", file=sys.stderr)
            return 1
        raise


if __name__ == "__main__":
    sys.exit(main())
