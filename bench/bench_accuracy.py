"""Accuracy of slow-tail percentiles: exact vs rollup vs Prometheus histograms.

One synthetic data set (phasemeter.demo.synthetic through the real derivation,
stream_jobs.derive.process, and the real Sink into chDB, so the rollup is
maintained by the materialized view as in production) is summarised three ways:

(a) exact: phasemeter's exact path (quantilesExactInclusive == numpy linear);
(b) rollup: phasemeter's per-minute rollup path (schema/0003);
(c) Prometheus: a vLLM-style histogram per model x input bucket x window with
    vLLM v1's `vllm:time_to_first_token_seconds` buckets (vllm/v1/metrics/
    loggers.py: 0.001 ... 2560.0) and `histogram_quantile` (linear
    interpolation inside the bucket, as Prometheus does). Prometheus has no
    per-request prefill rate, so the best it can do for the prefill slow tail
    is  p1(prefill_tps) ~= mean prompt tokens / p99(TTFT)  from the
    prompt-token counter (`vllm:prompt_tokens_total` / request count) and
    the TTFT histogram -- and we even grant it an input-bucket label that
    vLLM does not have.

Each is compared with numpy on the raw rows: p99 TTFT and p1 prefill_tps per
model x input bucket x window (5-minute windows, like rate(...[5m]), and
1-hour windows). Also: a sketch comparison (quantilesDD at two accuracies,
quantilesTDigest, quantilesBFloat16) merged from per-minute states, which is
how the rollup's sketch was chosen.

    python bench/bench_accuracy.py            # 300k generations over 6 h
    python bench/bench_accuracy.py --rows 1000000 --hours 24
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import clickhouse_connect
import numpy as np
import pandas as pd

from phasemeter.analytics import run_query
from phasemeter.demo.rows import synthetic_rows
from phasemeter.store.migrate import migrate
from phasemeter.query.runner import DirectRunner
from phasemeter.stream_jobs.sink import Sink

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results as R  # noqa: E402

# vLLM v1 vllm:time_to_first_token_seconds buckets (vllm/v1/metrics/loggers.py).
VLLM_TTFT_BUCKETS = [0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                     10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0]


def histogram_quantile(q: float, values: np.ndarray, bounds=VLLM_TTFT_BUCKETS) -> float:
    """Prometheus histogram_quantile over cumulative le-buckets built from `values`."""
    if len(values) == 0:
        return float("nan")
    counts = np.searchsorted(np.sort(values), bounds, side="right").astype(float)  # cumulative, le
    total = float(len(values))
    rank = q * total
    i = int(np.searchsorted(counts, rank, side="left"))
    if i >= len(bounds):  # falls in +Inf: Prometheus returns the highest finite bound
        return bounds[-1]
    lo_bound = 0.0 if i == 0 else bounds[i - 1]
    lo_count = 0.0 if i == 0 else counts[i - 1]
    in_bucket = counts[i] - lo_count
    if in_bucket == 0:
        return bounds[i]
    return lo_bound + (bounds[i] - lo_bound) * (rank - lo_count) / in_bucket


def make_sink(client):
    return Sink.over(client, "chdb://bench")


def rel_err_table(errs: dict[str, np.ndarray]) -> list[str]:
    lines = ["| method | cells | median abs rel err | p95 | max |", "|---|---:|---:|---:|---:|"]
    for name, e in errs.items():
        e = np.abs(e[~np.isnan(e)])
        lines.append(f"| {name} | {len(e):,} | {np.median(e) * 100:.3f} % | {np.quantile(e, 0.95) * 100:.3f} % "
                     f"| {e.max() * 100:.3f} % |")
    return lines


def sketch_comparison(client, step_s: int) -> list[str]:
    """Sketches merged from per-minute states vs exact, per model x bucket x step."""
    levels = "0.01, 0.05, 0.5, 0.95, 0.99"
    exact = client.query_df(
        f"SELECT model, input_bucket, toStartOfInterval(ts, toIntervalSecond({{s:UInt32}})) AS t, "
        f"quantilesExactInclusive({levels})(prefill_tps) AS q FROM generations "
        "GROUP BY model, input_bucket, t ORDER BY model, input_bucket, t", parameters={"s": step_s})
    ex = np.array(exact["q"].tolist())
    lines = [f"| sketch (step {step_s}s) | p1 median / max | p5 median / max | p50 median / max | "
             "p95 median / max | p99 median / max |", "|---|---|---|---|---|---|"]
    for name, fn in (("quantilesDD(0.01)", f"quantilesDD(0.01, {levels})"),
                     ("quantilesDD(0.001)", f"quantilesDD(0.001, {levels})"),
                     ("quantilesTDigest", f"quantilesTDigest({levels})"),
                     ("quantilesBFloat16", f"quantilesBFloat16({levels})")):
        base, params = fn.split("(", 1)
        got = client.query_df(
            f"SELECT model, input_bucket, toStartOfInterval(m, toIntervalSecond({{s:UInt32}})) AS t, "
            f"{base}Merge({params}(st) AS q FROM (SELECT model, input_bucket, toStartOfMinute(ts) AS m, "
            f"{base}StateIf({params}(assumeNotNull(prefill_tps), isNotNull(prefill_tps)) AS st FROM generations "
            "GROUP BY model, input_bucket, m) GROUP BY model, input_bucket, t ORDER BY model, input_bucket, t",
            parameters={"s": step_s})
        e = np.abs(np.array(got["q"].tolist()) / ex - 1) * 100
        lines.append(f"| {name} | " + " | ".join(f"{np.nanmedian(e[:, i]):.3f} / {np.nanmax(e[:, i]):.2f} %"
                                                  for i in range(5)) + " |")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=300_000)
    ap.add_argument("--hours", type=float, default=6.0)
    ap.add_argument("--seed", type=int, default=42)
    args = ap.parse_args()
    span_s = args.hours * 3600
    t0 = (time.time() // 3600 - args.hours - 2) * 3600
    start = datetime.fromtimestamp(t0, timezone.utc)
    end = start + timedelta(seconds=span_s + 60)
    tmp = Path(tempfile.mkdtemp(prefix="pm-bench-acc-"))
    client = clickhouse_connect.get_client(dsn=f"chdb://{tmp / 'store'}")
    try:
        client.command("CREATE DATABASE IF NOT EXISTS bench")
        client.database = "bench"
        migrate(client)
        t = time.perf_counter()
        rows = synthetic_rows(args.rows, t0, span_s, seed=args.seed)
        sink = make_sink(client)
        for i in range(0, len(rows), 20_000):
            sink.write(rows[i:i + 20_000], [])
        print(f"# {len(rows):,} generations over {args.hours:g} h, 2 models x 5 input buckets "
              f"(filled in {time.perf_counter() - t:.0f} s)\n")
        raw = client.query_df("SELECT ts, model, input_bucket, input_tokens, ttft_s, prefill_tps FROM generations")
        if getattr(raw["ts"].dt, "tz", None) is not None:
            raw["ts"] = raw["ts"].dt.tz_convert("UTC").dt.tz_localize(None)
        runner = DirectRunner(client)
        for step_s in (300, 3600):
            epoch = (raw["ts"] - pd.Timestamp(0)).dt.total_seconds() // step_s * step_s
            raw["t"] = pd.to_datetime(epoch, unit="s")
            ref = {}
            for key, g in raw.groupby(["t", "model", "input_bucket"]):
                ttft = g["ttft_s"].dropna().to_numpy(float)
                pre = g["prefill_tps"].dropna().to_numpy(float)
                if len(ttft) == 0:
                    continue
                p99 = histogram_quantile(0.99, ttft)
                mean_prompt = g.loc[g["ttft_s"].notna(), "input_tokens"].mean()
                ref[key] = {"np_ttft_p99": np.percentile(ttft, 99), "np_pre_p1": np.percentile(pre, 1),
                            "prom_ttft_p99": p99, "prom_pre_p1": mean_prompt / p99, "n": len(ttft)}
            ref = pd.DataFrame.from_dict(ref, orient="index")
            ref.index.names = ["t", "model", "input_bucket"]
            out = {}
            for path in ("exact", "rollup"):
                b, _ = run_query(runner, start, end, step_s, force=path)
                lat, _ = run_query(runner, start, end, step_s, force=path, kind="latency")
                out[path] = (b.set_index(["t", "model", "input_bucket"]),
                             lat.set_index(["t", "model", "input_bucket"]))
            j = ref.join(out["exact"][0][["prefill_p1"]].rename(columns={"prefill_p1": "ex_pre_p1"}))
            j = j.join(out["exact"][1][["ttft_p99"]].rename(columns={"ttft_p99": "ex_ttft_p99"}))
            j = j.join(out["rollup"][0][["prefill_p1"]].rename(columns={"prefill_p1": "ro_pre_p1"}))
            j = j.join(out["rollup"][1][["ttft_p99"]].rename(columns={"ttft_p99": "ro_ttft_p99"}))
            print(f"## windows of {step_s // 60} min: median {int(j['n'].median())} generations per "
                  "model x bucket x window\n")
            print("p99 TTFT (latency slow tail) vs numpy:\n")
            print("\n".join(rel_err_table({
                "phasemeter exact": (j["ex_ttft_p99"] / j["np_ttft_p99"] - 1).to_numpy(),
                "phasemeter rollup": (j["ro_ttft_p99"] / j["np_ttft_p99"] - 1).to_numpy(),
                "Prometheus histogram_quantile (vLLM buckets)": (j["prom_ttft_p99"] / j["np_ttft_p99"] - 1).to_numpy(),
            })))
            print("\np1 prefill_tps (throughput slow tail) vs numpy:\n")
            print("\n".join(rel_err_table({
                "phasemeter exact": (j["ex_pre_p1"] / j["np_pre_p1"] - 1).to_numpy(),
                "phasemeter rollup": (j["ro_pre_p1"] / j["np_pre_p1"] - 1).to_numpy(),
                "Prometheus: mean prompt tokens / p99 TTFT": (j["prom_pre_p1"] / j["np_pre_p1"] - 1).to_numpy(),
            })))
            print()
        print("## rollup vs exact, every band percentile (prefill and decode pooled)\n")
        print("| step | rollup tiers read | median n per cell | p1 median / max | p5 median / max | "
              "p50 median / max | p95 median / max | p99 median / max |")
        print("|---:|---|---:|---|---|---|---|---|")
        # 3600 and 10800 are answered by the hour and 3-hour tiers, and again by
        # the minute tier alone (--no-tiers): the TDigest's merge order is the
        # only difference, so the pair shows what the tiers cost in accuracy.
        worst: dict = {}  # (step, tiered, percentile) -> the largest relative error, %
        for step_s, tiered in ((60, True), (300, True), (3600, True), (3600, False), (10800, True), (10800, False)):
            ex, _ = run_query(runner, start, end, step_s, force="exact")
            ro, meta = run_query(runner, start, end, step_s, force="rollup", tiers=tiered)
            cells = []
            for p in ("p1", "p5", "p50", "p95", "p99"):
                e = np.abs(np.concatenate([(ro[f"{ph}_{p}"] / ex[f"{ph}_{p}"] - 1).to_numpy(float)
                                           for ph in ("prefill", "decode")])) * 100
                cells.append(f"{np.nanmedian(e):.3f} / {np.nanmax(e):.2f} %")
                worst[step_s, tiered, p] = round(float(np.nanmax(e)), 2)
            tiers = " + ".join(meta["tiers"][::-1] + ["minute"])
            print(f"| {step_s}s | {tiers} | {int(ex['prefill_n'].median())} | " + " | ".join(cells) + " |")
        print()
        for step_s in (60, 3600):
            print("\n".join(sketch_comparison(client, step_s)) + "\n")
        print("result:", R.record("accuracy", figures(worst)))
    finally:
        client.close()
        shutil.rmtree(tmp, ignore_errors=True)
    return 0


def figures(worst: dict) -> list[dict]:
    """The tiers' goal: each worst error the same as from the minute tier alone."""
    return [R.figure("rollup-accuracy", f"worst {p} relative error at {step} s steps, tiers read",
                     worst[step, True, p], "%", reference={"what": "the same from the minute tier alone (--no-tiers)",
                                                           "value": worst[step, False, p]},
                     target="each maximum the same with and without the tiers",
                     met=worst[step, True, p] == worst[step, False, p])
            for step in (3600, 10800) for p in ("p1", "p99")]


if __name__ == "__main__":
    raise SystemExit(main())
