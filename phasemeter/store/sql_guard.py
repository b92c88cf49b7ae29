"""What a reader's SQL may do: the pure classifier of the read-only SQL interface.

The engine is the floor: every query runs on a chDB handle set to
`readonly=1`, which refuses writes, DDL and any change of a setting (so no
limit can be lifted). Measured on chDB 4.4, that floor lets three things
through, so this module refuses them before the query runs:

- a second statement after `;` (chDB runs every statement of a text);
- `INTO OUTFILE` (written even in readonly mode);
- functions reaching outside the store: `file()`, `url()`, `s3()`...,
  chDB's `Python()` (objects of the worker's own process), dictionaries.

Two steps: `check_text` on the raw text (a tokenizer: statements, first
keyword, INTO OUTFILE), then `check_ast` on the engine's own parse
(`EXPLAIN AST`), which tells a table function from a column. Errors carry
ClickHouse's codes and names, so every client raises its usual exception.
"""

from __future__ import annotations

import re

# ClickHouse's error codes (src/Common/ErrorCodes.cpp) and the HTTP statuses
# its HTTP handler answers them with.
CODES = {"SYNTAX_ERROR": 62, "UNKNOWN_FORMAT": 73, "READONLY": 164, "TOO_MANY_SIMULTANEOUS_QUERIES": 202,
         "UNKNOWN_QUERY_PARAMETER": 456, "ACCESS_DENIED": 497, "AUTHENTICATION_FAILED": 516}
_STATUS = {62: 400, 73: 400, 456: 400, 164: 403, 497: 403, 516: 401, 202: 503, 60: 404, 81: 404, 46: 404,
           47: 400, 43: 400, 53: 400, 36: 400, 159: 500, 241: 500, 396: 500}

# Statements a reader may send (first keyword).
READ_KEYWORDS = frozenset({"SELECT", "WITH", "SHOW", "DESC", "DESCRIBE", "EXISTS", "EXPLAIN", "("})
# Statements that change something (refused as ClickHouse refuses them in readonly mode).
WRITE_KEYWORDS = frozenset({"INSERT", "CREATE", "ALTER", "DROP", "TRUNCATE", "DELETE", "UPDATE", "RENAME", "DETACH",
                            "ATTACH", "BACKUP", "RESTORE", "GRANT", "REVOKE", "SYSTEM", "KILL", "OPTIMIZE", "SET",
                            "USE", "EXCHANGE", "UNDROP", "MOVE", "CHECK", "WATCH", "BEGIN", "COMMIT", "ROLLBACK",
                            "REPLACE", "UPSERT", "MERGE"})
# Top nodes of `EXPLAIN AST` for those statements.
READ_NODES = ("SelectWithUnionQuery", "SelectIntersectExceptQuery", "ShowTables", "ShowColumns",
              "DescribeQuery", "ExistsTableQuery", "ExistsDatabaseQuery", "ExistsViewQuery",
              "ExistsDictionaryQuery", "ShowCreateTableQuery", "ShowCreateViewQuery", "ShowCreateDatabaseQuery")
# Table functions that generate rows or read tables of the store itself.
TABLE_FUNCTIONS = frozenset({"numbers", "numbers_mt", "zeros", "zeros_mt", "generate_series", "generateseries",
                             "primes", "values", "null", "view", "merge", "generaterandom", "format"})
# Scalar functions sharing a name with a table function that reach nothing.
SCALARS = frozenset({"format"})
# Scalar functions that read files (models on disk).
OUTSIDE_SCALARS = frozenset({"catboostevaluate"})


class ChError(Exception):
    """An error in ClickHouse's own form: `Code: N. DB::Exception: ... (NAME)`."""

    def __init__(self, name: str, message: str, code: int | None = None):
        super().__init__(message)
        self.name, self.message = name, message
        self.code = CODES[name] if code is None else code

    @property
    def status(self) -> int:
        return _STATUS.get(self.code, 500)

    def body(self, version: str) -> str:
        return f"Code: {self.code}. DB::Exception: {self.message}. ({self.name}) (version {version})\n"


def exception_block(body: str, tag: str) -> bytes:
    """An error after the answer has begun, in the form a server (25.11+)
    ends a stream with, named by the response's X-ClickHouse-Exception-Tag:
    `__exception__\\r\\n<tag>\\r\\n<message>\\n<length> <tag>\\r\\n__exception__\\r\\n`."""
    message = body.rstrip("\n")
    return f"__exception__\r\n{tag}\r\n{message}\n{len(message)} {tag}\r\n__exception__\r\n".encode()


def split_exception(tail: bytes, tag: str) -> tuple[bytes, str | None]:
    """(the answer's bytes, the error's text or None) of a stream's end."""
    opening = f"__exception__\r\n{tag}\r\n".encode()
    at = tail.find(opening)
    if at < 0:
        return tail, None
    rest = tail[at + len(opening):]
    message = rest[:rest.rfind(f" {tag}\r\n__exception__".encode())].rsplit(b"\n", 1)[0]
    return tail[:at], message.decode(errors="replace")


_ENGINE_ERROR = re.compile(r"Code: (\d+)\. DB::Exception: (?:Code: \d+\. DB::Exception: )?(.*?)\.? \(([A-Z_0-9]+)\)",
                           re.S)


