"""Run every benchmark, each stage next to its reference, then regenerate BENCHMARKS.md.

    python bench/run_all.py            # small sizes, a few minutes (what `make bench` runs)
    python bench/run_all.py --big      # the target sizes
    python bench/run_all.py --only worker,sink --out /tmp/B.md

Each stage runs as its own subprocess (own broker in a tmp dir and free
ports, own chDB path), bounded by --stage-timeout. A stage that measures a
goal writes its figures to bench/results/<date>-<name>.json (bench/results.py);
BENCHMARKS.md is then generated from those files (bench/report.py). The
stages' full markdown output and exact commands go into a run log (--out),
between marks that are each stage's own (`merge`), so an --only run keeps
the other stages' parts of an earlier log. Scripts that do not exist yet are
skipped with a note.
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _util as U  # noqa: E402
import report  # noqa: E402

PY = sys.executable


def stages(big: bool, bootstrap: str) -> list[dict]:
    b = ["--bootstrap", bootstrap] if bootstrap else []
    n_emit = "100000" if big else "20000"
    return [
        {"key": "emitter", "title": "1. Emitter hot path (caller cost per generation)", "script": "bench_emitter.py",
         "json": False, "needs_broker": True,
         "runs": [["--n", n_emit], ["--broker-down", "--n", n_emit]],
         "note": "Target: Meter.record p99 ≤ 20 µs and ≤ 0.2× a direct KafkaProducer.send (json + send)."},
        {"key": "worker", "title": "2. Worker throughput vs bare Faust and raw aiokafka", "script": "bench_worker.py",
         "json": True, "runs": [b + (["--n", "500000", "--envelope-n", "2000000"] if big else [])],
         "note": "Targets: worker ≥ 0.9× bare Faust (`async for`) msgs/s; with envelopes of 100, "
                 "worker generations/s ≥ 5× bare Faust msgs/s."},
        {"key": "join", "title": "2b. Phase join vs one event per generation (same worker)", "script": "bench_join.py",
         "json": True, "runs": [b + (["--n", "50000", "--rounds", "3"] if big else []) + ["--py-spy"]],
         "note": "The same generations as one event each and as phase events (start, first_token, end), "
                 "runs alternated; read the ratio join ÷ single."},
        {"key": "sink", "title": "3. Sink into chDB", "script": "bench_sink.py", "json": True,
         "runs": [["--n", "1000000"] if big else []],
         "note": "Goal: Sink.write ≥ 0.6× the same store's SQL-side insert rate, measured in the same run."},
        {"key": "freshness", "title": "4. Freshness: emit → queryable", "script": "bench_freshness.py", "json": True,
         "runs": [b + ["--rates", "2000,5000", "--seconds", "20" if big else "10"]],
         "note": "Target: p99 ≤ 2 s at 5k generations/s."},
        {"key": "profile", "title": "5. Profile of the worker's per-batch CPU path", "script": "profile_worker.py",
         "json": True, "runs": [["--n", "200000" if big else "50000"]], "note": ""},
        {"key": "queries", "title": "6a. Queries (bands: rollup vs exact)", "script": "bench_queries.py",
         "json": False, "runs": [[] if big else ["--rows", "1000000"]], "note": ""},
        {"key": "accuracy", "title": "6b. Rollup accuracy vs exact", "script": "bench_accuracy.py",
         "json": False, "runs": [[]], "note": ""},
    ]


def run_stage(stage: dict, timeout_s: float, shared_bootstrap: str | None) -> dict:
    script = U.BENCH_DIR / stage["script"]
    out = {"key": stage["key"], "title": stage["title"], "note": stage["note"], "runs": []}
    if not script.exists():
        out["skipped"] = f"`bench/{stage['script']}` does not exist yet: skipped."
        return out
    for args in stage["runs"]:
        if stage.get("needs_broker"):
            args = ["--bootstrap", shared_bootstrap] + args if "--broker-down" not in args else args
        cmd = [PY, f"bench/{stage['script']}", *args]
        shown = "python " + " ".join(shlex.quote(c) for c in cmd[1:])
        if "--bootstrap" in args and stage.get("needs_broker"):
            shown = shown.replace(shared_bootstrap, "<local broker>")
        jpath = None
        if stage["json"]:
            jpath = Path(tempfile.mkstemp(prefix=f"pm-bench-{stage['key']}-", suffix=".json")[1])
            cmd += ["--json", str(jpath)]
        print(f"[run_all {time.strftime('%H:%M:%S')}] {shown}", flush=True)
        t = time.perf_counter()
        proc = U.run_script(cmd, timeout_s)
        took = time.perf_counter() - t
        result = None
        if jpath:
            try:
                result = json.loads(jpath.read_text() or "null")
            except (OSError, ValueError):
                result = None
            jpath.unlink(missing_ok=True)
        out["runs"].append({"command": shown, "seconds": round(took, 1), "rc": proc.returncode,
                            "stdout": proc.stdout.strip(), "stderr_tail": proc.stderr.strip()[-1500:],
                            "result": result})
        print(f"[run_all] done in {took:.0f}s (rc {proc.returncode})", flush=True)
    return out


def parts(info: dict, sections: list[dict], total_s: float, argv: list[str]) -> list[tuple[str, str, str]]:
    """The report's generated parts: (key, the heading they go under, markdown)."""
    cmd = "python bench/run_all.py" + (" " + " ".join(shlex.quote(a) for a in argv) if argv else "")
    out = [("header", "", f"Sections below marked as written by `run_all.py` were last written by `{cmd}` "
            f"({total_s / 60:.1f} min; `make bench` runs it without flags). Every figure is measured next to "
            "its reference **in the same run on the same machine**; this machine is shared and noisy, so read "
            "the ratios, not the absolute numbers. Everything outside those marks is hand-written and kept "
            "by every run."),
           ("machine", "## Machine", U.md_table(["key", "value"], [[k, str(v)] for k, v in info.items()]))]
    for s in sections:
        lines = []
        if s.get("note"):
            lines += [s["note"], ""]
        if s.get("skipped"):
            lines += [s["skipped"], ""]
        else:
            for r in s["runs"]:
                lines += ["```", r["command"], "```", ""]
                if r["rc"] != 0:
                    lines += [f"**exit code {r['rc']}** after {r['seconds']} s; stderr tail:", "", "```",
                              r["stderr_tail"], "```", ""]
                lines += [r["stdout"] or "(no output)", "", f"_({r['seconds']} s)_", ""]
        out.append((s["key"], f"## {s['title']}", "\n".join(lines).rstrip("\n")))
    return out


