"""Read-only HTTP API on the worker's web port (127.0.0.1 by default): the live page, health, in-flight
generations and metrics. Readers of the store use the worker's ClickHouse HTTP interface instead (docs/sql.md,
docs/reads-through-the-worker.md); nothing here writes to the store or to a file.
"""

from __future__ import annotations

from . import metrics, tasks
from .live_views import register_live_views
from .ready import is_ready
from .resume import fetched_ends


def consumer_lag(app, pipeline) -> dict:
    """Records on the broker not yet taken into a batch, per ingest partition owned: the last fetched high-water
    mark minus the sequencer's next offset (Sequencer.owed). None while no owned partition has a position
    (starting, rebalancing); a partition not fetched yet is left out, not 0."""
    try:
        ends = fetched_ends(app.consumer, pipeline.topics)
    except Exception:  # not started yet: no consumer, no assignment
        return {"lag": None, "lag_by_partition": {}}
    per = {f"{t}/{p}": max(0, ends[t, p] - pos) for (t, p), pos in pipeline.sequencer.owed(ends).items()}
    return {"lag": sum(per.values()) if per else None, "lag_by_partition": per}


def register_views(app, settings, pipeline, sink, joiner, sloset) -> None:
    register_live_views(app, settings, sink, sloset)  # GET /: the live page (docs/live.md)

    # Each handler is the GET of a Faust View that app.page builds around it (View.from_handler): `view`.
    @app.page("/health")
    async def health(view, request):
        # database: the one a read through this worker sees (the CLI checks its --database against it)
        return view.json(pipeline.health() | consumer_lag(app, pipeline)
                         | {"ready": is_ready(app), "database": settings.database})

    @app.page("/debug/tasks")
    async def debug_tasks(view, request):
        """Where the worker's own coroutines wait (tasks.py); ?all=1 adds Faust's and the Kafka client's."""
        return view.json({"tasks": tasks.dump(only_ours=request.query.get("all") != "1")})

    @app.page("/inflight")
    async def inflight(view, request):
        """Generations in flight per model x bucket x phase and the oldest age, this worker's partitions only
        (sum the counts over workers, take the max of the ages)."""
        return view.json(joiner.inflight())

    @app.page("/metrics")
    async def metrics_text(view, request):
        return view.text(metrics.render(pipeline.health(), joiner.inflight()),
                         content_type="text/plain; version=0.0.4")
