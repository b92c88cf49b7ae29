"""`phasemeter slo` output: table, CSV or JSON of attainment rows
(phasemeter.analytics.slo). Unknown values print "-" / JSON null, never 0."""

from __future__ import annotations

import csv
import io
import json

from phasemeter.alerts.slo_rules import OBJECTIVES, SLO_COUNTS
from phasemeter.textgrid import grid, printable


def columns(slo, timed: bool) -> list[tuple[str, str]]:
    signs = {"max": "≤", "min": "≥"}
    cols = [("t", "from (UTC)")] if timed else []
    cols += [("model", "model"), ("input_bucket", "bucket"), ("n", "n"), ("attainment", "attained"),
             ("target", "target")]
    cols += [(f"{m}_miss_share", f"miss {m}{signs[OBJECTIVES[m][0]]}{v:g}") for m, v in slo.objectives]
    cols += [("failed_share", "failed"), ("burn_rate", "burn"), ("budget_left", "budget left"),
             ("goodput_per_s", "goodput/s"), ("burning", "burns")]
    return cols


def _cell(key: str, v) -> str:
    if v is None:
        return "-"
    if key == "t":
        return v.strftime("%Y-%m-%d %H:%M")
    if key in ("attainment", "target") or key.endswith("_share"):
        return f"{v:.2%}"
    if key in ("burn_rate",):
        return f"{v:.2f}×"
    if key == "budget_left":
        return f"{v:+.0%}"
    if key == "goodput_per_s":
        return f"{v:.2f}"
    return f"{v:,}" if isinstance(v, int) else str(v)


def head(meta: dict) -> list[str]:
    failed = "failed generations count as misses" if meta["count_failed"] else "failed generations left out"
    step = "whole window" if meta["step_s"] is None else f"step {meta['step_s']}s"
    return [f"# SLO {meta['slo']}: {meta['objectives']} ({failed})",
            f"# {meta['start']} .. {meta['end']}, {step}; {meta['path']} path: {meta['reason']}",
            "# attained = share meeting every objective; miss X = share missing X; burn = (1 - attained) / "
            "(1 - target), budget left = 1 - burn; burns = the phase of the most-missed objective"]


def table(rows: list[dict], meta: dict, slo) -> str:
    cols = columns(slo, meta["step_s"] is not None)
    body = [[_cell(k, r.get(k)) for k, _ in cols] for r in rows]
    left = {"t", "model", "input_bucket", "burning"}
    out = [printable(line) for line in head(meta)] + grid([t for _, t in cols], body, right={i for i, (k, _) in enumerate(cols) if k not in left})
    if not rows:
        out.append("(no generations in scope in this window)")
    period = meta.get("period")
    if period:
        days = period["seconds"] / 86400
        left = [f"{b['model']} {_cell('budget_left', b['budget_left'])} (burn {_cell('burn_rate', b['burn_rate'])}, "
                f"n={b['n']:,})" for b in period["models"]]
        out.append(printable(f"# error budget left over the SLO period ({days:g} d to {period['end']}, "
                             f"{period['path']} path): " + ("; ".join(left) if left else "no generations")))
    return "\n".join(out)


def _value(k: str, v):
    return v.isoformat().replace("+00:00", "Z") if k == "t" and v is not None else v


def records(rows: list[dict]) -> list[dict]:
    return [{k: _value(k, v) for k, v in r.items()} for r in rows]


def _csv_field(v):
    """A CSV field: text escaped as in every text output (textgrid.printable)."""
    return "" if v is None else printable(v) if isinstance(v, str) else v


def render(rows: list[dict], fmt: str, meta: dict, slo) -> str:
    if fmt == "json":
        return json.dumps({"meta": meta, "rows": records(rows)}, indent=2)
    if fmt == "csv":
        keys = [k for k, _ in columns(slo, meta["step_s"] is not None)] + [c for c in SLO_COUNTS if c != "n"]
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(keys)
        for r in records(rows):
            w.writerow([_csv_field(r.get(k)) for k in keys])
        return buf.getvalue().rstrip("\n")
    return table(rows, meta, slo)


def render_many(results: list[tuple], fmt: str) -> str:
    """Several SLOs: one table each; JSON/CSV as one document."""
    if fmt == "json":
        return json.dumps({"slos": [{"meta": m, "rows": records(r)} for s, r, m in results]}, indent=2)
    if fmt == "csv":
        parts = []
        for i, (s, r, m) in enumerate(results):
            text = render(r, "csv", m, s).splitlines()
            lines = [f"slo,{text[0]}"] if i == 0 else []
            parts += lines + [f"{m['slo']},{line}" for line in text[1:]]
        return "\n".join(parts)
    return "\n\n".join(render(r, "table", m, s) for s, r, m in results)
