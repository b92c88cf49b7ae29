"""The stream job: `create_app(settings)` builds the Faust app.

The agent is a thin loop: take a batch of records, run the pure pipeline
(`derive.process`) on each, write rows + dead letters in one idempotent step,
and only then let Faust ack (commit) the batch. See docs/delivery.md.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import os
import time

import faust

from phasemeter.settings import Settings
from phasemeter.store import connect

from .buckets import Bucketer, parse_edges
from . import reasons as R
from .derive import Rejection, process_message
from .sink import Sink
from .web import register_views

log = logging.getLogger("phasemeter.worker")


class Pipeline:
    """State the agent needs between batches, kept out of the Faust closure."""

    def __init__(self, settings: Settings, sink: Sink):
        self.settings = settings
        self.sink = sink
        self.bucket = Bucketer(parse_edges(settings.bucket_edges))
        self.stored: dict[int, int] | None = None  # partition -> highest stored offset
        self.exact: dict[int, set[int]] = {}  # partition -> stored offsets at/below that max
        self.consumed = self.skipped = self.accepted = self.rejected = self.duplicates = 0
        self.started = time.time()
        self.last_batch_at: float | None = None
        self.last_batch: dict | None = None

    def forget_offsets(self) -> None:
        """After a rebalance another worker may have stored more: re-read."""
        self.stored = None
        self.exact = {}

    def _already_stored(self, events) -> set[tuple[int, int]]:
        """(partition, offset) of re-delivered records that are in the store.

        Records above a partition's stored maximum are new. At or below it, the
        first batch after (re)assignment asks the store which exact offsets it
        holds, so a batch that was only partly stored is completed, not skipped.
        """
        lows: dict[int, int] = {}
        for event in events:
            p, o = event.message.partition, event.message.offset
            if o <= self.stored.get(p, -1) and p not in self.exact:
                lows[p] = min(lows.get(p, o), o)
        for p, lo in lows.items():
            self.exact[p] = self.sink.stored_in_range(self.settings.topic, p, lo, self.stored[p])
        return {(e.message.partition, e.message.offset) for e in events
                if e.message.offset <= self.stored.get(e.message.partition, -1)
                and e.message.offset in self.exact.get(e.message.partition, ())}

    def _drop_duplicates(self, rows: list[dict], dead: list[dict], now: float) -> list[dict]:
        """A generation whose request_id is already stored (or earlier in this
        batch) is a duplicate delivery from the gateway: dead-letter it."""
        if not rows:
            return rows
        ts = [r["ts"] for r in rows]
        ids = list({r["request_id"] for r in rows})
        seen = self.sink.existing_request_ids(self.settings.topic, ids, min(ts) - 0.002, max(ts) + 0.002)
        kept = []
        for row in rows:
            if row["request_id"] in seen:
                dead.append({"ts": now, "reason": R.DUPLICATE,
                             "detail": f"request_id {row['request_id'][:128]} already stored",
                             "payload": "", "payload_size": 0,
                             **{k: row[k] for k in ("src_topic", "src_partition", "src_offset")}})
                self.duplicates += 1
            else:
                seen.add(row["request_id"])
                kept.append(row)
        return kept

    def split(self, events) -> tuple[list[dict], list[dict]]:
        if self.stored is None:
            self.stored = self.sink.stored_offsets(self.settings.topic)
        rows, dead = [], []
        now = time.time()
        cap = self.settings.dlq_payload_bytes
        stored = self._already_stored(events)
        for event in events:
            msg = event.message
            if (msg.partition, msg.offset) in stored:
                self.skipped += 1  # stored before a crash/rebalance: already counted
                continue
            source = {"src_topic": msg.topic, "src_partition": msg.partition, "src_offset": msg.offset}
            try:
                results = process_message(event.value, self.bucket, self.settings.max_message_bytes, now)
            except Exception as exc:  # a bug must not turn one event into a stuck partition
                log.exception("derivation failed at %s/%s", msg.partition, msg.offset)
                results = [Rejection(R.INTERNAL, f"{type(exc).__name__}: {str(exc)[:200]}")]
            for result in results:
                if isinstance(result, Rejection):
                    raw = event.value or b""
                    dead.append({"ts": now, "reason": result.reason, "detail": result.detail,
                                 "payload": base64.b64encode(raw[:cap]).decode(), "payload_size": len(raw),
                                 **source})
                else:
                    result.update(source)
                    rows.append(result)
        return self._drop_duplicates(rows, dead, now), dead

    def mark_stored(self, events) -> None:
        if self.stored is None:
            return
        for event in events:
            msg = event.message
            if msg.offset > self.stored.get(msg.partition, -1):
                self.stored[msg.partition] = msg.offset

    def health(self) -> dict:
        return {
            "status": "paused" if self.sink.paused_reason else "ok",
            "paused_reason": self.sink.paused_reason,
            "consumed": self.consumed, "accepted": self.accepted, "rejected": self.rejected,
            "skipped_redelivered": self.skipped, "duplicates": self.duplicates,
            "store_retries": self.sink.retries,
            "uptime_s": round(time.time() - self.started, 1), "last_batch_at": self.last_batch_at,
            "last_batch": self.last_batch,
        }


def _broker_credentials(settings: Settings):
    if settings.kafka_security_protocol == "PLAINTEXT":
        return None
    ssl_context = None
    if "SSL" in settings.kafka_security_protocol:
        ssl_context = faust.ssl.create_default_context(cafile=settings.kafka_ssl_cafile or None)
    if settings.kafka_security_protocol.startswith("SASL"):
        return faust.SASLCredentials(username=settings.kafka_sasl_username,
                                     password=settings.kafka_sasl_password,
                                     mechanism=settings.kafka_sasl_mechanism or "PLAIN",
                                     ssl_context=ssl_context)
    return faust.SSLCredentials(ssl_context)


def open_store_for_worker(settings: Settings):
    """Connect and refuse to write into an un-migrated store."""
    from phasemeter.migrate import pending

    client = connect(settings)
    todo = pending(client)
    if todo:
        client.close()
        raise RuntimeError(f"{len(todo)} pending migration(s): run `phasemeter migrate`")
    return client


def create_app(settings: Settings, client=None) -> faust.App:
    """Build the worker. `client` is an already-open store client (optional)."""
    from phasemeter.kafka_local import bootstrap_servers

    app = faust.App(
        settings.group_id,
        broker=[f"kafka://{hp}" for hp in bootstrap_servers(settings).split(",")],
        broker_credentials=_broker_credentials(settings),
        store="memory://",
        web_host=settings.web_host,
        web_port=settings.web_port,
        web_bind=settings.web_host,
        topic_partitions=settings.topic_partitions,
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=settings.kafka_session_timeout_s,
        broker_heartbeat_interval=min(3.0, settings.kafka_session_timeout_s / 3),
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=max(4096, settings.batch_rows * 2),
        producer_max_request_size=max(1_048_576, settings.max_message_bytes + 65_536),
        web_enabled=True,
    )
    sink = Sink((lambda: client) if client is not None else (lambda: open_store_for_worker(settings)),
                settings.store_dsn)
    pipeline = Pipeline(settings, sink)
    app.phasemeter_pipeline = pipeline  # for views, tests and the CLI
    raw = app.topic(settings.topic, key_type=bytes, value_type=bytes,
                    key_serializer="raw", value_serializer="raw")
    dlq = app.topic(settings.dlq_topic, key_serializer="raw", value_serializer="raw")

    @app.on_partitions_assigned.connect
    async def _reload_offsets(app, assigned, **kwargs):  # noqa: ARG001
        pipeline.forget_offsets()

    @app.agent(raw, name="phasemeter.ingest")
    async def ingest(stream):
        try:
            await _ingest(stream)
        except asyncio.CancelledError:
            raise
        except BaseException:
            # Faust would log a crashed agent and keep the process "up" doing
            # nothing. Exit instead, so a supervisor restarts us; the batch
            # in hand was not acked and is re-delivered.
            log.critical("ingest agent crashed; exiting with 70", exc_info=True)
            logging.shutdown()
            os._exit(70)

    async def _ingest(stream):
        loop = asyncio.get_running_loop()
        async for events in stream.take_events(settings.batch_rows, within=settings.batch_seconds):
            pipeline.consumed += len(events)
            t_start = time.time()
            rows, dead = await loop.run_in_executor(None, pipeline.split, events)
            t_split = time.time()
            # Blocks (retrying) while the store is down: the stream stops being
            # consumed (backpressure) and nothing of this batch is acked.
            await loop.run_in_executor(None, sink.write, rows, dead)
            for record in dead:
                value = json.dumps({k: record[k] for k in record if k != "ts"} | {"rejected_at": record["ts"]})
                await dlq.send(key=record["src_topic"].encode(), value=value.encode())
            pipeline.mark_stored(events)
            pipeline.accepted += len(rows)
            pipeline.rejected += len(dead)
            pipeline.last_batch_at = time.time()
            # Where a batch's time goes, for /health and the freshness benchmark.
            pipeline.last_batch = {
                "messages": len(events), "rows": len(rows), "dead": len(dead),
                "split_s": round(t_split - t_start, 4), "write_s": round(pipeline.last_batch_at - t_split, 4),
                "oldest_age_s": round(t_start - min(r["ts"] for r in rows), 3) if rows else None,
                "newest_age_s": round(t_start - max(r["ts"] for r in rows), 3) if rows else None,
            }

    register_views(app, settings, pipeline, sink)
    return app
