"""Read-only HTTP API on the worker's web port (127.0.0.1 by default).

It exists because an embedded chDB store opens in one process only: while
the worker owns it, `phasemeter query` asks here instead. Only GET; every
filter is parsed and then bound server-side by ClickHouse.
"""

from __future__ import annotations

import asyncio
import math

from faust.web import View

from phasemeter import queries
from phasemeter.timeparse import ArgError, auto_step, parse_duration, window


def _clean(value):
    # JSON has no NaN: an empty phase in a step is null, never 0.
    if isinstance(value, float) and math.isnan(value):
        return None
    return value


def bands_payload(df, step_s: int) -> dict:
    records = []
    for row in df.itertuples(index=False):
        rec = {col: _clean(getattr(row, col)) for col in queries.BAND_COLUMNS}
        rec["t"] = rec["t"].isoformat() + "Z" if rec["t"] is not None else None
        records.append(rec)
    return {"method": queries.METHOD, "legend": queries.LEGEND, "step_s": step_s, "rows": records}


def parse_band_args(args) -> dict:
    start, end = window(args.get("from", "-1h"), args.get("to", "now"))
    step = args.get("step", "auto")
    step_s = auto_step(start, end) if step == "auto" else int(parse_duration(step, "--step"))
    return {"start": start, "end": end, "step_s": step_s,
            "models": [m for m in args.getall("model", []) if m],
            "buckets": [b for b in args.getall("bucket", []) if b]}


def register_views(app, settings, pipeline, sink) -> None:
    @app.page("/health")
    class Health(View):
        async def get(self, request):
            return self.json(pipeline.health())

    @app.page("/query/bands")
    class Bands(View):
        async def get(self, request):
            try:
                p = parse_band_args(request.query)
            except ArgError as exc:
                return self.json({"error": str(exc)}, status=400)
            loop = asyncio.get_running_loop()
            try:
                df = await loop.run_in_executor(None, sink.run, queries.bands, p["start"], p["end"],
                                                p["step_s"], p["models"], p["buckets"])
            except Exception as exc:  # a bad query must not take the worker down
                return self.json({"error": f"query failed: {str(exc)[:300]}"}, status=500)
            return self.json(bands_payload(df, p["step_s"]))
