"""The `empty-loop` rule of tests/guard.py (pure, AST only), and what every
rule there counts as a check (`is_check`).

It finds a `for` loop whose body checks something, in any function (a
test or a helper), with nothing in that function saying there are items
to loop over: on none it passes having checked nothing.
The loop's items come from E, after unwrapping enumerate/sorted/reversed/
list/tuple/set/iter, `.items()`/`.values()`/`.keys()`, `range(len(E))`;
for `zip(..., strict=True)` or `a + b` either side will do. Before the
loop, E is pinned by `assert E` (alone or as an `and` operand), `assert
len(E)`, `len(E)` compared `==`, `>`, `>=` (not to 0) or `!= 0`, `x in E`,
`E == ...` / `f(E) == ...` / `{.. for .. in E} == ...` (f: set, sorted,
list, tuple, dict, len, Counter; either side of `==`), `{"a"} <= set(E)`
(a written-out subset), or an unpacking `a, b = E`. Needing nothing: a
non-empty literal (list, tuple, set, dict, text, `a + [b]`), `range()` of
integers written out (`range(ROUNDS + 1)`, ROUNDS bound only to one), a
name bound in the module or the function only to such literals, and a
`pytest.mark.parametrize` argument. Or a tally: a name the loop fills
(`n += 1`, `seen.add(x)`, `out.append(r)`, `by[k] = v`) that starts empty
before it (`n = 0`, `seen = set()`) and is pinned after it as above, or
by `n > 100`: a loop that never ran leaves it empty. What is not
recognised (an assertion in a helper the loop's source went through, a
slice `E[1:]`) needs an assertion written out, or an ALLOWED entry; a
finding is named by its function and loop target (`check: for cell`).
"""

from __future__ import annotations

import ast


def called_name(call: ast.Call) -> str | None:
    f = call.func
    return f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None


def is_check(node: ast.AST) -> bool:
    """An `assert`, a `raise AssertionError`, or a pytest.raises/fail/warns."""
    if isinstance(node, ast.Assert):
        return True
    if isinstance(node, ast.Raise) and node.exc is not None:
        exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
        if isinstance(exc, ast.Name) and exc.id == "AssertionError":
            return True
    return isinstance(node, ast.Call) and called_name(node) in ("raises", "fail", "warns")


# f(E) has E's items or its count: a loop over it loops over E, and an
# equality on it pins how many E has.
UNWRAP_CALLS = {"enumerate", "sorted", "reversed", "list", "tuple", "set", "frozenset", "iter"}
UNWRAP_METHODS = {"items", "values", "keys"}
SIZED = UNWRAP_CALLS | {"len", "dict", "Counter"}


def _own_nodes(fn: ast.AST):
    """The nodes of `fn` itself: nested functions, lambdas and classes are
    their own scopes (their code does not run where they are written)."""
    todo = list(ast.iter_child_nodes(fn))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)):
            todo.extend(ast.iter_child_nodes(node))


def _asserts(stmts: list[ast.stmt]) -> bool:
    scopes = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    return any(is_check(n) for stmt in stmts if not isinstance(stmt, scopes) for n in [stmt, *_own_nodes(stmt)])


def _iterated(node: ast.AST) -> list[ast.AST]:
    """What a loop's items come from, unwrapped; any one of them pinned pins
    the loop (a zip: each side, equal in length when strict)."""
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # a + b has items if either has
        return _iterated(node.left) + _iterated(node.right)
    if isinstance(node, ast.Call):
        name, args = called_name(node), node.args
        if isinstance(node.func, ast.Name) and name == "zip":
            return [e for a in args for e in _iterated(a)]
        if isinstance(node.func, ast.Name) and name in UNWRAP_CALLS and args:
            return _iterated(args[0])
        if (isinstance(node.func, ast.Name) and name == "range" and len(args) == 1
                and isinstance(args[0], ast.Call) and called_name(args[0]) == "len" and args[0].args):
            return _iterated(args[0].args[0])
        if isinstance(node.func, ast.Attribute) and name in UNWRAP_METHODS and not args:
            return _iterated(node.func.value)
    return [node]


def _is_filled_literal(node: ast.AST, names: dict) -> bool:
    """A collection written out with at least one item, or a name bound to one."""
    if isinstance(node, (ast.List, ast.Tuple, ast.Set)):
        return any(not isinstance(e, ast.Starred) for e in node.elts)
    if isinstance(node, ast.Dict):
        return any(k is not None for k in node.keys)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):  # rows + [last]
        return _is_filled_literal(node.left, names) or _is_filled_literal(node.right, names)
    if isinstance(node, ast.Constant):
        return isinstance(node.value, (str, bytes)) and len(node.value) > 0
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "range" and node.args:
        bounds = [_int_value(a, names) for a in node.args]
        return None not in bounds and len(range(*bounds)) > 0
    return isinstance(node, ast.Name) and names.get(node.id) is True


