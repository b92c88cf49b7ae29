"""The import graph of the installed package: no cycles (imports inside
functions count too), the emitter stays a leaf, and the pure cores do no I/O.
docs/architecture.md draws the layers these rules keep."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Installed package name -> folder in the repo (pyproject's package-dir).
FOLDERS = {"phasemeter": "phasemeter", "phasemeter.stream_jobs": "stream_jobs",
           "phasemeter.producers": "producers"}
# Pure cores: no store, no Kafka, no Faust, no web, no files.
PURE = ("phasemeter.stream_jobs.derive", "phasemeter.stream_jobs.formulas", "phasemeter.stream_jobs.join", "phasemeter.stream_jobs.batch_join",
        "phasemeter.stream_jobs.sequence", "phasemeter.stream_jobs.labels",
        "phasemeter.stream_jobs.contract", "phasemeter.stream_jobs.buckets", "phasemeter.alerts.evaluate",
        "phasemeter.analytics.paths", "phasemeter.integrations.otlp_map", "phasemeter.integrations.otlp_decode",
        "phasemeter.integrations.otlp_wire",
        "phasemeter.integrations.otlp_names", "phasemeter.integrations.otlp_pd",
        "phasemeter.integrations.otlp_fields", "phasemeter.integrations.otlp_limits",
        "phasemeter.integrations.sse", "phasemeter.integrations.openai_call", "phasemeter.stream_jobs.otlp_in",
        "phasemeter.alerts.burn", "phasemeter.alerts.replay", "phasemeter.alerts.transfer",
        "phasemeter.store.sql_guard", "phasemeter.store.sql_request", "phasemeter.store.sql_compress", "phasemeter.store.native_revision",
        "phasemeter.store.read_tuning",
        "phasemeter.stream_jobs.refusals", "phasemeter.stream_jobs.dead_letter", "phasemeter.stream_jobs.phases_in",
        "phasemeter.stream_jobs.fast_decode", "phasemeter.stream_jobs.columnar", "phasemeter.stream_jobs.batch_decode",
        "phasemeter.stream_jobs.dedup")
IO = ("faust", "aiokafka", "kafka", "clickhouse_connect", "chdb", "urllib", "socket", "subprocess",
      "phasemeter.store.client", "phasemeter.query.runner", "phasemeter.stream_jobs.sink", "phasemeter.stream_jobs.ledger")


def modules() -> dict[str, Path]:
    out = {}
    for package, folder in FOLDERS.items():
        for path in (ROOT / folder).rglob("*.py"):
            parts = [p for p in path.relative_to(ROOT / folder).with_suffix("").parts if p != "__init__"]
            if package == "phasemeter" and parts and parts[0] in ("stream_jobs", "producers"):
                continue
            out[".".join([package, *parts])] = path
    return out


def imports(name: str, path: Path) -> set[str]:
    """Every module this one imports, at the top or inside a function."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                head = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(head + ([node.module] if node.module else []))
            found.add(base)
            found |= {f"{base}.{a.name}" for a in node.names}
    return found


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {name: {d for d in imports(name, path) if d in mods and d != name} for name, path in mods.items()}


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in edges[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_checker_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_import_cycles():
    edges = graph()
    # The parser sees real imports, relative and inside functions alike.
    assert "phasemeter.stream_jobs.pipeline" in edges["phasemeter.stream_jobs.app"]
    assert "phasemeter.store.client" in edges["phasemeter.query.runner"]  # imported inside open_runner()
    assert cycles(edges) == []


# The contract: limits, labels, reason codes and the checks across fields
# (formulas.py: the emitter refuses what the worker would), pure and dependency-free.
CONTRACT = {"phasemeter.stream_jobs.contract", "phasemeter.stream_jobs.reasons", "phasemeter.stream_jobs.formulas"}


def test_the_emitter_depends_only_on_itself_and_the_contract():
    edges = graph()
    assert "phasemeter.producers.emitter" in edges and "phasemeter.producers.generation" in edges
    for name, deps in edges.items():
        if name.startswith("phasemeter.producers"):
            assert all(d.startswith("phasemeter.producers") or d in CONTRACT for d in deps), (name, deps)
    for name in CONTRACT:  # and the contract on nothing of ours but itself
        assert set(edges.get(name, ())) <= CONTRACT | {"phasemeter.stream_jobs"}, (name, edges.get(name))


def test_pure_cores_do_no_io():
    mods = modules()
    for name in PURE:
        found = imports(name, mods[name])
        bad = sorted(d for d in found if any(d == io or d.startswith(io + ".") for io in IO))
        assert not bad, f"{name} imports {bad}"


def test_every_command_is_registered_explicitly():
    """The CLI names each command's function by import (no string dispatch or
    importlib table), so a reader can follow `phasemeter X` to its code."""
    import argparse

    from phasemeter.cli.main import build_parser

    text = (ROOT / "phasemeter" / "cli" / "main.py").read_text()
    assert "importlib" not in text and "getattr(commands" not in text

    def leaves(parser):
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    yield from ((f"{name} {n}".strip(), p) for n, p in leaves(sub))
        if not any(isinstance(a, argparse._SubParsersAction) for a in parser._actions):
            yield "", parser

    found = dict(leaves(build_parser()))
    assert {"migrate", "worker", "query bands", "chart", "demo", "alerts check", "latency", "inflight"} <= set(found)
    for name, parser in found.items():
        assert callable(parser.get_default("func")), name


# The layers of docs/architecture.md, bottom first. A module belongs to the
# layer of its longest matching prefix and imports only from its own layer
# or those below (an empty package __init__ is no dependency).
LAYERS = (
    ("contract", ("phasemeter.stream_jobs.contract", "phasemeter.stream_jobs.reasons",
                  "phasemeter.stream_jobs.buckets", "phasemeter.settings", "phasemeter.timeparse",
                  "phasemeter.textgrid", "phasemeter.files", "phasemeter.callers")),
    ("pure cores, emitter and integrations", ("phasemeter.producers", "phasemeter.integrations", "phasemeter.stream_jobs.derive", "phasemeter.stream_jobs.formulas", "phasemeter.stream_jobs.join",
                                "phasemeter.stream_jobs.batch_join", "phasemeter.stream_jobs.sequence", "phasemeter.stream_jobs.phase_events",
                                "phasemeter.alerts.evaluate", "phasemeter.alerts.rules", "phasemeter.alerts.slo_rules",
                                "phasemeter.alerts.burn", "phasemeter.alerts.replay", "phasemeter.alerts.transfer",
                                "phasemeter.analytics.paths",
                                "phasemeter.analytics.variants", "phasemeter.store.sql_guard",
                                "phasemeter.store.sql_request", "phasemeter.store.sql_compress",
                                "phasemeter.store.native_revision", "phasemeter.query.rows")),
    ("store", ("phasemeter.store", "phasemeter.kafka_local")),
    ("worker, queries, rendering", ("phasemeter.stream_jobs", "phasemeter.query", "phasemeter.analytics",
                                    "phasemeter.alerts", "phasemeter.render")),
    ("cli and demo", ("phasemeter.cli", "phasemeter.demo", "phasemeter.alerts.cli", "phasemeter.analytics.cli",
                      "phasemeter.__main__", "phasemeter")),
)


def layer_of(name: str) -> int:
    best = (-1, -1)
    for i, (_, prefixes) in enumerate(LAYERS):
        for p in prefixes:
            if (name == p or name.startswith(p + ".")) and len(p) > best[1]:
                best = (i, len(p))
    assert best[0] >= 0, f"{name} is in no layer of docs/architecture.md"
    return best[0]


def test_no_module_imports_upward():
    mods = modules()
    empty = {n for n, p in mods.items() if p.name == "__init__.py" and not p.read_text().strip()}
    up = [(m, LAYERS[layer_of(m)][0], d, LAYERS[layer_of(d)][0])
          for m, deps in graph().items() for d in deps - empty if layer_of(d) > layer_of(m)]
    assert up == [], "upward imports: " + "; ".join(f"{m} [{a}] -> {d} [{b}]" for m, a, d, b in up)


def test_the_layer_test_can_fail():
    assert layer_of("phasemeter.stream_jobs.derive") < layer_of("phasemeter.store.client") \
        < layer_of("phasemeter.query.runner") < layer_of("phasemeter.cli.main")
