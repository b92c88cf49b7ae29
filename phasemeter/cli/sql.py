"""`phasemeter sql`: run a SELECT of your own, from the argument, --file or stdin.

While a worker owns the embedded store, the query goes to the worker's SQL
interface (its ClickHouse HTTP port, found in <data_dir>/worker.json, or
--via); otherwise the store is opened here, read-only, through the same
engine and the same refusals (phasemeter/store/sql_engine.py). With a
ClickHouse server store it is posted to the server with `readonly=1`.
`--format` is passed to the engine, whose bytes go to stdout as they come;
`--param name=value` binds `{name:Type}` placeholders. docs/sql.md.
"""

from __future__ import annotations

import sys
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

from phasemeter.timeparse import ArgError

CHUNK = 1 << 16
HOLD = 1 << 16  # longer than any error block a server ends a stream with


def register(sub, common, window_flags) -> None:  # noqa: ARG001
    p = sub.add_parser("sql", help="run a SELECT (argument, --file or stdin) on the store, read-only")
    common(p)
    p.add_argument("query", nargs="?", help="the SQL text (default: --file, else stdin)")
    p.add_argument("--file", help="read the SQL from this file")
    p.add_argument("--format", help="ClickHouse output format (default: PrettyCompact on a terminal, "
                                    "else TabSeparated); a FORMAT clause in the query wins")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="bind {NAME:Type} in the query (repeatable)")
    p.add_argument("--via", help="SQL interface URL to ask (default: the worker's, found from the data dir)")
    p.set_defaults(func=cmd_sql)


def sql_text(args, stdin=None) -> str:
    """The query from exactly one place; errors name the flag."""
    stdin = sys.stdin if stdin is None else stdin
    if args.query is not None and args.file:
        raise ArgError("give the query as an argument or with --file, not both")
    if args.file:
        try:
            text = Path(args.file).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ArgError(f"--file={args.file!r}: {exc.strerror if isinstance(exc, OSError) else exc}") from None
    elif args.query is not None:
        text = args.query
    elif stdin.isatty():
        raise ArgError("no query: give it as an argument, with --file, or on stdin")
    else:
        text = stdin.read()
    if not text.strip():
        raise ArgError("--file / query: the query is empty")
    return text


def bound_params(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        name, eq, value = pair.partition("=")
        if not eq or not name.isidentifier():
            raise ArgError(f"--param {pair!r}: expected NAME=VALUE")
        out[name] = value
    return out


def worker_sql_url(data_path: Path) -> str | None:
    """The SQL interface of the live worker owning this data dir's store
    (worker.json, read once by remote.worker_state)."""
    from phasemeter.query.remote import SQL_URL, worker_state
    from phasemeter.query.runner import no_sql_interface
    from phasemeter.store.client import StoreError

    info = worker_state(data_path)
    if info is not None and not info.get(SQL_URL):  # it holds the store: nobody else can open it
        raise StoreError(no_sql_interface(info, data_path))
    return info[SQL_URL] if info else None


def cmd_sql(args, settings) -> int:
    from phasemeter.store.sql_guard import ChError, check_text, from_engine

    text = sql_text(args)
    params = bound_params(args.param)
    fmt = args.format or ("PrettyCompact" if sys.stdout.isatty() else "TabSeparated")
    url = args.via or (worker_sql_url(settings.data_path) if settings.is_embedded else None)
    out = sys.stdout.buffer
    if url is None and settings.is_embedded:
        return _direct(settings, text, fmt, params, out)
    if url is None:  # a server store: the same refusals of the text, and readonly=1
        try:
            check_text(text)
        except ChError as err:
            return _refused(err.body("unknown").strip(), err.status)
    target, user, password = _target(url or settings.store_dsn)
    query = {"database": settings.database, "default_format": fmt, "readonly": "1",
             **{f"param_{k}": v for k, v in params.items()}}
    request = urllib.request.Request(f"{target}?{urllib.parse.urlencode(query)}", data=text.encode(), method="POST")
    if user:
        request.add_header("X-ClickHouse-User", user)
        request.add_header("X-ClickHouse-Key", password)
    try:
        with urllib.request.urlopen(request, timeout=settings.sql_max_execution_s + 10) as resp:
            error = _copy(resp, out, resp.headers.get("X-ClickHouse-Exception-Tag"))
        out.flush()
        return _refused(error, from_engine(error).status) if error else 0
    except urllib.error.HTTPError as exc:
        return _refused(exc.read().decode(errors="replace").strip(), exc.code)
    except urllib.error.URLError as exc:
        raise RuntimeError(f"SQL interface at {target} unreachable: {exc.reason} (a worker whose "
                           "PHASEMETER_SQL_PORT was taken says so in its log)") from None


def _copy(resp, out, tag: str | None) -> str | None:
    """The answer to `out` as it comes; a streamed answer's last HOLD bytes
    wait for its end, where a server puts an error that came after it began
    (-> the error's text, the answer's bytes before it written)."""
    tail = b""
    while chunk := resp.read(CHUNK):
        tail += chunk
        if not tag:
            out.write(tail)
            tail = b""
        elif len(tail) > HOLD:
            out.write(tail[:-HOLD])
            tail = tail[-HOLD:]
    if not tag:
        return None
    from phasemeter.store.sql_guard import split_exception

    answer, error = split_exception(tail, tag)
    out.write(answer)
    return error


def _target(url: str) -> tuple[str, str, str]:
    parts = urllib.parse.urlsplit(url)
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    return (f"{parts.scheme}://{netloc}/", urllib.parse.unquote(parts.username or ""),
            urllib.parse.unquote(parts.password or ""))


def _refused(message: str, status: int) -> int:
    """The engine's refusal, in ClickHouse's words: exit 2 when the query is
    at fault (a 4xx), 1 otherwise."""
    print(f"phasemeter sql: {message}", file=sys.stderr)
    return 2 if 400 <= status < 500 else 1


def _direct(settings, text: str, fmt: str, params: dict, out) -> int:
    from urllib.parse import urlsplit

    from phasemeter.store.sql_engine import SqlEngine, caps_of
    from phasemeter.store.sql_guard import ChError
    from phasemeter.store.sql_request import SqlRequest

    path = Path(urlsplit(settings.store_dsn).path)
    if not path.is_dir():
        raise ArgError(f"no store at {path}: run `phasemeter migrate` to create it, or point "
                       "--data-dir / CLICKHOUSE_URL at an existing one")
    engine = SqlEngine(str(path), settings.database, caps_of(settings))
    try:
        answer = engine.run(SqlRequest(sql=text, default_format=fmt, params=params))
        out.write(answer.body)
        for piece in answer.rest or ():  # as the engine makes them
            out.write(piece)
    except ChError as err:
        out.flush()
        return _refused(engine.error_body(err).strip(), err.status)
    out.flush()
    return 0