INT_OPS = {ast.Add: int.__add__, ast.Sub: int.__sub__, ast.Mult: int.__mul__, ast.FloorDiv: int.__floordiv__}


def _int_value(node: ast.AST, names: dict) -> int | None:
    """The value of an integer written out (`6`, `ROUNDS + 1` with ROUNDS
    bound only to an integer written out), else None."""
    if isinstance(node, ast.Constant):
        return node.value if type(node.value) is int else None
    if isinstance(node, ast.Name):
        value = names.get(node.id)
        return value if type(value) is int else None
    if isinstance(node, ast.BinOp) and type(node.op) in INT_OPS:
        a, b = _int_value(node.left, names), _int_value(node.right, names)
        if a is not None and b is not None and not (isinstance(node.op, ast.FloorDiv) and b == 0):
            return INT_OPS[type(node.op)](a, b)
    return None


def literal_names(body) -> dict[str, int | bool]:
    """Names every assignment in `body` binds to the same integer written
    out (-> its value) or to filled literals (-> True)."""
    bound: dict[str, object] = {}
    for node in body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            value = _int_value(node.value, {})
            if value is None:
                value = _is_filled_literal(node.value, {}) or None
            for t in (node.targets if isinstance(node, ast.Assign) else [node.target]):
                if isinstance(t, ast.Name):
                    bound[t.id] = value if bound.get(t.id, value) == value else None
        elif isinstance(node, (ast.AugAssign, ast.For, ast.AsyncFor, ast.comprehension, ast.NamedExpr)):
            for t in ast.walk(node.target):
                if isinstance(t, ast.Name):
                    bound[t.id] = None
    return {name: value for name, value in bound.items() if value is not None}


def _parametrized(fn: ast.AST) -> set[str]:
    """The arguments `@pytest.mark.parametrize` gives `fn` (values written
    in the decorator, so never an empty surprise)."""
    out = set()
    for dec in getattr(fn, "decorator_list", []):
        if isinstance(dec, ast.Call) and called_name(dec) == "parametrize" and dec.args:
            names = dec.args[0]
            if isinstance(names, ast.Constant) and isinstance(names.value, str):
                out |= {n.strip() for n in names.value.split(",")}
            elif isinstance(names, (ast.List, ast.Tuple)):
                out |= {e.value for e in names.elts if isinstance(e, ast.Constant)}
    return out


def _same(a: ast.AST, b: ast.AST) -> bool:
    return ast.dump(a) == ast.dump(b)


def _has_items_of(node: ast.AST, e: ast.AST) -> bool:
    """`node` is E, f(E) for a sizing f, E.keys()..., or a comprehension over E."""
    if _same(node, e):
        return True
    if isinstance(node, ast.Call) and node.args and isinstance(node.func, ast.Name) and node.func.id in SIZED:
        return _has_items_of(node.args[0], e)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in UNWRAP_METHODS:
        return not node.args and _has_items_of(node.func.value, e)
    if isinstance(node, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
        return any(_has_items_of(g.iter, e) for g in node.generators)
    return False


def _is_len_of(node: ast.AST, e: ast.AST, tally: bool = False) -> bool:
    return (isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "len"
            and len(node.args) == 1 and _has_items_of(node.args[0], e)) or (tally and _same(node, e))


def _pins(test: ast.AST, e: ast.AST, tally: bool = False) -> bool:
    """The assertion `test` fails when E is empty, or fixes how many it has.
    A tally (a count the loop made from 0) is its own size: `n > 100`."""
    parts = test.values if isinstance(test, ast.BoolOp) and isinstance(test.op, ast.And) else [test]
    for part in parts:
        if _has_items_of(part, e):
            return True  # assert rows / assert len(rows)
        if not isinstance(part, ast.Compare):
            continue
        sides = [part.left, *part.comparators]
        for op, a, b in zip(part.ops, sides[:-1], sides[1:], strict=True):
            zero = (isinstance(a, ast.Constant) and a.value == 0) or (isinstance(b, ast.Constant) and b.value == 0)
            if isinstance(op, ast.Eq) and (_has_items_of(a, e) or _has_items_of(b, e)):
                return True
            if isinstance(op, ast.In) and _has_items_of(b, e):
                return True
            if ((isinstance(op, (ast.Lt, ast.LtE)) and _is_filled_literal(a, {}) and _has_items_of(b, e))
                    or (isinstance(op, (ast.Gt, ast.GtE)) and _is_filled_literal(b, {}) and _has_items_of(a, e))):
                return True  # {"a", "b"} <= set(E): a written-out subset
            if isinstance(op, ast.NotEq) and zero and (_is_len_of(a, e, tally) or _is_len_of(b, e, tally)):
                return True
            if ((isinstance(op, ast.Gt) and _is_len_of(a, e, tally))
                    or (isinstance(op, ast.Lt) and _is_len_of(b, e, tally))):
                return True
            if not zero and ((isinstance(op, ast.GtE) and _is_len_of(a, e, tally))
                             or (isinstance(op, ast.LtE) and _is_len_of(b, e, tally))):
                return True
    return False


def _unpacks(node: ast.AST, e: ast.AST) -> bool:
    """`a, b = E` / `(only,) = E`: the count is fixed (or, with *rest, bounded below)."""
    return (isinstance(node, ast.Assign) and _has_items_of(node.value, e) and any(
        isinstance(t, (ast.Tuple, ast.List)) and any(not isinstance(x, ast.Starred) for x in t.elts)
        for t in node.targets))


TALLY_METHODS = {"append", "add", "extend", "update", "setdefault"}


def _tallies(loop: ast.AST) -> set[str]:
    """Names the loop's body counts or collects into: `n += 1`,
    `seen.add(x)`, `rows.append(r)`, `by[k] = v`."""
    out = set()
    for node in _own_nodes(loop):
        if isinstance(node, ast.AugAssign) and isinstance(node.target, ast.Name):
            out.add(node.target.id)
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in TALLY_METHODS
              and isinstance(node.func.value, ast.Name)):
            out.add(node.func.value.id)
        elif isinstance(node, ast.Assign):
            out |= {t.value.id for t in node.targets if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name)}
    return out


