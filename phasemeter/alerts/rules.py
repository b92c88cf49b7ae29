"""Alert rules: a small declarative TOML file, validated into frozen Rules.

Why a custom validator instead of a schema library: every error must name the
exact key the operator got wrong (`rule[1].baseline.kind`), and the file is
small enough that plain checks stay readable. Durations reuse the CLI's
parser so "15m" means the same thing everywhere.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from phasemeter.files import read_text
from phasemeter.timeparse import ArgError, parse_duration

PHASE_METRICS = {"prefill": ("prefill_tps", "kv_transfer_s"), "decode": ("decode_tps", "max_gap_s", "stalled_share")}
ALERT_NAMES = {"prefill": "PhasemeterPrefillSlowTail", "decode": "PhasemeterDecodeSlowTail"}
# The stall family (docs/alerts.md): a decode stall shows as a RISE, of the
# largest gap between chunks (a high percentile of max_gap_s) or of the share
# of stalled streams; below `floor` a rise is not worth a page (0 -> 0.3 %
# doubles, and means nothing). Default floors per metric:
RISES = {"max_gap_s": 0.5, "stalled_share": 0.02, "kv_transfer_s": 0.05}
STALL_ALERT = "PhasemeterDecodeStalls"
# The transfer family (prefill/decode disaggregated serving, alerts/transfer.py):
# the KV cache's move between the pools rose, with TTFT, while prefill
# compute held. Its TTFT, like the gateway's, belongs to the prefill phase.
TRANSFER = ("kv_transfer_s",)
TRANSFER_ALERT = "PhasemeterKvTransferSlow"
TRANSFER_RUNBOOK = "docs/runbooks/prefill.md#d-kv-transfer-disaggregated-serving"
# KV-cache pressure and preemption: what stalls a running stream.
STALL_RUNBOOK = "docs/runbooks/decode.md#a-kv-cache-pressure--batch-too-large"
DAY_S = 86_400.0
TOP_KEYS = {"rule", "runbook_base_url"}
RULE_KEYS = {"name", "phase", "metric", "percentile", "buckets", "window", "baseline", "threshold",
             "min_samples", "severity", "runbook", "floor"}
BASELINE_KEYS = {"previous": {"kind", "duration"}, "same_hour": {"kind", "days", "duration"}}


class RulesError(ValueError):
    """A bad rules file; the message names the key."""


@dataclass(frozen=True)
class Baseline:
    kind: str          # "previous": [start - duration, start); "same_hour": same time of day, N days back
    duration_s: float
    days: int = 0

    def spans(self, start: float, end: float) -> list[tuple[float, float]]:
        """Baseline [lo, hi) spans (epoch s) for a window [start, end)."""
        if self.kind == "previous":
            return [(start - self.duration_s, start)]
        # The `duration` ending at the same time of day as the window end, on each earlier day.
        return [(end - k * DAY_S - self.duration_s, end - k * DAY_S) for k in range(1, self.days + 1)]

    @property
    def nominal_s(self) -> float:
        """The span the rule asks for: one window, or one per day compared."""
        return self.duration_s if self.kind == "previous" else self.duration_s * self.days

    def describe(self) -> str:
        if self.kind == "previous":
            return f"previous {_human(self.duration_s)}"
        return f"same {_human(self.duration_s)} of day, last {self.days} days"


@dataclass(frozen=True)
class Rule:
    name: str
    phase: str
    metric: str
    percentile: float       # 5 -> p5
    buckets: tuple[str, ...]  # () = every bucket
    window_s: float
    baseline: Baseline
    threshold: float        # relative drop that fires: 0.30 -> current < 70% of baseline
    min_current: int
    min_baseline: int
    severity: str
    runbook: str
    floor: float | None = None  # rising metrics only: the least current value that may fire
    # The TOML table as written, so overrides re-validate the same way (not part of equality).
    raw: tuple = field(default=(), compare=False, repr=False)

    @property
    def rises(self) -> bool:
        """A stall metric: it regresses upwards (a throughput regresses downwards)."""
        return self.metric in RISES

    @property
    def transfer(self) -> bool:
        """The transfer family: a rise that also reads TTFT and prefill compute."""
        return self.metric in TRANSFER

    @property
    def alertname(self) -> str:
        return TRANSFER_ALERT if self.transfer else STALL_ALERT if self.rises else ALERT_NAMES[self.phase]

    def covers(self, bucket: str) -> bool:
        return not self.buckets or bucket in self.buckets


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    runbook_base_url: str = ""

    def runbook_url(self, rule: Rule) -> str:
        return self.runbook_base_url + rule.runbook if self.runbook_base_url else rule.runbook


def _human(seconds: float) -> str:
    for unit, size in (("d", DAY_S), ("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{int(seconds // size)}{unit}"
    return f"{seconds:g}s"


def _get(table: dict, key: str, where: str, kind, default=None, required=False):
    if key not in table:
        if required:
            raise RulesError(f"{where}.{key} is required")
        return default
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if isinstance(value, bool) != (kind is bool) or not isinstance(value, kind):
        names = kind.__name__ if isinstance(kind, type) else "/".join(k.__name__ for k in kind)
        raise RulesError(f"{where}.{key}: expected {names}, got {type(value).__name__} {value!r}")
    return value


def _duration(text: str, where: str) -> float:
    try:
        return parse_duration(text, where)
    except ArgError as exc:
        raise RulesError(str(exc)) from None


def _unknown(table: dict, allowed: set, where: str) -> None:
    extra = sorted(set(table) - allowed)
    if extra:
        raise RulesError(f"{where}.{extra[0]}: unknown key (allowed: {', '.join(sorted(allowed))})")


def parse_baseline(table, where: str) -> Baseline:
    if not isinstance(table, dict):
        raise RulesError(f"{where}: expected a table like {{ kind = \"previous\", duration = \"24h\" }}")
    kind = _get(table, "kind", where, str, required=True)
    if kind not in BASELINE_KEYS:
        raise RulesError(f"{where}.kind: {kind!r} is not one of {', '.join(BASELINE_KEYS)}")
    _unknown(table, BASELINE_KEYS[kind], where)
    if kind == "previous":
        return Baseline(kind, _duration(_get(table, "duration", where, str, "24h"), f"{where}.duration"))
    days = _get(table, "days", where, int, 7)
    if not 1 <= days <= 60:
        raise RulesError(f"{where}.days: {days} is not in 1..60")
    duration = _duration(_get(table, "duration", where, str, "1h"), f"{where}.duration")
    if duration > DAY_S:
        raise RulesError(f"{where}.duration: a same_hour baseline spans at most 1d")
    return Baseline(kind, duration, days)


def parse_rule(table, where: str) -> Rule:
    if not isinstance(table, dict):
        raise RulesError(f"{where}: expected a [[rule]] table")
    _unknown(table, RULE_KEYS, where)
    name = _get(table, "name", where, str, required=True)
    phase = _get(table, "phase", where, str, required=True)
    if phase not in PHASE_METRICS:
        raise RulesError(f"{where}.phase: {phase!r} is not one of prefill, decode")
    metric = _get(table, "metric", where, str, PHASE_METRICS[phase][0])
    if metric not in PHASE_METRICS[phase]:  # a prefill rule reading decode would cross-fire
        raise RulesError(f"{where}.metric: {metric!r} does not belong to phase {phase!r} "
                         f"(use {', '.join(PHASE_METRICS[phase])})")
    rises = metric in RISES
    # The slow end: LOW for a throughput, HIGH for a gap.
    percentile = _get(table, "percentile", where, float, 99.0 if rises else 5.0)
    if not 0 < percentile < 100:
        raise RulesError(f"{where}.percentile: {percentile} is not in (0, 100)")
    buckets = _get(table, "buckets", where, (list, str), "all")
    if isinstance(buckets, str):
        if buckets != "all":
            raise RulesError(f"{where}.buckets: use \"all\" or a list of bucket labels")
        buckets = []
    if not all(isinstance(b, str) and b for b in buckets):
        raise RulesError(f"{where}.buckets: every entry must be a bucket label such as \"8k-32k\"")
    window_s = _duration(_get(table, "window", where, str, "15m"), f"{where}.window")
    if window_s > DAY_S:
        raise RulesError(f"{where}.window: at most 1d")
    baseline = parse_baseline(table.get("baseline", {"kind": "previous"}), f"{where}.baseline")
    threshold = _get(table, "threshold", where, float, 1.0 if rises else 0.30)
    if rises and not 0 < threshold <= 100:
        raise RulesError(f"{where}.threshold: {threshold} is not a relative rise in (0, 100] (1.0 = doubled)")
    if not rises and not 0 < threshold < 1:
        raise RulesError(f"{where}.threshold: {threshold} is not a relative drop in (0, 1)")
    if "floor" in table and not rises:
        raise RulesError(f"{where}.floor: only the stall metrics and the transfer ({', '.join(RISES)}) take a floor")
    floor = _get(table, "floor", where, float, RISES.get(metric))
    if rises and not floor >= 0:
        raise RulesError(f"{where}.floor: {floor} is not >= 0")
    mins = _get(table, "min_samples", where, dict, {})
    _unknown(mins, {"current", "baseline"}, f"{where}.min_samples")
    min_current = _get(mins, "current", f"{where}.min_samples", int, 50)
    min_baseline = _get(mins, "baseline", f"{where}.min_samples", int, 200)
    if min_current < 1 or min_baseline < 1:
        raise RulesError(f"{where}.min_samples: counts must be >= 1")
    return Rule(name, phase, metric, percentile, tuple(buckets), window_s, baseline, threshold,
                min_current, min_baseline, _get(table, "severity", where, str, "page"),
                _get(table, "runbook", where, str, TRANSFER_RUNBOOK if metric in TRANSFER else STALL_RUNBOOK
                     if rises else f"docs/runbooks/{phase}.md"),
                floor if rises else None, raw=tuple(sorted(table.items(), key=lambda kv: kv[0])))


def parse_rules(doc: dict, source: str = "rules", bucket_labels: list[str] | None = None) -> RuleSet:
    """`bucket_labels`: the store's input buckets; a rule naming another one
    would never be evaluated, so it is an error (case matters: 8k-32K is not 8k-32k)."""
    _unknown(doc, TOP_KEYS, source)
    tables = doc.get("rule")
    if not isinstance(tables, list) or not tables:
        raise RulesError(f"{source}.rule: at least one [[rule]] table is required")
    rules = tuple(parse_rule(t, f"rule[{i}]") for i, t in enumerate(tables))
    for i, rule in enumerate(rules):
        unknown = [b for b in rule.buckets if bucket_labels is not None and b not in bucket_labels]
        if unknown:
            raise RulesError(f"rule[{i}].buckets: {unknown[0]!r} is not an input bucket "
                             f"(the buckets are {', '.join(bucket_labels)})")
    names = [r.name for r in rules]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise RulesError(f"rule[].name: {dupes[0]!r} is used twice")
    return RuleSet(rules, _get(doc, "runbook_base_url", source, str, ""))


def load_rules(path: str | Path | None = None, bucket_labels: list[str] | None = None) -> RuleSet:
    """The shipped defaults, or the operator's file (--rules), checked against
    the store's bucket labels when given."""
    doc, _ = read_toml("--rules", path, "default_rules.toml", "default")
    return parse_rules(doc, bucket_labels=bucket_labels)


def read_toml(flag: str, path: str | Path | None, shipped: str, shipped_name: str) -> tuple[dict, str]:
    """(document, source) of the operator's file, or of the shipped file when
    path is None; errors name the flag and the file."""
    if path is None:
        text, source = resources.files("phasemeter.alerts").joinpath(shipped).read_text(), shipped_name
    else:
        try:
            text, source = read_text(path), str(path)
        except OSError as exc:
            raise RulesError(f"{flag} {path}: cannot read ({exc.strerror})") from None
    try:
        return tomllib.loads(text), source
    except tomllib.TOMLDecodeError as exc:
        raise RulesError(f"{flag} {source}: not valid TOML: {exc}") from None


def override(ruleset: RuleSet, **changes) -> RuleSet:
    """Same rules with some TOML keys replaced, re-validated (e.g. a shorter baseline)."""
    rules = tuple(parse_rule({**dict(r.raw), **changes}, f"override({r.name})") for r in ruleset.rules)
    return RuleSet(rules, ruleset.runbook_base_url)
