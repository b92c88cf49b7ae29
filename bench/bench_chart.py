"""Chart drawing: `render_bands_png` (what `phasemeter chart` and the demo
draw) for grids of 1, 10 and 20 series (models x input buckets, two panels
each), as PNG and SVG.

Medians of --runs per case, in-process after one warm-up draw. With
--compare-python (an interpreter with another phasemeter installed, e.g. a
venv of the previous commit) the same cases run there too, in rounds that
alternate with this tree's, and the table gives this tree's time as a ratio
of that one: the reference shares the machine's load of the same minutes.

    python bench/bench_chart.py --runs 5
    python bench/bench_chart.py --runs 5 --rounds 2 --compare-python /tmp/oldvenv/bin/python
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GRIDS = {"1 model x 1 bucket": (1, 1), "2 models x 5 buckets": (2, 5), "4 models x 5 buckets": (4, 5)}
STEPS = 30


def bands_frame(models: int, buckets: int):
    """A bands answer of `STEPS` one-minute steps per series; every column the
    chart reads, with a gap and a regression so lines break and bands move."""
    import numpy as np
    import pandas as pd

    rng = np.random.default_rng(1)
    t = pd.date_range("2026-01-01 12:00", periods=STEPS, freq="1min")
    parts = []
    for m in range(models):
        for b in range(buckets):
            frame = pd.DataFrame({"t": t, "model": f"model-{m}", "input_bucket": f"bucket-{b}",
                                  "n": rng.integers(50, 400, STEPS)})
            for phase, level in (("prefill", 2000.0 * (b + 1)), ("decode", 60.0 - 5 * b)):
                mid = level * rng.normal(1, 0.05, STEPS) * np.where(np.arange(STEPS) > STEPS // 2, 0.7, 1.0)
                frame[f"{phase}_n"] = frame["n"].astype(float)
                for p, f in (("p1", 0.45), ("p5", 0.7), ("p50", 1.0), ("p95", 1.15), ("p99", 1.3)):
                    frame[f"{phase}_{p}"] = mid * f
                frame.loc[5:6, [c for c in frame.columns if c.startswith(phase + "_")]] = np.nan
            parts.append(frame)
    return pd.concat(parts, ignore_index=True)


def child(runs: int) -> dict:
    """Times of this interpreter's phasemeter: {case: [seconds per draw]}."""
    from phasemeter.render.png import render_bands_png

    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (models, buckets) in GRIDS.items():
            df = bands_frame(models, buckets)
            for ext in ("png", "svg"):
                render_bands_png(df, Path(tmp) / f"warm.{ext}")
                times = []
                for _ in range(runs):
                    t0 = time.perf_counter()
                    render_bands_png(df, Path(tmp) / f"chart.{ext}")
                    times.append(time.perf_counter() - t0)
                out[f"{name}, {ext}"] = times
    return out


def run(python: str, runs: int) -> dict:
    done = subprocess.run([python, __file__, "--child", "--runs", str(runs)], capture_output=True, text=True,
                          check=True, cwd=tempfile.gettempdir())  # cwd: the interpreter's own phasemeter
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--compare-python", help="an interpreter with another phasemeter installed")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.runs)))
        return
    sys.path.insert(0, str(Path(__file__).parent))
    from _util import machine_info, md_table

    mine: dict = {}
    theirs: dict = {}
    for r in range(args.rounds):
        order = [(sys.executable, mine), (args.compare_python, theirs)] if args.compare_python else \
            [(sys.executable, mine)]
        for python, into in (order if r % 2 == 0 else order[::-1]):
            for case, times in run(python, args.runs).items():
                into.setdefault(case, []).extend(times)
    info = machine_info()
    print(f"{info['date']}, {info.get('cpu', '?')}, {info['nproc']} cores; medians of {args.runs} x {args.rounds}\n")
    rows = []
    for case, times in mine.items():
        row = [case, round(statistics.median(times), 3)]
        if theirs:
            ref = statistics.median(theirs[case])
            row += [round(ref, 3), round(statistics.median(times) / ref, 2)]
        rows.append(row)
    head = ["case", "this tree s"] + (["compared s", "ratio"] if theirs else [])
    print(md_table(head, rows))


if __name__ == "__main__":
    main()
