"""The live page (`/`), its files and its read-only data endpoints, each running the CLI's own code over the
worker's store, so the page shows what the command prints (docs/live.md, "The data endpoints").
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timezone

from phasemeter.render.assets import ASSETS, asset


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


def register_live_views(app, settings, sink, sloset) -> None:
    """`sloset`: the SLOs read at start (app.declared_slos), the ones slo_minute counts until a restart."""
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
