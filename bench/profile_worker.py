"""Profile the worker's per-batch CPU path without Kafka: where do the microseconds go?

    python bench/profile_worker.py [--n 50000] [--batch 5000] [--envelope-size 0] [--with-store] [--json OUT]

Builds N raw event-v1 messages (or envelopes), wraps them as Faust-like
events, and runs what the agent runs per batch: `Pipeline.split` (the real
one: parse, validate, derive, offset bookkeeping, duplicate check) and the
sink's frame building + dedup token. Store reads answer "nothing stored" from
a stub, unless --with-store, which uses a real Sink on a tmp chDB (then the
insert and the duplicate-check query are in the profile too).
First an unprofiled pass (wall time per message), then the same under cProfile;
prints the top functions of phasemeter's own code by cumulative time, and the
top functions overall by own time.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402

OURS = tuple(str(U.ROOT / d) for d in ("stream_jobs", "producers", "phasemeter"))


class StubSink:
    """The store calls Pipeline makes, answering 'nothing stored yet'."""

    paused_reason = None
    retries = 0

    def stored_max(self, topic):
        return {}

    def label_values(self):
        return []

    def stored_in_range(self, topic, partition, lo, hi):
        from phasemeter.stream_jobs.ledger import Stored

        return Stored()

    def existing_request_ids(self, asks):
        return [set() for _ in asks]


def make_events(n: int, envelope_size: int, topic: str = "bench.profile", first_offset: int = 0) -> list:
    events = U.synthetic_events(n)  # new request_ids on every call
    if envelope_size > 1:
        values = [U.envelope(events[i:i + envelope_size]) for i in range(0, n, envelope_size)]
    else:
        values = [U.encode_event(e) for e in events]
    return [SimpleNamespace(message=SimpleNamespace(topic=topic, partition=i % 4, offset=first_offset + i // 4),
                            value=v) for i, v in enumerate(values)]


def make_pipeline(with_store: bool, tmp: Path):
    from phasemeter.settings import Settings
    from phasemeter.stream_jobs.pipeline import Pipeline

    if not with_store:
        return Pipeline(Settings(topic="bench.profile"), StubSink()), None
    from phasemeter.store.migrate import migrate
    from phasemeter.store.client import connect

    sys.path.insert(0, str(U.BENCH_DIR))
    from bench_sink import make_sink

    settings = Settings(topic="bench.profile", clickhouse_url=f"chdb://{tmp / 'store'}", database="bench_prof",
                        data_dir=str(tmp))
    client = connect(settings)
    migrate(client)
    return Pipeline(settings, make_sink(client, settings.store_dsn)), client


def per_batch(pipeline, batches, with_store: bool) -> int:
    from phasemeter.stream_jobs.sink import counted_token

    n_rows = 0
    for batch in batches:
        rows, dead, _phases, _suspects = pipeline.split(batch)
        if with_store:
            pipeline.sink.write(rows, dead)
        elif len(rows):  # what Sink._write_rows does before handing the table to the client
            counted_token("generations", rows.counted_offsets())
            rows.arrow()
        n_rows += len(rows)
    return n_rows


def ours(stats: pstats.Stats, limit: int) -> list[dict]:
    out = []
    for (fname, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():
        if fname.startswith(OURS):
            out.append({"function": f"{Path(fname).parent.name}/{Path(fname).name}:{line}({func})",
                        "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    out.sort(key=lambda r: r["cumtime_s"], reverse=True)
    return out[:limit]


def overall(stats: pstats.Stats, limit: int) -> list[dict]:
    out = []
    for (fname, line, func), (cc, nc, tt, ct, _callers) in stats.stats.items():
        short = func if fname == "~" else f"{Path(fname).name}:{line}({func})"
        out.append({"function": short, "calls": nc, "tottime_s": tt, "cumtime_s": ct})
    out.sort(key=lambda r: r["tottime_s"], reverse=True)
    return out[:limit]


def run(n: int, batch: int, envelope_size: int, with_store: bool, top: int) -> dict:
    per_msg = max(1, envelope_size)
    batch_msgs = max(1, batch // per_msg)

    def batches(first_offset: int = 0) -> list:
        # With a store, each pass needs records the store has not seen: new
        # request_ids and offsets past the last pass's (the same topic, so the
        # pipeline treats them as the raw topic's, not another one's).
        events = make_events(n, envelope_size, first_offset=first_offset)
        return [events[i:i + batch_msgs] for i in range(0, len(events), batch_msgs)]

    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-prof-"))
    try:
        # Pass 1: unprofiled wall time.
        pipeline, client = make_pipeline(with_store, tmp)
        timed = batches()
        messages = sum(map(len, timed))
        per_batch(pipeline, timed[:1], with_store)  # warm-up: imports, first-batch store reads
        if with_store:
            timed = batches(n)
        else:
            pipeline, _ = make_pipeline(False, tmp)
        t = time.perf_counter()
        rows = per_batch(pipeline, timed, with_store)
        wall = time.perf_counter() - t
        # Pass 2: the same under cProfile.
        if with_store:
            timed = batches(2 * n)
        else:
            pipeline, _ = make_pipeline(False, tmp)
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        per_batch(pipeline, timed, with_store)
        prof.disable()
        prof_wall = time.perf_counter() - t
        if client is not None:
            client.close()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stats = pstats.Stats(prof, stream=io.StringIO())
    return {"messages": messages, "generations": rows, "batch_rows": batch, "with_store": with_store,
            "envelope_size": envelope_size, "wall_s": wall, "us_per_generation": wall / max(1, rows) * 1e6,
            "generations_per_s": rows / wall if wall else None, "profiled_wall_s": prof_wall,
            "ours": ours(stats, top), "overall": overall(stats, top)}


def render(r: dict) -> str:
    mode = "real Sink on chDB" if r["with_store"] else "store stubbed; Arrow table + token built, not inserted"
    env = f"envelopes of {r['envelope_size']}" if r["envelope_size"] > 1 else "1 event per message"
    head = (f"{r['generations']:,} generations ({env}), batches of {r['batch_rows']}, {mode}: "
            f"**{r['us_per_generation']:.1f} µs/generation = {r['generations_per_s']:,.0f} generations/s "
            f"on one core** unprofiled (profiled run {r['profiled_wall_s']:.2f} s).")
    t1 = U.md_table(["our function (by cumulative time)", "calls", "own s", "cumulative s", "% of profiled"],
                    [[x["function"], x["calls"], round(x["tottime_s"], 3), round(x["cumtime_s"], 3),
                      f"{100 * x['cumtime_s'] / r['profiled_wall_s']:.0f}%"] for x in r["ours"]])
    t2 = U.md_table(["any function (by own time)", "calls", "own s", "cumulative s"],
                    [[x["function"], x["calls"], round(x["tottime_s"], 3), round(x["cumtime_s"], 3)]
                     for x in r["overall"][:10]])
    return f"{head}\n\n{t1}\n\n{t2}"


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=50_000, help="generations")
    ap.add_argument("--batch", type=int, default=5000, help="generations per agent batch")
    ap.add_argument("--envelope-size", type=int, default=0, help="generations per message (0/1: one)")
    ap.add_argument("--with-store", action="store_true", help="real Sink on a tmp chDB instead of a stub")
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    result = run(args.n, args.batch, args.envelope_size, args.with_store, args.top)
    result["params"] = vars(args)
    print(render(result))
    U.write_json(args.json, result)
    return result


if __name__ == "__main__":
    main()
