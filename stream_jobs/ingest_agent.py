"""The ingest agent, a thin loop over `pipeline.Pipeline`: admit a batch in strict offset order from the
store's recorded positions (resume.py), split it, write rows and dead letters in one idempotent step, forward
the phases to the join, and only then record the new positions (docs/delivery.md). Registered by app.create_app.
"""

from __future__ import annotations

import asyncio
import logging
import time

import msgspec

from . import batching, columnar, resume
from .preload import preload
from .ready import until_ready

log = logging.getLogger("phasemeter.worker")
# A dead letter on its topic, as compact UTF-8 JSON: ~1.5 µs, where json.dumps took ~10 µs of the event loop.
_JSON = msgspec.json.Encoder().encode


def install(app, settings, raw, pipeline, sink, joiner, ingest_handoff, offsets, crash):
    """Register the ingest agent over `raw` and its start task. `offsets`: a log_offsets.LogOffsets;
    `crash` wraps the agent's body so that a bug exits the process (app._crash_guard). -> the agent's reader
    of durable positions, for the idle check (app.py, resume.reseek_behind)."""
    preloading: list[asyncio.Future] = []  # the preload's import, from the start task on

    @app.task
    async def _start():
        # While the worker waits for Kafka: the offsets client's connection, and pandas in the executor.
        offsets.warm()
        preloading.append(asyncio.get_running_loop().run_in_executor(None, preload))

    @app.agent(raw, name="phasemeter.ingest")
    async def ingest(stream):
        await crash("ingest", lambda: _ingest(stream))

    async def load(tps):
        # Called for partitions just assigned, before any of their records is processed: the previous owner
        # has stopped, so their end offsets bound the re-read window (Pipeline.bound_rereads).
        try:
            ends = await offsets.ends(tps)
        except Exception as exc:  # e.g. the broker away: the window keeps its batch bounds, safe, only wider
            log.warning("end offsets of %d partition(s) not read (%s); checking the batch bounds after the resume",
                        len(tps), exc)
            ends = {}
        found = await asyncio.to_thread(sink.positions, sorted({t for t, _ in tps}))
        # A partition with no position in this store was never written to it (resume.admit records a start
        # first): no previous owner's batch to check there.
        pipeline.bound_rereads(ends | {tp: 0 for tp in tps if tp not in found})
        return found

    async def save(positions):
        await asyncio.to_thread(sink.record_progress, positions)

    async def _ingest(stream):
        # One batch at a time, but the next one is decoded (Pipeline.decode_ahead) while the store writes this
        # one without the GIL. Nothing of the next batch is decided before this one's progress is recorded.
        batch = None  # the task of the batch in hand
        try:
            async for events in batching.gather(stream, settings.batch_rows, settings.batch_bytes,
                                                settings.batch_seconds):
                ahead = None
                if batch is not None and not batch.done():
                    ahead = await asyncio.to_thread(pipeline.decode_ahead, events)
                if batch is not None:
                    await asyncio.shield(batch)  # raises what the batch raised
                await until_ready(app)
                # The preload's end. Each future awaited, not gathered: an ended one returns without yielding to
                # the loop, so once the import has ended nothing runs between the readiness check and the start.
                for imported in preloading:
                    await imported
                batch = ingest_handoff.start(_batch(events, ahead))
            if batch is not None:
                await asyncio.shield(batch)
            await ingest_handoff.stopping(batch)  # the stream ended: a stop
        except asyncio.CancelledError:
            # A stop: the batch in hand finishes (or is cut past the grace) wherever the cancellation found this loop.
            await ingest_handoff.stopping(batch)
            raise

    async def _batch(events, ahead=None):
        pipeline.counts["consumed"] += len(events)
        t_start = time.time()
        admitted = await resume.admit(app, offsets, pipeline.sequencer, events, load, save, pipeline.counts)
        events = admitted.events
        if not events:
            return
        rows, dead, phases, suspects = await asyncio.to_thread(pipeline.split, events, ahead)
        t_split = time.time()
        # Blocks, retrying, while the store is down: the stream is not consumed (backpressure), no progress recorded.
        pipeline.writing_since = t_split
        # Rows the store refuses for good come back as dead letters, stored.
        refused = await asyncio.to_thread(sink.write, rows, dead)
        dead = dead + refused
        if pipeline.reread_records:  # records a previous owner may have written too
            rewritten = await asyncio.to_thread(sink.rewrite_dropped, rows, dead)
            if rewritten:
                pipeline.counts["dedup_dropped_rewritten"] += rewritten
                log.warning("%d record(s) dropped by the store as a retry of an insert that never landed: "
                            "written again", rewritten)
        if suspects:  # re-read rows whose insert may not have reached the rollup
            repaired = await asyncio.to_thread(sink.repair_rollup, suspects)
            pipeline.counts["rollup_cells_checked"] += len(suspects)
            pipeline.counts["rollup_cells_repaired"] += len(repaired)
            if repaired:
                log.warning("rollup repaired from raw in %d cell(s): %s", len(repaired), repaired[:3])
        pipeline.writing_since = None
        t_written = time.time()
        # Progress is recorded only once all the batch produced is durable: rows and dead letters in the store,
        # dead letters and phases acknowledged by Kafka (a refused record is sent again).
        await pipeline.publisher.deliver([
            (settings.dlq_topic, record["src_topic"].encode(),
             _JSON({k: record[k] for k in record if k != "ts"} | {"rejected_at": record["ts"]}),
             None) for record in dead] + joiner.phase_messages(phases))
        positions = pipeline.sequencer.position({(e.message.topic, e.message.partition) for e in events})
        await save(positions)
        await ingest_handoff.commit(app, positions)
        pipeline.counts["accepted"] += len(rows) - len(refused)
        pipeline.counts["rejected"] += len(dead)
        pipeline.last_batch_at = time.time()
        span = columnar.ts_bounds(rows)
        # Where a batch's time goes, for /health and the freshness benchmark.
        pipeline.last_batch = {
            "messages": len(events), "rows": len(rows), "dead": len(dead),
            "split_s": round(t_split - t_start, 4), "write_s": round(t_written - t_split, 4),
            "forward_s": round(pipeline.last_batch_at - t_written, 4), "phases": len(phases),
            "oldest_age_s": round(t_start - span[0], 3) if span else None,
            "newest_age_s": round(t_start - span[1], 3) if span else None,
        }

    return load