def run_marks(key: str) -> tuple[str, str]:
    return f"<!-- {key}-run: written by run_all.py -->", f"<!-- /{key}-run -->"


def merge(old: str, generated: list[tuple[str, str, str]]) -> str:
    """Write each generated part into the previous report in place: between
    its marks when they are there, else right under its heading, else as a
    new section at the end. Whatever lies outside the marks (hand-written
    findings, sections no stage writes, other stages' parts in an --only
    run) is kept as it was: a re-run never erases the record."""
    text = old if old.strip() else "# Benchmarks\n"
    for key, heading, body in generated:
        begin, end = run_marks(key)
        block = f"{begin}\n{body}\n{end}"
        a = text.find(begin)
        b = text.find(end, a) if a >= 0 else -1
        if b >= 0:
            text = text[:a] + block + text[b + len(end):]
            continue
        lines = text.split("\n")
        anchor = heading or "# Benchmarks"
        if anchor in lines:
            at = lines.index(anchor) + 1
            text = "\n".join(lines[:at] + ["", block] + lines[at:])
        else:
            text = text.rstrip("\n") + f"\n\n{heading}\n\n{block}\n"
    return text if text.endswith("\n") else text + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--big", action="store_true", help="the target sizes (much longer)")
    ap.add_argument("--only", default="", help="comma-separated stage keys: emitter,worker,join,sink,freshness,"
                                              "profile,queries,accuracy")
    ap.add_argument("--out", default=str(Path(tempfile.gettempdir()) / "phasemeter-run_all.md"),
                    help="the run log: every stage's full output and command")
    ap.add_argument("--stage-timeout", type=float, default=900.0, help="seconds per script run")
    args = ap.parse_args(argv)
    U.exit_cleanly_on_sigterm()
    raw_argv = list(sys.argv[1:] if argv is None else argv)
    only = {k for k in args.only.split(",") if k}
    began = time.perf_counter()
    info = U.machine_info()
    todo = [s for s in stages(args.big, "") if not only or s["key"] in only]
    sections = []
    # The emitter script needs a broker and does not start one: one broker for it, then stopped.
    need_shared = any(s.get("needs_broker") for s in todo)
    with (U.broker(None) if need_shared else _nothing()) as shared:
        for s in todo:
            if s.get("needs_broker"):
                sections.append(run_stage(s, args.stage_timeout, shared))
    for s in todo:
        if not s.get("needs_broker"):
            sections.append(run_stage(s, args.stage_timeout, None))
    order = {s["key"]: i for i, s in enumerate(todo)}
    sections.sort(key=lambda s: order[s["key"]])
    total = time.perf_counter() - began
    out = Path(args.out)
    previous = out.read_text() if out.exists() else ""
    out.write_text(merge(previous, parts(info, sections, total, raw_argv)))
    print(f"[run_all] wrote the run log {args.out} in {total:.0f}s")
    report.main([])  # BENCHMARKS.md from bench/results/, which the stages just added to
    failed = [r["command"] for s in sections for r in s.get("runs", []) if r["rc"] != 0]
    for c in failed:
        print(f"[run_all] FAILED: {c}", file=sys.stderr)
    return 1 if failed else 0


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
