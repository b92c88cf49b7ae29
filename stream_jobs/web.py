"""Read-only HTTP API on the worker's web port (127.0.0.1 by default): the live page, health, in-flight
generations and metrics. Readers of the store use the worker's ClickHouse HTTP interface instead (docs/sql.md,
docs/reads-through-the-worker.md); nothing here writes to the store or to a file.

The live page (`/`), its files and its read-only data endpoints each run the CLI's own code over the worker's
store, so the page shows what the command prints (docs/live.md, "The data endpoints").
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from phasemeter.render.assets import ASSETS, asset

from . import metrics, tasks
from .ready import is_ready
from .resume import fetched_ends


async def _answer(view, sink, fn, *args):
    """JSON of fn(runner, *args) -> (status, doc), run off the event loop: 503 when the store is away, 500
    when the query fails, never the worker down."""
    try:
        runner = sink.runner  # shares the sink's lock: one statement at a time
    except RuntimeError as exc:  # store down or locked: say so, don't hang
        return view.json({"error": f"store unavailable: {exc}"}, status=503)
    try:
        status, doc = await asyncio.get_running_loop().run_in_executor(None, fn, runner, *args)
    except Exception as exc:  # a failed query must not take the worker down
        return view.json({"error": f"query failed: {str(exc)[:400]}"}, status=500)
    return view.json(doc, status=status)


def _alerts(runner, bucket_edges: str) -> tuple[int, dict]:
    """The shipped rules at now, as `alerts check` without --rules: firing first, then check's order."""
    from phasemeter.alerts import check
    from phasemeter.alerts.evaluate import FIRING, as_dict
    from phasemeter.alerts.rules import load_rules
    from phasemeter.stream_jobs.buckets import labels, parse_edges

    order = labels(parse_edges(bucket_edges))
    ruleset = load_rules(None, order)
    at = datetime.now(timezone.utc)
    results = sorted(check(runner, ruleset, at, (), (), order), key=lambda r: r.state != FIRING)
    return 200, {"at": at.isoformat(), "firing": sum(r.state == FIRING for r in results),
                 "results": [as_dict(r) | {"runbook_url": ruleset.runbook_url(r.rule)} for r in results]}


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
    """The live page (`/`, docs/live.md) and its data endpoints, then the worker's own pages. `sloset`: the SLOs
    read at start (app.declared_slos), the ones slo_minute counts until a restart."""
    # Each handler is the GET of a Faust View that app.page builds around it (View.from_handler): `view`.
    # The page never changes while a worker runs; a short cache still shows a reinstall on the next reload.
    cache = {"Cache-Control": "max-age=60"}

    @app.page("/")
    async def index(view, request):
        return view.text(asset("index.html").decode(), content_type="text/html", headers=cache)

    @app.page("/live/{name}")
    async def live_file(view, request, name):
        if name not in ASSETS:
            return view.json({"error": f"no such file: {name}"}, status=404)
        # text(): aiohttp adds "; charset=utf-8" itself and refuses it in content_type
        return view.text(asset(name).decode(), content_type=ASSETS[name], headers=cache)

    @app.page("/api/bands")
    async def api_bands(view, request):
        from phasemeter.analytics.live import bands

        return await _answer(view, sink, bands, request.query, settings.bucket_edges)

    @app.page("/api/slo")
    async def api_slo(view, request):
        from phasemeter.analytics.live import slo

        return await _answer(view, sink, slo, request.query, sloset, settings.bucket_edges)

    @app.page("/api/pools")
    async def api_pools(view, request):
        from phasemeter.analytics.live_pools import pools

        return await _answer(view, sink, pools, request.query, settings.bucket_edges)

    @app.page("/api/alerts")
    async def api_alerts(view, request):
        return await _answer(view, sink, _alerts, settings.bucket_edges)

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
