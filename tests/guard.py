"""What keeps the suite honest, read from the tests' own source (AST only,
nothing is imported or run). Pure: `findings(sources)` takes {path: source}
and returns what breaks a rule. tests/unit/test_test_guard.py runs it over
every test file and over planted examples of each kind.

The rules:
- `no-assert`: a test function that checks nothing itself (no `assert`, no
  `pytest.raises`/`pytest.fail`, no `raise AssertionError`) and calls no
  asserting helper. A helper is a function defined anywhere in the given
  sources whose body checks something, directly or through another helper
  (a fixpoint over names: `wait_for(...)` and `worker.wait_processed(...)`
  both count, because `wait_for` and `wait_processed` are such functions).
  Names are matched without types: a method of another class with a
  helper's name counts too. The tests that pass only through helpers are
  few (about 15) and each calls a `compare`/`same`/`check_*` of its own.
- `skip`: `pytest.skip`, `pytest.importorskip`, `pytest.mark.skip`/`skipif`
  or `unittest.skip*` (also imported by name) anywhere but tests/requires.py,
  the one place that decides between skipping (a developer's machine) and
  failing (CI=true).
- `clock-bound`: an upper bound on a measured duration written as a
  literal or with a literal slack (`elapsed < 0.05`, `time.monotonic() - t0
  <= 2`, `worst < LIMIT` where LIMIT is a module-level number, `ttft_s <=
  script.ttft_s + 0.03`). A duration is a clock call
  (time.monotonic/perf_counter/time and their _ns forms) or a name that says
  it is one (DURATION_WORDS). Lower bounds from the script (`took >= 0.2`)
  and equalities are not bounds a loaded machine breaks, so they pass; nor
  do a ratio (`span_s / step_s <= 400`: no unit left) and an UPPER_CASE
  constant (`STOP_GRACE_S < 1.0`: configured, not measured).
- `zip-strict`: a `zip()` without `strict=`: a plain zip stops at the
  shorter input, so a loop over it passes on rows that are not there.
- `empty-loop`: a loop of checks over items nothing says are there
  (tests/guard_loops.py says what does).
- `kafka-fake`: in tests/integration/, a Meter given a `producer_factory`
  or a class standing in for a Kafka producer or consumer: integration
  tests use the session's real broker; a fake belongs in tests/unit.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from guard_loops import called_name, empty_loops, is_check, literal_names, loop_name

REQUIRES = "tests/requires.py"
CLOCKS = {"monotonic", "perf_counter", "time", "monotonic_ns", "perf_counter_ns", "time_ns"}
DURATION_WORDS = re.compile(r"elapsed|took|worst|duration|latency|wall|blocked|gap|waited|spent|lag|began"
                            r"|^dt$|_dt$|^delta|seconds|_ms$|_s$|^ms$"
                            r"|(^|_)(t|t0|t1|ts|start|end|at)$")  # time points: end - start < 0.1
SKIPS = {("pytest", "skip"), ("pytest", "importorskip"), ("mark", "skip"), ("mark", "skipif"),
         ("unittest", "skip"), ("unittest", "skipIf"), ("unittest", "skipUnless")}
KAFKA_STAND_IN = re.compile(r"Producer|Consumer")


@dataclass(frozen=True)
class Finding:
    path: str
    where: str  # the enclosing function, or "<module>"
    rule: str
    line: int
    text: str

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.path, self.where, self.rule)


def _checks_itself(fn: ast.AST) -> bool:
    return any(is_check(node) for node in ast.walk(fn))


def _calls(fn: ast.AST) -> set[str]:
    return {n for node in ast.walk(fn) if isinstance(node, ast.Call) and (n := called_name(node))}


def asserting_helpers(trees: dict[str, ast.Module]) -> set[str]:
    """Names of every function in `trees` that checks something, itself or
    through another such function (iterated to a fixpoint)."""
    fns = [n for t in trees.values() for n in ast.walk(t) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    found = {f.name for f in fns if _checks_itself(f)}
    while True:
        more = {f.name for f in fns if f.name not in found and _calls(f) & found}
        if not more:
            return found
        found |= more


def _tests(tree: ast.Module):
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            yield node
        elif isinstance(node, ast.ClassDef) and node.name.startswith("Test"):
            yield from (n for n in node.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))
                        and n.name.startswith("test"))


def _enclosing(tree: ast.Module) -> dict[ast.AST, str]:
    """Every node -> the name of the outermost function or class holding it."""
    out = {}
    for top in tree.body:
        name = top.name if isinstance(top, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) else "<module>"
        for node in ast.walk(top):
            out[node] = name
    return out


def _constants(tree: ast.Module) -> set[str]:
    """Module-level names bound to a number: a literal under another name."""
    out = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and _is_literal(node.value, set()):
            out |= {t.id for t in node.targets if isinstance(t, ast.Name)}
    return out


def _is_literal(node: ast.AST, constants: set[str]) -> bool:
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (int, float)) and not isinstance(node.value, bool)
    if isinstance(node, ast.Name):
        return node.id in constants
    if isinstance(node, ast.UnaryOp):
        return _is_literal(node.operand, constants)
    if isinstance(node, ast.BinOp):
        return _is_literal(node.left, constants) and _is_literal(node.right, constants)
    return False


def _is_fixed(bound: ast.AST, constants: set[str]) -> bool:
    """A literal, or anything plus a literal slack (`script.ttft_s + 0.03`)."""
    if _is_literal(bound, constants):
        return True
    return isinstance(bound, ast.BinOp) and isinstance(bound.op, ast.Add) and (
        _is_literal(bound.left, constants) or _is_literal(bound.right, constants))


def _is_duration(node: ast.AST) -> bool:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return False  # a ratio
    if isinstance(node, (ast.Name, ast.Attribute)) and (node.id if isinstance(node, ast.Name) else node.attr).isupper():
        return False  # a configured constant
    for sub in ast.walk(node):
        if isinstance(sub, ast.Call) and called_name(sub) in CLOCKS:
            return True
        ident = sub.id if isinstance(sub, ast.Name) else sub.attr if isinstance(sub, ast.Attribute) else None
        if ident and DURATION_WORDS.search(ident.lower()):
            return True
        if isinstance(sub, ast.Constant) and isinstance(sub.value, str) and DURATION_WORDS.search(sub.value.lower()):
            return True  # a subscript key: row["elapsed_s"]
    return False


def _upper_bounds(cmp: ast.Compare):
    """(bounded side, bound) for each `x < bound` / `bound > x` in a chain."""
    sides = [cmp.left, *cmp.comparators]
    for op, a, b in zip(cmp.ops, sides[:-1], sides[1:], strict=True):
        if isinstance(op, (ast.Lt, ast.LtE)):
            yield a, b
        elif isinstance(op, (ast.Gt, ast.GtE)):
            yield b, a


def findings(sources: dict[str, str]) -> list[Finding]:
    trees = {path: ast.parse(src, filename=path) for path, src in sources.items()}
    helpers = asserting_helpers(trees)
    out = []
    for path, tree in trees.items():
        lines = sources[path].splitlines()
        where = _enclosing(tree)
        consts = _constants(tree)
        # `pytest.skip.Exception` names the exception, it skips nothing
        qualified = {id(n.value) for n in ast.walk(tree) if isinstance(n, ast.Attribute)}

        def add(node, rule, name=None):
            out.append(Finding(path, name or where.get(node, "<module>"), rule, node.lineno,
                               lines[node.lineno - 1].strip()))

        module_names = literal_names(tree.body)
        for fn in ast.walk(tree):
            if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                for loop in empty_loops(fn, module_names):  # named by its loop, for a precise allow-list
                    add(loop, "empty-loop", f"{where[fn]}: for {loop_name(loop)}")
        for fn in _tests(tree):
            if not _checks_itself(fn) and not (_calls(fn) & helpers):
                add(fn, "no-assert", fn.name)
        for node in ast.walk(tree):
            if (path != REQUIRES and isinstance(node, ast.Attribute) and id(node) not in qualified
                    and isinstance(node.value, (ast.Name, ast.Attribute))):
                owner = node.value.id if isinstance(node.value, ast.Name) else node.value.attr
                if (owner, node.attr) in SKIPS:
                    add(node, "skip")
            if path != REQUIRES and isinstance(node, ast.ImportFrom) and node.module in ("pytest", "unittest"):
                if any((node.module, a.name) in SKIPS for a in node.names):
                    add(node, "skip")
            if path.startswith("tests/integration/") and (
                    (isinstance(node, ast.ClassDef) and KAFKA_STAND_IN.search(node.name))
                    or (isinstance(node, ast.Call) and any(k.arg == "producer_factory" for k in node.keywords))):
                add(node, "kafka-fake")
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "zip"
                    and not any(k.arg == "strict" for k in node.keywords)):
                add(node, "zip-strict")
            if isinstance(node, ast.Compare):
                for bounded, bound in _upper_bounds(node):
                    if _is_fixed(bound, consts) and _is_duration(bounded):
                        add(node, "clock-bound")
                        break
    return out