def _is_empty_start(node: ast.AST) -> bool:
    """0, [], {}, set(), dict(), list(), Counter()."""
    if isinstance(node, ast.Constant):
        return node.value == 0 and not isinstance(node.value, bool)
    if isinstance(node, (ast.List, ast.Tuple, ast.Set, ast.Dict)):
        return not (node.keys if isinstance(node, ast.Dict) else node.elts)
    return isinstance(node, ast.Call) and not node.args and not node.keywords and called_name(node) in (
        "set", "dict", "list", "Counter", "defaultdict")


def _started(node: ast.Assign) -> list[str]:
    """The names `node` binds to an empty start: `n = 0`, `a = b = []`, `x, n = None, 0`."""
    out = []
    for t in node.targets:
        if isinstance(t, ast.Name) and _is_empty_start(node.value):
            out.append(t.id)
        elif isinstance(t, ast.Tuple) and isinstance(node.value, ast.Tuple) and len(t.elts) == len(node.value.elts):
            out += [x.id for x, v in zip(t.elts, node.value.elts, strict=True)
                    if isinstance(x, ast.Name) and _is_empty_start(v)]
    return out


def loop_name(loop: ast.For) -> str:
    """`a, b` for `for a, b in ...`: with the function, a finding's name."""
    t = loop.target
    return ", ".join(map(ast.unparse, t.elts)) if isinstance(t, ast.Tuple) else ast.unparse(t)


def empty_loops(fn: ast.AST, module_names: dict):
    """The loops of `fn` (its own, not nested functions') that assert over
    items nothing in `fn` says are there: neither something before the loop
    that pins what it iterates, nor a tally the loop fills from empty and an
    assertion after the loop pins."""
    own = list(_own_nodes(fn))
    fixed = {**module_names, **literal_names(own), **dict.fromkeys(_parametrized(fn), True)}
    checks = [n for n in own if isinstance(n, (ast.Assert, ast.Assign))]
    starts = [(n.lineno, name) for n in own if isinstance(n, ast.Assign) for name in _started(n)]
    for loop in own:
        if not isinstance(loop, (ast.For, ast.AsyncFor)) or not _asserts(loop.body):
            continue
        before = [n for n in checks if n.lineno < loop.lineno]
        if any(_is_filled_literal(e, fixed) or any(
                _unpacks(n, e) if isinstance(n, ast.Assign) else _pins(n.test, e) for n in before)
                for e in _iterated(loop.iter)):
            continue
        after = [n for n in checks if isinstance(n, ast.Assert) and n.lineno > loop.end_lineno]
        started = {name for line, name in starts if line < loop.lineno}
        if any(_pins(n.test, ast.Name(id=t, ctx=ast.Load()), tally=True)
               for t in _tallies(loop) & started for n in after):
            continue
        yield loop
