"""The stream job: `create_app(settings)` builds the Faust app. The ingest agent (ingest_agent.py) reads the raw
topic and the phase join's output (join_agent.py), so generations from both protocols take the same derivation
and the same exactly-once sink (docs/delivery.md, docs/phases.md)."""

from __future__ import annotations

import asyncio
import logging
import os
import ssl

import faust

from phasemeter.settings import Settings
from phasemeter.store.client import open_migrated_store

from . import (faust_adapter, handoff, ingest_agent, join_agent, log_offsets, publish, recovery_task, resume,
               sql_http, web_guard)
from .pipeline import Pipeline
from .sink import Sink, SinkStopped
from .ready import is_ready
from .web import register_views

log = logging.getLogger("phasemeter.worker")


def _broker_credentials(settings: Settings):
    if settings.kafka_security_protocol == "PLAINTEXT":
        return None
    ssl_context = None
    if "SSL" in settings.kafka_security_protocol:
        ssl_context = ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if settings.kafka_security_protocol.startswith("SASL"):
        return faust.SASLCredentials(username=settings.kafka_sasl_username,
                                     password=settings.kafka_sasl_password,
                                     mechanism=settings.kafka_sasl_mechanism or "PLAIN",
                                     ssl_context=ssl_context)
    return faust.SSLCredentials(ssl_context)


def declared_slos(settings: Settings):
    """The SLO file, checked against the buckets: a bad one stops the start, naming the key, not a retry loop."""
    from phasemeter.alerts.slo_rules import load_slos
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    return load_slos(settings.slos or None, labels(parse_edges(settings.bucket_edges)))


def changelog_topics(app: faust.App) -> list[str]:
    """The changelog topic of each table. Faust declares them only as its consumer starts; the worker
    creates them first (compacted, as Faust would), so the first group assigns them too (docs/phases.md)."""
    return [table.changelog_topic.get_topic_name() for table in app.tables.values()]


def _with_slos(client, sloset):
    """Register the declared SLOs before the sink writes a row (store/slo_defs.py)."""
    from phasemeter.store.slo_defs import register

    added, retired = register(client, sloset)
    if added or retired:
        log.info("SLOs declared: %s written; %d no longer counted", ", ".join(added) or "none", len(retired))
    return client


