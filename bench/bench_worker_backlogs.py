"""Worker throughput on real-world backlogs against the clean one, in the same run.

    python bench/bench_worker_backlogs.py [--n 100000] [--envelope-size 100] [--rounds 3]
                                          [--bootstrap H:P] [--json OUT]

Production traffic always holds a little of everything: a gateway with a
rare bug, a client that retries, the join's records beside the raw ones.
Pre-fills four backlogs of `--n` generations in envelopes of
`--envelope-size` (phasemeter.demo.synthetic's traffic):

* clean;
* invalid: 1 % of the events with ttft_s = -1 (dead-lettered, impossible_order);
* duplicate: 1 % of the events repeating the request_id of an event 37 before
  (dead-lettered, duplicate);
* mixed: half the generations on the raw topic, half on the joined topic
  (as the join agent writes them: v2 generations), read together.

Each round drains every backlog with a fresh worker into its own chDB store,
in turn (clean, invalid, duplicate, mixed), so the load of the shared host
falls on all of them alike; the rate is generations stored per second from
the first stored row to the last (/health polled every 20 ms). Each figure
is recorded beside the clean rate of its own round. Without --bootstrap a
local broker is started in a tmp dir and stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import results as R  # noqa: E402

KINDS = ("clean", "invalid", "duplicate", "mixed")
GOALS = {"invalid": ("worker-invalid-1pct", "1 % invalid events (ttft_s = -1)"),
         "duplicate": ("worker-duplicate-1pct", "1 % duplicate request_ids"),
         "mixed": ("worker-mixed-topics", "raw and joined records mixed")}


def backlogs(n: int, size: int, every: int = 100) -> dict[str, dict[str, list[tuple[bytes, bytes]]]]:
    """kind -> {topic suffix: messages}, and the rows each should store."""
    def enveloped(events, version=1):
        return [(events[i]["request_id"].encode(), U.encode_event({"schema_version": version, "kind": "batch",
                                                                    "events": events[i:i + size]}))
                for i in range(0, len(events), size)]
    clean = U.synthetic_events(n)
    invalid = [dict(e, ttft_s=-1) if i % every == every // 2 else e for i, e in enumerate(U.synthetic_events(n))]
    dups = U.synthetic_events(n)
    dups = [dict(e, request_id=dups[i - 37]["request_id"]) if i % every == every // 2 and i >= 37 else e
            for i, e in enumerate(dups)]
    mixed = U.synthetic_events(n)
    joined = [dict(e, schema_version=2) for e in mixed[1::2]]
    return {"clean": {"": enveloped(clean)}, "invalid": {"": enveloped(invalid)},
            "duplicate": {"": enveloped(dups)},
            "mixed": {"": enveloped(mixed[0::2]), ".joined": enveloped(joined, version=2)}}


def expected(n: int, every: int = 100) -> dict[str, int]:
    bad = len(range(every // 2, n, every))
    return {"clean": n, "invalid": n - bad, "duplicate": n - bad, "mixed": n}


def measure(bootstrap: str, topic: str, stored: int, timeout_s: float) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-backlog-"))
    w = U.Worker(bootstrap, topic, tmp)
    try:
        w.migrate()
        w.start()
        out = U.watch_stored(w, stored, timeout_s, poll_s=0.02)
        h = out["health"]
        out["dead"] = h.get("rejected")
        out["peak_rss_mib"] = U.memory_mib(w.proc.pid, "VmHWM")
    finally:
        w.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    if not out["complete"]:
        raise RuntimeError(f"{topic}: {stored} rows not stored in {timeout_s}s: {out['health']}")
    return out


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", default="", help="use this broker instead of starting one")
    ap.add_argument("--n", type=int, default=100_000, help="generations per backlog")
    ap.add_argument("--envelope-size", type=int, default=100)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=120.0, help="per drain")
    ap.add_argument("--json", default="", help="also write the result dict here")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()

    want = expected(args.n)
    result: dict = {"params": vars(args).copy(), "rounds": []}
    with U.broker(args.bootstrap or None) as bootstrap:
        tag = uuid.uuid4().hex[:8]
        topics = {kind: f"bench-{kind}-{tag}" for kind in KINDS}
        for kind, parts in backlogs(args.n, args.envelope_size).items():
            for suffix, msgs in parts.items():
                U.prefill(bootstrap, topics[kind] + suffix, msgs)
        for _ in range(args.rounds):
            runs = {kind: measure(bootstrap, topics[kind], want[kind], args.timeout) for kind in KINDS}
            result["rounds"].append({kind: {"gens_per_s": r["gens_per_s"], "dead": r["dead"],
                                            "peak_rss_mib": r["peak_rss_mib"]} for kind, r in runs.items()})
            print({k: round(v["gens_per_s"]) for k, v in result["rounds"][-1].items()}, flush=True)
    print(render(result))
    U.write_json(args.json, result)
    print(f"result: {R.record('worker-backlogs', figures(result))}")
    return result


def figures(result: dict) -> list[dict]:
    out = []
    rounds = result["rounds"]
    for i, r in enumerate(rounds, 1):
        clean = r["clean"]["gens_per_s"]
        for kind, (goal, what) in GOALS.items():
            value = r[kind]["gens_per_s"]
            out.append(R.figure(goal, f"{what}, envelopes of {result['params']['envelope_size']}, worker "
                                      f"generations/s, round {i} of {len(rounds)}", round(value), "1/s",
                                reference={"what": "the clean backlog, same round", "value": round(clean)},
                                target="≥ 0.9× clean in every round", met=value >= 0.9 * clean))
    return out


def render(result: dict) -> str:
    rows = [[i, *(round(r[k]["gens_per_s"]) for k in KINDS),
             *(f"{r[k]['gens_per_s'] / r['clean']['gens_per_s']:.2f}" for k in GOALS),
             *(r[k]["dead"] for k in ("invalid", "duplicate"))]
            for i, r in enumerate(result["rounds"], 1)]
    return U.md_table(["round", *KINDS, *(f"{k}/clean" for k in GOALS), "dead (invalid)", "dead (duplicate)"], rows)


if __name__ == "__main__":
    main()
