"""SLOs and their burn-rate alert rules: a TOML file beside the alert rules,
validated into frozen objects (docs/slo.md).

An SLO names a scope (models, input buckets), objectives on the measured
metrics (latencies are upper limits, throughputs lower limits), a target
share, and whether failed generations count as misses. What "met" means is
one SQL function (schema/0012_slo_judge_function.sql); this module only
describes SLOs and checks the file, with errors naming key, value and the
allowed values, as rules.py does for the alert rules.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from phasemeter.alerts.rules import RulesError, _duration, _get, _human, _unknown, read_toml

# metric -> (direction, phase, definition column). e2e_s spans both phases.
OBJECTIVES = {
    "ttft_s": ("max", "prefill", "ttft_max"),
    "prefill_tps": ("min", "prefill", "prefill_min"),
    "tpot_s": ("max", "decode", "tpot_max"),
    "decode_tps": ("min", "decode", "decode_min"),
    "e2e_s": ("max", None, "e2e_max"),
}
# The judge's flags, in its order (sumForEach of them is every query's `counts`).
SLO_COUNTS = ("n", "met_n", "failed_n") + tuple(f"{m}_miss_n" for m in OBJECTIVES)
RUNBOOKS = {"prefill": "docs/runbooks/prefill.md", "decode": "docs/runbooks/decode.md",
            "errors": "docs/runbooks/errors.md"}
TOP_KEYS = {"slo", "burn_rate", "period", "runbook_base_url"}
SLO_KEYS = {"name", "models", "buckets", "objectives", "target", "count_failed"}
BURN_KEYS = {"name", "severity", "long", "short", "factor", "min_samples"}
SEVERITIES = ("page", "ticket")
# The multi-window, multi-burn-rate pair of the SRE workbook: a fast burn
# pages, a slow one opens a ticket; the short window lets an alert reset soon
# after the burn stops.
DEFAULT_BURN = ({"name": "fast-burn", "severity": "page", "long": "1h", "short": "5m", "factor": 14.4},
                {"name": "slow-burn", "severity": "ticket", "long": "6h", "short": "30m", "factor": 6.0})


@dataclass(frozen=True)
class Slo:
    name: str
    models: tuple[str, ...]      # () = every model
    buckets: tuple[str, ...]     # () = every bucket
    objectives: tuple[tuple[str, float], ...]  # (metric, limit), in OBJECTIVES order
    target: float
    count_failed: bool = True

    @property
    def budget(self) -> float:
        return 1.0 - self.target

    def limit(self, metric: str) -> float | None:
        return dict(self.objectives).get(metric)

    def params(self) -> dict:
        """The judge's arguments as bound query parameters (NULL = no objective)."""
        out = {col: self.limit(metric) for metric, (_, _, col) in OBJECTIVES.items()}
        return {**out, "slo_models": list(self.models), "slo_buckets": list(self.buckets),
                "count_failed": int(self.count_failed)}

    @property
    def slo_id(self) -> int:
        """A hash of everything that decides the counts (not the name or target),
        so a changed threshold is a new series in slo_minute."""
        key = json.dumps([sorted(self.models), sorted(self.buckets), list(self.objectives), self.count_failed])
        return int.from_bytes(hashlib.sha256(key.encode()).digest()[:8], "big") >> 1  # fits Int64 too

    def describe(self) -> str:
        signs = {"max": "≤", "min": "≥"}
        parts = [f"{m} {signs[OBJECTIVES[m][0]]} {v:g}" for m, v in self.objectives]
        return f"{' and '.join(parts)} for {self.target:.2%}"


@dataclass(frozen=True)
class BurnRule:
    name: str
    severity: str
    long_s: float
    short_s: float
    factor: float
    min_samples: int = 20   # in the short window: fewer is insufficient data, never firing

    def describe(self) -> str:
        return f"{self.factor:g}× over {_human(self.long_s)} and {_human(self.short_s)}"


@dataclass(frozen=True)
class SloSet:
    slos: tuple[Slo, ...]
    burn: tuple[BurnRule, ...]
    period_s: float = 30 * 86_400.0
    runbook_base_url: str = ""

    def get(self, name: str) -> Slo:
        for slo in self.slos:
            if slo.name == name:
                return slo
        raise RulesError(f"--slo {name!r}: no such SLO; the SLOs are {', '.join(s.name for s in self.slos)}")

    def runbook_url(self, phase: str) -> str:
        return self.runbook_base_url + RUNBOOKS[phase]


def _labels(value, where: str, kind: str, known: list[str] | None) -> tuple[str, ...]:
    if value == "all":
        return ()
    if not isinstance(value, list) or not value or not all(isinstance(v, str) and v for v in value):
        raise RulesError(f"{where}: expected \"all\" or a non-empty list of {kind} names, got {value!r}")
    for v in value:
        if known is not None and v not in known:
            raise RulesError(f"{where}: {v!r} is not an input bucket (the buckets are {', '.join(known)})")
    return tuple(value)