def from_engine(text: str) -> ChError:
    """The engine's exception text as a ChError (chDB nests the code twice)."""
    m = _ENGINE_ERROR.search(text)
    if not m:
        return ChError("UNKNOWN_EXCEPTION", text.strip()[:1000], code=1002)
    message = re.sub(r" \(version [^)]*\)\.?$", "", m.group(2).strip())
    return ChError(m.group(3), message, code=int(m.group(1)))


_TOKEN = re.compile(r"""\s+|--[^\n]*|\#[^\n]*|/\*.*?\*/|'(?:[^'\\]|\\.|'')*'|"(?:[^"\\]|\\.)*"|`(?:[^`\\]|\\.)*`
                        |\$(?P<tag>\w*)\$.*?\$(?P=tag)\$|(?P<word>[A-Za-z_][A-Za-z0-9_]*)|(?P<other>.)""", re.S | re.X)


def words(sql: str) -> list[str]:
    """The statement's keywords, identifiers and punctuation, upper case,
    without comments, string literals and quoted names."""
    out = []
    for m in _TOKEN.finditer(sql):
        if m.group("word"):
            out.append(m.group("word").upper())
        elif m.group("other") and not m.group("other").isspace():
            out.append(m.group("other"))
    return out


def check_text(sql: str) -> None:
    """Refuse what the engine's readonly mode lets through, before it parses."""
    toks = words(sql)
    if not toks:
        raise ChError("SYNTAX_ERROR", "Empty query")
    if ";" in toks and any(t != ";" for t in toks[toks.index(";"):]):
        raise ChError("SYNTAX_ERROR", "Multi-statements are not allowed")
    first = _explained(toks) if toks[0] == "EXPLAIN" else toks[0]
    if first in WRITE_KEYWORDS:
        raise ChError("READONLY", f"Cannot execute query in readonly mode: {first} is not a read")
    if first not in READ_KEYWORDS:
        raise ChError("SYNTAX_ERROR", f"Syntax error: {first} does not start a statement this interface runs")
    for a, b in zip(toks, toks[1:]):
        if (a, b) in (("INTO", "OUTFILE"), ("FROM", "INFILE")):
            raise ChError("ACCESS_DENIED", f"{a} {b} is not allowed: the SQL interface reaches no files")


_EXPLAIN_KINDS = frozenset({"AST", "SYNTAX", "PLAN", "PIPELINE", "ESTIMATE", "QUERY", "TREE", "TABLE", "OVERRIDE",
                            "CURRENT", "TRANSACTION"})


def _explained(toks: list[str]) -> str:
    """The first keyword of the statement an EXPLAIN explains (after its kind
    and its `name = value` options)."""
    i = 1
    while i < len(toks):
        if toks[i] in _EXPLAIN_KINDS or toks[i] == ",":
            i += 1
        elif i + 1 < len(toks) and toks[i + 1] == "=":
            i += 3
        else:
            return toks[i]
    return ""


_NODE = re.compile(r"^( *)(\S+)(?: (\S+))?")


def check_ast(ast: str, table_functions: frozenset[str], views: frozenset[str] = frozenset(),
              database: str = "") -> str | None:
    """Refuse a parse (`EXPLAIN AST` text) that is not a read or reaches outside
    the store; return the query's own FORMAT, if it names one. `views` are the
    store's views as lower-case `database.name`: a parameterized view is called
    like a table function (`bands_view(...)`, `db.bands_view(...)`), and reads
    only the store, so such a call passes; any other name there is refused."""
    lines = [ln for ln in ast.splitlines() if ln.strip()]
    if not lines:
        raise ChError("SYNTAX_ERROR", "Empty query")
    top = lines[0].strip().split()[0]
    if top == "Explain":
        top = lines[1].strip().split()[0] if len(lines) > 1 else ""
    if top not in READ_NODES:
        raise ChError("READONLY", f"Cannot execute query in readonly mode: {top} is not a read")
    outside = {f.lower() for f in table_functions} - TABLE_FUNCTIONS - SCALARS
    stack: list[tuple[int, str]] = []
    fmt = None
    for line in lines:
        depth, node, name = _NODE.match(line).groups()
        depth = len(depth)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        parent = stack[-1][1] if stack else ""
        stack.append((depth, node))
        if node == "Identifier" and depth == 1 and parent in READ_NODES:
            fmt = name
        if node == "Set" and any(n == "Subquery" for _, n in stack):
            # Measured: chDB lets a subquery name settings in readonly mode
            # (the query's limits still hold); a reader has no need of them.
            raise ChError("READONLY", "Cannot modify settings of a subquery in readonly mode")
        if node == "Literal" and depth == 1:
            raise ChError("ACCESS_DENIED", "INTO OUTFILE is not allowed: the SQL interface reaches no files")
        if node != "Function" or not name:
            continue
        low = name.lower()
        if parent == "TableExpression" and low not in TABLE_FUNCTIONS \
                and not (low not in outside and (low in views or f"{database.lower()}.{low}" in views)):
            raise ChError("ACCESS_DENIED", f"table function {name} is not allowed: it reaches outside the store")
        if low in outside or low in OUTSIDE_SCALARS:
            raise ChError("ACCESS_DENIED", f"function {name} is not allowed: it reaches outside the store")
        if low.startswith("dict"):
            raise ChError("ACCESS_DENIED", f"function {name} is not allowed: dictionaries are not served")
    return fmt
