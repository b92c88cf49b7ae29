"""Read-only HTTP API on the worker's web port (127.0.0.1 by default).

It exists because an embedded chDB store opens in one process only: while
the worker owns it, readers ask it. GET /query/named runs one named query
shipped in `sql/` (phasemeter.query.runner.HttpRunner), every value bound
server-side by ClickHouse; nothing here writes to the store or to a file.
"""

from __future__ import annotations

import asyncio

from faust.web import View

from phasemeter.query.runner import decode_params, encode_frame
from phasemeter.store.client import is_read_only, load_sql

from . import metrics, tasks
from .live_views import register_live_views
from .ready import is_ready
from .resume import fetched_ends


def consumer_lag(app, pipeline) -> dict:
    """Records on the broker this worker has not taken into a batch yet, per
    ingest partition it owns: the fetcher's last high-water mark minus the
    next offset its sequencer admits. None while it owns nothing it has a
    position for (starting, rebalancing); a partition it has not fetched yet
    is left out, not 0."""
    try:
        ends = fetched_ends(app.consumer, pipeline.topics)
    except Exception:  # not started yet: no consumer, no assignment
        return {"lag": None, "lag_by_partition": {}}
    per = {f"{t}/{p}": max(0, ends[t, p] - pos) for (t, p), pos in pipeline.sequencer.position(ends).items()}
    return {"lag": sum(per.values()) if per else None, "lag_by_partition": per}


def register_views(app, settings, pipeline, sink, joiner) -> None:
    register_live_views(app, settings, sink)  # GET /: the live page (issue 17)

    @app.page("/health")
    class Health(View):
        async def get(self, request):
            return self.json(pipeline.health() | consumer_lag(app, pipeline) | {"ready": is_ready(app)})

    @app.page("/debug/tasks")
    class Tasks(View):
        """Where the worker's own coroutines wait (tasks.py); ?all=1 adds
        Faust's and the Kafka client's."""
        async def get(self, request):
            return self.json({"tasks": tasks.dump(only_ours=request.query.get("all") != "1")})

    @app.page("/inflight")
    class Inflight(View):
        """Generations in flight per model x bucket x phase, oldest age; this
        worker's partitions only (sum over workers; max of the ages)."""
        async def get(self, request):
            return self.json(joiner.inflight())

    @app.page("/metrics")
    class Metrics(View):
        async def get(self, request):
            return self.text(metrics.render(pipeline.health(), joiner.inflight()),
                             content_type="text/plain; version=0.0.4")

    @app.page("/query/named/{name}")
    class Named(View):
        async def get(self, request, name):
            try:
                if not is_read_only(load_sql(name)):
                    return self.json({"error": f"query {name!r} is not read-only"}, status=403)
            except ValueError as exc:  # unknown or malformed query name
                return self.json({"error": str(exc)}, status=404)
            try:
                params = decode_params(request.query.get("params", "{}"))
            except ValueError as exc:
                return self.json({"error": f"bad params: {exc}"}, status=400)
            try:
                runner = sink.runner  # shares the sink's lock: one statement at a time
            except RuntimeError as exc:  # store down or locked: say so, don't hang
                return self.json({"error": f"store unavailable: {exc}"}, status=503)
            loop = asyncio.get_running_loop()
            try:
                body = await loop.run_in_executor(None, lambda: encode_frame(runner.df(name, params)))
            except Exception as exc:  # a bad query must not take the worker down
                return self.json({"error": f"query failed: {str(exc)[:400]}"}, status=400)
            return self.bytes(body, content_type="application/json")
