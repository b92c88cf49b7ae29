"""`phasemeter inflight`: generations started and not yet ended, now.

Asks a running worker (GET /inflight). Each worker holds the join state of
its own partitions, so with several workers pass each one with --via; the
counts add up and the oldest age is the max. The same numbers are on
/metrics for Prometheus (phasemeter_inflight_*).
"""

from __future__ import annotations

import json


def register(sub, common, window_flags) -> None:  # noqa: ARG001 (the extension signature)
    p = sub.add_parser("inflight", help="generations in flight per model × bucket × phase (from the worker)")
    common(p)
    p.add_argument("--via", action="append", default=[],
                   help="worker URL (repeatable; default: the worker of --data-dir, else the web port)")
    p.add_argument("--format", default="table", choices=["table", "json"])
    p.set_defaults(func=show)


def fetch(url: str) -> dict:
    # Deferred: urllib.request pulls http.client, email and ssl (~40 ms), and
    # this module is imported to build the parser of every `phasemeter` command.
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/inflight", timeout=5) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise RuntimeError(f"no worker answering at {url} (--via): {exc}") from None


def merge(views: list[dict]) -> dict:
    cells: dict[tuple, dict] = {}
    for view in views:
        for c in view["in_flight"]:
            key = (c["model"], c["input_bucket"], c["phase"])
            cur = cells.setdefault(key, {**c, "in_flight": 0, "oldest_age_s": 0.0})
            cur["in_flight"] += c["in_flight"]
            cur["oldest_age_s"] = max(cur["oldest_age_s"], c["oldest_age_s"])
    return {"in_flight": [cells[k] for k in sorted(cells)],
            "awaiting_start": sum(v["awaiting_start"] for v in views),
            "abandon_after_s": max((v["abandon_after_s"] for v in views), default=None),
            "workers": len(views)}


def show(args, settings) -> int:
    from phasemeter.query.remote import worker_url
    from phasemeter.textgrid import printable

    urls = args.via or [worker_url(settings.data_path) or f"http://{settings.web_host}:{settings.web_port}"]
    view = merge([fetch(u) for u in urls])
    if args.format == "json":
        print(json.dumps(view, indent=1))
        return 0
    print(f"# in flight now (started, not ended); prefill = no first token yet. Abandoned after "
          f"{view['abandon_after_s']:g}s. Workers asked: {view['workers']}")
    rows = [("model", "bucket", "phase", "in flight", "oldest age s")]
    # Labels as senders sent them: escaped (textgrid.printable) before they are measured.
    rows += [(printable(c["model"]), printable(c["input_bucket"]), c["phase"], str(c["in_flight"]),
              f"{c['oldest_age_s']:.1f}")
             for c in view["in_flight"]]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for i, r in enumerate(rows):
        print("  ".join(v.ljust(w) if j < 3 else v.rjust(w) for j, (v, w) in enumerate(zip(r, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    if not view["in_flight"]:
        print("(nothing in flight)")
    print(f"# phases waiting for their start: {view['awaiting_start']}")
    return 0