def create_app(settings: Settings, client=None, sql_socket=None) -> faust.App:
    """Build the worker. `client` is an already-open store client (optional)."""
    from phasemeter.kafka_local import bootstrap_servers

    faust_dir = settings.data_path / "faust"
    faust_dir.mkdir(parents=True, exist_ok=True)  # also with a server store (no chDB folder)
    bootstrap = bootstrap_servers(settings)
    app = faust.App(
        settings.group_id,
        broker=[f"kafka://{hp}" for hp in bootstrap.split(",")],
        broker_credentials=_broker_credentials(settings),
        # Faust's state folder: under our data dir, not the current directory.
        datadir=str(faust_dir),
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        # One middleware before every route (web_guard.py).
        web_application_options=web_guard.application_options(settings),
        # Unused, and the table view would serve the join's request ids by key.
        web_tables_enabled=False,
        web_router_enabled=False,
        topic_partitions=settings.topic_partitions,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.kafka_session_timeout_s / 3),
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        # Counted in messages, so Faust's default rather than PHASEMETER_BATCH_ROWS: 40,000 queued envelopes
        # of ~35 kB would be 1.4 GB. batching.gather bounds the batches by bytes.
        stream_buffer_maxsize=4096,
        producer_max_request_size=max(1_048_576, settings.max_message_bytes + 65_536),
        # Kafka's message size, not 16 kB: the join's changelog and forwarded phases went out in tiny requests.
        producer_max_batch_size=settings.max_message_bytes,
        # Without Faust's 1 s wait at start for tables declared late (faust_adapter.TableManager).
        TableManager="phasemeter.stream_jobs.faust_adapter:TableManager",
    )
    faust_adapter.install(app, settings.stop_grace_s)
    sloset = declared_slos(settings)
    sink = (Sink.over(_with_slos(client, sloset), settings.store_dsn) if client is not None
            else Sink(lambda: _with_slos(open_migrated_store(settings), sloset), settings.store_dsn))
    pipeline = Pipeline(settings, sink)
    # acks=False: offsets are committed from durable positions (handoff.Handoff), not from Faust's acks.
    raw = app.topic(*settings.ingest_topics, key_type=bytes, value_type=bytes,
                    key_serializer="raw", value_serializer="raw", acks=False)
    ingest_handoff = handoff.Handoff(settings.stop_grace_s, on_stopped=sink.stop_retrying)
    # Dead letters and phases reach Kafka before the batch's progress is recorded.
    pipeline.publisher = publish.Publisher(app)
    offsets = log_offsets.LogOffsets(app, settings, bootstrap)
    joiner = join_agent.install(app, settings, pipeline.bucket, offsets, _crash_guard)

    @app.on_before_shutdown.connect
    async def _close_offsets(app, **kwargs):  # noqa: ARG001
        offsets.close()

    @app.on_partitions_assigned.connect
    async def _reload_offsets(app, assigned, **kwargs):  # noqa: ARG001
        pipeline.forget_offsets()
        joiner.sequencer.forget()

    async def settle() -> None:
        # Before the partitions move, the batch in hand ends durable and committed (acks off: Faust won't wait).
        await ingest_handoff.settle()
        await joiner.handoff.settle()

    @app.on_partitions_revoked.connect
    async def _settle(app, revoked, **kwargs):  # noqa: ARG001
        await settle()

    faust_adapter.settle_before_leaving(app, settle)  # Faust sends no revoke signal once a stop has begun

    recovery_task.install(app, settings.recovery_stall_s)

    @app.timer(1.0, name="phasemeter.reseek")
    async def reseek():
        # A seek back whose records never came (nothing else arrives to notice).
        if is_ready(app):
            for seq, counts, *_ in agents:
                await resume.reseek_overdue(app, seq, counts)
            # A partition silent behind its end (Sequencer.behind); an agent with a batch in hand is busy. Checked
            # after both agents' seeks above, which it would delay: it may wait on the store (retried while down).
            for seq, counts, topics, load, agent_handoff in agents:
                if not agent_handoff.in_hand:
                    try:
                        await resume.reseek_behind(app, offsets, seq, topics, load, counts)
                    except SinkStopped:  # a stop ended the store's retries: the next start reads positions again
                        return

    load_ingest = ingest_agent.install(app, settings, raw, pipeline, sink, joiner, ingest_handoff, offsets,
                                       _crash_guard)
    # For the reseek timer, per agent: its sequencer, counts, topics, reader of durable positions and hand-off.
    agents = ((pipeline.sequencer, pipeline.counts, pipeline.topics, load_ingest, ingest_handoff),
              (joiner.sequencer, joiner.counts, {joiner.phases.get_topic_name()}, joiner.positions, joiner.handoff))

    register_views(app, settings, pipeline, sink, joiner, sloset)
    # Idle connections closed after IDLE_S, not aiohttp's 3630 s; before the web server starts.
    faust_adapter.set_keepalive(app, web_guard.IDLE_S)
    if settings.is_embedded and sql_socket is not None:  # a server store is its own SQL interface
        # The read-only ClickHouse HTTP interface (sql_http.py) on `sql_socket` (sql_http.reserve), stopped
        # before the worker.
        listener = sql_http.SqlListener(settings)

        @app.task
        async def _start_sql():
            await listener.start(sql_socket)

        @app.on_before_shutdown.connect
        async def _stop_sql(app, **kwargs):  # noqa: ARG001
            await listener.stop()

    return app


async def _crash_guard(name: str, body) -> None:
    try:
        await body()
    except asyncio.CancelledError:
        raise
    except BaseException:
        # Faust would keep the process up with its agent dead: exit, so that a supervisor restarts it.
        # The batch in hand was not acked and is re-delivered.
        log.critical("%s agent crashed; exiting with 70", name, exc_info=True)
        logging.shutdown()
        os._exit(70)
