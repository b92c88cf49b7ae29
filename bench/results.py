"""Benchmark results as data: one JSON file per benchmark run.

Every benchmark that measures a goal calls `record`, which writes
`bench/results/<date>-<name>.json` holding each figure beside the reference
it was measured against in the same run, their ratio, the target, the
machine, the library versions and the exact command. BENCHMARKS.md is
generated from these files (as ClickBench and Vector's regression suite keep
their results), so a document can never disagree with what was measured.

A figure is a dict:
    {"goal": "worker-envelopes",          # stable key of the goal it speaks to
     "what": "envelopes of 100, generations/s",
     "value": 140000.0, "unit": "1/s",
     "reference": {"what": "bare Faust msgs/s", "value": 12000.0},
     "ratio": 11.7,                         # value / reference (None without one)
     "target": ">= 10x",                    # in words, as the goals table states it
     "met": True}
"""

from __future__ import annotations

import json
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
FIELDS = ("goal", "what", "value", "unit", "reference", "ratio", "target", "met")


def figure(goal: str, what: str, value: float, unit: str, *, reference: dict | None = None,
           target: str = "", met: bool | None = None) -> dict:
    """One figure, its ratio computed from its reference (never typed in)."""
    ref = reference.get("value") if reference else None
    ratio = round(value / ref, 4) if ref else None
    return {"goal": goal, "what": what, "value": value, "unit": unit, "reference": reference,
            "ratio": ratio, "target": target, "met": met}


def record(name: str, figures: list[dict], *, command: str | None = None, notes: str = "",
           out_dir: Path = RESULTS) -> Path:
    """Write one run's figures; returns the file. `command` defaults to this process's argv."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import _util as U  # the machine's description, shared with the older reports

    for f in figures:
        missing = [k for k in FIELDS if k not in f]
        if missing:
            raise ValueError(f"figure {f.get('what')!r} lacks {missing}")
    now = datetime.now(timezone.utc)
    cmd = command or "python " + " ".join(shlex.quote(a) for a in [_rel(sys.argv[0]), *sys.argv[1:]])
    doc = {"name": name, "date": now.strftime("%Y-%m-%dT%H:%M:%SZ"), "command": cmd,
           "machine": U.machine_info(), "figures": figures, "notes": notes}
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{now:%Y-%m-%d}-{name}.json"
    if path.exists():  # a second run of the day is recorded beside the first, not over it
        path = out_dir / f"{now:%Y-%m-%d}-{name}-{now:%H%M%S}.json"
    path.write_text(json.dumps(doc, indent=1, sort_keys=False, default=str) + "\n")
    return path


def _rel(path: str) -> str:
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path(__file__).resolve().parent.parent))
    except ValueError:
        return path
