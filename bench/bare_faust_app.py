"""The reference for the worker benchmark: a Faust agent that only iterates a topic.

    python bench/bare_faust_app.py --bootstrap H:P --topic T --n N [--mode iterate|take]

Same Faust version and the same consumer-relevant app settings as the
phasemeter worker (raw value serializer, earliest offsets, commit cadence,
buffer size), a fresh group id, no store and no derivation. When N messages
have been seen it prints one JSON line {"count", "t_first", "t_last"} (epoch
seconds) and keeps running: stopping Faust from inside an agent can hang, so
the parent reads the line and kills this process.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid

import faust

# Faust redirects sys.stdout into its logger; the result line goes to the
# original stdout file descriptor, duplicated before Faust starts.
_OUT_FD = os.dup(1)


def build(args) -> faust.App:
    app = faust.App(
        args.group or f"bare-{uuid.uuid4().hex[:10]}",
        broker=[f"kafka://{hp}" for hp in args.bootstrap.split(",")],
        store="memory://",
        datadir=args.datadir or tempfile.mkdtemp(prefix="pm-bare-faust-"),
        topic_partitions=args.partitions,
        consumer_auto_offset_reset="earliest",
        broker_commit_every=1000,
        broker_commit_interval=1.0,
        stream_buffer_maxsize=max(4096, args.batch * 2),
        web_enabled=False,
    )
    topic = app.topic(args.topic, key_type=bytes, value_type=bytes,
                      key_serializer="raw", value_serializer="raw")
    state = {"count": 0, "t_first": None, "done": False}

    def seen(k: int) -> None:
        if state["t_first"] is None:
            state["t_first"] = time.time()
        state["count"] += k
        if state["count"] >= args.n and not state["done"]:
            state["done"] = True
            line = json.dumps({"count": state["count"], "t_first": state["t_first"], "t_last": time.time()})
            os.write(_OUT_FD, (line + "\n").encode())

    if args.mode == "take":
        @app.agent(topic, name="bare.take")
        async def take(stream):
            async for events in stream.take_events(args.batch, within=1.0):
                seen(len(events))
    else:
        @app.agent(topic, name="bare.iterate")
        async def iterate(stream):
            async for _value in stream:
                seen(1)
    return app


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--n", type=int, required=True, help="messages to count before reporting")
    ap.add_argument("--group", default="")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--mode", choices=("iterate", "take"), default="iterate",
                    help="plain `async for` per message, or stream.take_events(batch) like the worker")
    ap.add_argument("--batch", type=int, default=5000)
    ap.add_argument("--datadir", default="")
    args = ap.parse_args(argv)
    app = build(args)
    from faust import Worker

    sys.argv = [sys.argv[0]]
    Worker(app, loglevel="warn", redirect_stdouts=False).execute_from_commandline()


if __name__ == "__main__":
    main()
