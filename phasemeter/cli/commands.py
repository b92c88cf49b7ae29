"""Implementations of the CLI subcommands (parsing lives in cli.py)."""

from __future__ import annotations

import sys

from phasemeter.settings import Settings
from phasemeter.timeparse import ArgError


def cmd_config(args, settings: Settings) -> int:
    width = max(len(env) for env, _, _ in settings.describe())
    for env, value, doc in settings.describe():
        print(f"{env.ljust(width)}  {value!s:<32}  {doc}")
    if settings.is_embedded:
        print(f"\nSQL interface (ClickHouse HTTP, read-only, served by the worker): {settings.sql_url}/")
    return 0


def cmd_migrate(args, settings: Settings) -> int:
    from phasemeter.store.migrate import migrate, pending
    from phasemeter.store.client import connect

    client = connect(settings)
    if args.status:
        todo = pending(client)
        for mig in todo:
            print(f"pending {mig.version:04d}_{mig.name}")
        print(f"{len(todo)} pending")
        return 0
    done = migrate(client)
    for mig in done:
        print(f"applied {mig.version:04d}_{mig.name}")
    from phasemeter.store.client import load_sql
    from phasemeter.store.rollup import TIERS

    for name, what, days, env in (
            ("raw", "raw generations", settings.raw_ttl_days, "PHASEMETER_RAW_TTL_DAYS"),
            ("rollup", "rollup generations", settings.rollup_ttl_days, "PHASEMETER_ROLLUP_TTL_DAYS"),
            ("slo", "per-minute SLO counts", settings.rollup_ttl_days, "PHASEMETER_ROLLUP_TTL_DAYS")):
        if days < 1:
            raise ArgError(f"{env}={days}: must be at least 1")
        for params in ([{"days": days, "table": t.table} for t in TIERS] if name == "rollup" else [{"days": days}]):
            client.command(load_sql(f"set_{name}_ttl"), parameters=params,
                           settings={"materialize_ttl_after_modify": 0})
        print(f"{what} kept {days} days")
    print(f"store {settings.database} is up to date ({len(done)} applied now)")
    client.close()
    return 0


def local_url(settings: Settings, port: int | None = None) -> str:
    """Where a CLI on this machine reaches the worker's web port (or another
    port of it, such as the SQL interface's). A wildcard
    bind (0.0.0.0, ::) is reached on loopback: the port answers only the
    Host names it serves (phasemeter.callers), and 0.0.0.0 is not one."""
    host = "127.0.0.1" if settings.web_host in ("", "0.0.0.0", "::") else settings.web_host
    return f"http://{'[' + host + ']' if ':' in host else host}:{port or settings.web_port}"


def cmd_worker(args, settings: Settings) -> int:
    from phasemeter.stream_jobs import sql_http
    from phasemeter.stream_jobs.app import changelog_topics, create_app
    from phasemeter.stream_jobs.faust_adapter import Worker

    from phasemeter.kafka_local import bootstrap_servers, ensure_topics
    from phasemeter.query.remote import SQL_URL, clear_state, write_state

    from phasemeter.store.client import StoreError, open_migrated_store

    from phasemeter.stream_jobs.app import declared_slos

    declared_slos(settings)  # a bad SLO file stops here, before any store is opened
    try:
        client = open_migrated_store(settings)
    except StoreError as exc:
        if "pending migration" in str(exc):
            raise
        # Down or locked (chDB held by another process): start anyway, paused;
        # the sink keeps retrying and /health says why.
        print(f"phasemeter worker: {exc}; starting paused, will retry", file=sys.stderr)
        client = None
    # Bound before worker.json names it (beyond loopback without a password: no start).
    sql_socket = sql_http.reserve(settings) if settings.is_embedded else None
    app = create_app(settings, client, sql_socket)
    ensure_topics(bootstrap_servers(settings), settings.topics, settings.topic_partitions,
                  settings.kafka_client_config(), compacted=changelog_topics(app))
    if settings.is_embedded:
        write_state(settings.data_path, local_url(settings), database=settings.database,
                    **({SQL_URL: local_url(settings, settings.sql_port)} if sql_socket else {}))
    try:
        worker = Worker(app, loglevel=args.loglevel)
        # Faust's terminal spinner sets the root logger to DEBUG whenever the
        # level is warn or above, so every aiokafka send and fetch built a
        # debug record (~10 % of the worker's time); it only animates a TTY.
        worker.spinner = None
        worker.execute_from_commandline()
    finally:
        clear_state(settings.data_path)
    return 0


def fetch_bands(args, settings: Settings):
    """(DataFrame, meta): bands or latency, exact or rollup (chosen from the window),
    from the worker's API when it owns the embedded store, else directly."""
    from phasemeter.analytics import fetch

    return fetch(args, settings)


def cmd_query(args, settings: Settings) -> int:
    from phasemeter.analytics import render
    from phasemeter.analytics.present import table_columns
    from phasemeter.render.table import check_columns

    kind = "stalls" if getattr(args, "stalls", False) else "bands"
    check_columns(args.columns, table_columns(kind))  # before any store is opened
    from phasemeter.analytics import fetch_rows

    rows, meta = fetch_rows(args, settings)  # plain columns: a text output imports no pandas
    sys.stdout.write(render(rows, args.format, meta, args.columns, args.wide) + "\n")
    return 0


def cmd_chart(args, settings: Settings) -> int:
    from phasemeter.analytics import write_chart

    df, meta = fetch_bands(args, settings)
    slo = None
    if str(args.out).lower().endswith((".html", ".htm")) and meta.get("kind") == "bands":
        from phasemeter.analytics.live import chart_slo

        slo = chart_slo(args, settings, meta)  # the declared SLOs' attainment row, as on the live page
    path = write_chart(df, meta, args.out, slo=slo)
    print(f"wrote {path} ({len(df)} rows, {meta['path']} path, step {meta['step_s']}s)")
    return 0


def cmd_kafka(args, settings: Settings) -> int:
    from phasemeter.kafka_local import LocalBroker, fetch_jars, running_broker

    kafka_dir = settings.data_path / "kafka"
    if args.action == "fetch":
        print(fetch_jars())
    elif args.action == "status":
        print(running_broker(settings.data_path) or "not running")
    elif args.action == "start":
        if running_broker(settings.data_path):
            print(f"already running at {running_broker(settings.data_path)}")
            return 0
        broker = LocalBroker(kafka_dir, port=args.port).start()
        print(f"Kafka up at {broker.bootstrap} (pid {broker.proc.pid}); stop with `phasemeter kafka stop`")
    elif args.action == "stop":
        import json
        import os
        import signal

        state = kafka_dir / "broker.json"
        if not running_broker(settings.data_path):
            print("not running")
            return 0
        os.kill(json.loads(state.read_text())["pid"], signal.SIGTERM)
        state.unlink(missing_ok=True)
        print("stopping")
    return 0


def cmd_demo(args, settings: Settings) -> int:
    from phasemeter.demo.run import run_demo

    return run_demo(settings, seconds=args.seconds, rate=args.rate, out_dir=args.out_dir, keep=args.keep,
                    pd=args.pd)