def parse_objectives(table, where: str) -> tuple[tuple[str, float], ...]:
    if not isinstance(table, dict) or not table:
        raise RulesError(f"{where}: expected a table like {{ ttft_s = 2.0, decode_tps = 20 }}")
    out = {}
    for metric, limit in table.items():
        if metric not in OBJECTIVES:
            raise RulesError(f"{where}.{metric}: unknown metric (allowed: {', '.join(OBJECTIVES)})")
        if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not 0 < limit < float("inf"):
            kind = "seconds" if OBJECTIVES[metric][0] == "max" else "tokens/s"
            raise RulesError(f"{where}.{metric}: {limit!r} is not a positive number of {kind}")
        out[metric] = float(limit)
    return tuple((m, out[m]) for m in OBJECTIVES if m in out)


def parse_slo(table, where: str, bucket_labels: list[str] | None) -> Slo:
    if not isinstance(table, dict):
        raise RulesError(f"{where}: expected a [[slo]] table")
    _unknown(table, SLO_KEYS, where)
    name = _get(table, "name", where, str, required=True)
    target = _get(table, "target", where, float, required=True)
    if not 0 < target < 1:
        raise RulesError(f"{where}.target: {target} is not a share in (0, 1), e.g. 0.95")
    return Slo(name, _labels(table.get("models", "all"), f"{where}.models", "model", None),
               _labels(table.get("buckets", "all"), f"{where}.buckets", "bucket", bucket_labels),
               parse_objectives(table.get("objectives"), f"{where}.objectives"), target,
               _get(table, "count_failed", where, bool, True))


def parse_burn(table, where: str) -> BurnRule:
    if not isinstance(table, dict):
        raise RulesError(f"{where}: expected a [[burn_rate]] table")
    _unknown(table, BURN_KEYS, where)
    severity = _get(table, "severity", where, str, "page")
    if severity not in SEVERITIES:
        raise RulesError(f"{where}.severity: {severity!r} is not one of {', '.join(SEVERITIES)}")
    long_s = _duration(_get(table, "long", where, str, required=True), f"{where}.long")
    short_s = _duration(_get(table, "short", where, str, required=True), f"{where}.short")
    if not short_s < long_s:
        raise RulesError(f"{where}.short: must be shorter than long ({_human(short_s)} >= {_human(long_s)})")
    if long_s > 30 * 86_400:
        raise RulesError(f"{where}.long: at most 30d")
    factor = _get(table, "factor", where, float, required=True)
    if not factor > 0:
        raise RulesError(f"{where}.factor: {factor} is not a burn rate > 0 (1 = exactly the budget)")
    min_samples = _get(table, "min_samples", where, int, 20)
    if min_samples < 1:
        raise RulesError(f"{where}.min_samples: {min_samples} is not >= 1")
    return BurnRule(_get(table, "name", where, str, required=True), severity, long_s, short_s, factor, min_samples)


def parse_slos(doc: dict, source: str = "slos", bucket_labels: list[str] | None = None) -> SloSet:
    _unknown(doc, TOP_KEYS, source)
    tables = doc.get("slo")
    if not isinstance(tables, list) or not tables:
        raise RulesError(f"{source}.slo: at least one [[slo]] table is required")
    slos = tuple(parse_slo(t, f"slo[{i}]", bucket_labels) for i, t in enumerate(tables))
    burn_tables = doc.get("burn_rate", list(DEFAULT_BURN))
    if not isinstance(burn_tables, list):
        raise RulesError(f"{source}.burn_rate: expected [[burn_rate]] tables")
    burn = tuple(parse_burn(t, f"burn_rate[{i}]") for i, t in enumerate(burn_tables))
    for kind, names in (("slo", [s.name for s in slos]), ("burn_rate", [b.name for b in burn])):
        dupes = sorted({n for n in names if names.count(n) > 1})
        if dupes:
            raise RulesError(f"{kind}[].name: {dupes[0]!r} is used twice")
    period = _duration(_get(doc, "period", source, str, "30d"), f"{source}.period")
    return SloSet(slos, burn, period, _get(doc, "runbook_base_url", source, str, ""))


EXAMPLE = "example"  # --slos example: the shipped example_slos.toml
NONE = SloSet((), ())


def load_slos(path: str | Path | None, bucket_labels: list[str] | None = None) -> SloSet:
    """The operator's SLO file (--slos / PHASEMETER_SLOS), `example` for the
    shipped one; no path: no SLOs (none is declared by default)."""
    if not path:
        return NONE
    doc, source = read_toml("--slos", None if str(path) == EXAMPLE else path, "example_slos.toml", EXAMPLE)
    return parse_slos(doc, source, bucket_labels)
