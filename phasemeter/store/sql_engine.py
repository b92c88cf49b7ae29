"""Runs a reader's SQL on the embedded store, read-only, with chDB producing
the bytes of the format asked.

Each query gets its own chDB connection handle on the store the process
already holds (chDB allows any number of handles to its one engine; opening
one costs ~0.2 ms, measured). On it, the worker's limits and the request's
output settings are set (and how reads are split across threads,
phasemeter.store.read_tuning), then `readonly=1`: from there the engine refuses
writes and any change of a setting. The checks of `sql_guard` run before the
query: on its text, then on the engine's parse of it (`EXPLAIN AST`). Setting
values and `{name:Type}` parameters are bound by the engine, never spliced.

A query on its own handle runs beside the sink's inserts (measured: an insert
took 7-9 ms while an 8-second scan ran on another handle).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

from phasemeter.store.client import quote_identifier
from phasemeter.store.native_revision import Unsupported, with_revision
from phasemeter.store.read_tuning import SPLIT_SMALL_READS
from phasemeter.store.sql_guard import ChError, check_ast, check_text, from_engine
from phasemeter.store.sql_request import SETTABLE, SqlRequest

# Every query of this interface carries this log_comment, so a stopping worker
# can cancel them all and none of the sink's (system.processes' Settings).
MARK = "phasemeter-sql"
# One assignment per settable name, bound to a parameter of the same name: the
# name is from a fixed allow-list, the value is bound. A query's settings go in
# one SET (0.15 ms for eight, against 0.6-0.75 ms as eight statements on a
# chDB handle, measured), readonly in its own after them.
_ASSIGN = {name: name + " = {" + name + ":String}" for name in SETTABLE | SPLIT_SMALL_READS.keys() | {"log_comment"}}
_CANCEL = "KILL QUERY WHERE Settings['log_comment'] = {v:String} SYNC"


# Formats whose blocks, each written whole, concatenate into one valid answer
# (no header or footer around the whole): sent block by block as chDB makes
# them, so the engine and the network work at once.
STREAMED = frozenset({"Native", "RowBinary", "TabSeparated", "TabSeparatedRaw", "CSV", "JSONEachRow",
                      "JSONCompactEachRow"})


@dataclass(frozen=True)
class Answer:
    body: bytes | memoryview  # the whole answer, or a streamed one's first block
    format: str
    summary: dict
    rest: Iterator | None = None  # a streamed answer's other blocks
    keep: object = None  # the engine's result and buffer that `body` views (not copied)


@dataclass(frozen=True)
class ServerInfo:
    version: str
    timezone: str
    table_functions: frozenset
    output_formats: dict  # lower-case name -> the engine's spelling
    # The store's views, lower-case `database.name`: parameterized views are
    # called like table functions. Only a migration makes one, and migrations
    # do not run while a worker owns the store, so they are read once.
    views: frozenset = frozenset()


class SqlEngine:
    def __init__(self, path: str, database: str, caps: dict):
        self.path = os.path.realpath(path)
        self.database = database
        self.caps = caps  # setting name -> the worker's limit
        self._info: ServerInfo | None = None
        self._info_lock = threading.Lock()

    def _handle(self):
        import chdb  # the engine the worker already loaded; heavy for the CLI

        return chdb.connect(self.path)

    @property
    def info(self) -> ServerInfo:
        with self._info_lock:
            if self._info is None:
                handle = self._handle()
                try:
                    def col(sql):
                        return handle.query(sql, "TabSeparatedRaw").bytes().decode().splitlines()
                    version, timezone = col("SELECT version(), timezone()")[0].split("\t")
                    formats = col("SELECT name FROM system.formats WHERE is_output")
                    views = col("SELECT lower(database || '.' || name) FROM system.tables WHERE engine = 'View' "
                                "AND database NOT IN ('system', 'information_schema', 'INFORMATION_SCHEMA')")
                    self._info = ServerInfo(version, timezone,
                                            frozenset(col("SELECT name FROM system.table_functions")),
                                            {f.lower(): f for f in formats}, frozenset(views))
                finally:
                    handle.close()
            return self._info

    def error_body(self, err: ChError) -> str:
        return err.body(self._info.version if self._info else "unknown")

    def cancel_all(self) -> None:
        """Cancel every query of this interface still running (a stopping
        worker does not wait out a reader's scan; measured: 119 s before)."""
        handle = self._handle()
        try:
            handle.query(_CANCEL, "TabSeparated", params={"v": MARK})
        finally:
            handle.close()

    def run(self, request: SqlRequest) -> Answer:
        """The query's answer in its format, or a ChError (ClickHouse's form).
        A streamed answer holds its first piece; `rest` yields the others and
        closes the handle when done (or when closed)."""
        check_text(request.sql)
        started = time.perf_counter_ns()
        handle = None
        try:
            info = self.info
            handle = self._handle()
            fmt = self._prepare(handle, request, info)
            if fmt in STREAMED and not request.wait_end:
                pieces, handle = self._pieces(handle, request, fmt), None  # the pieces close it
                return Answer(next(pieces, b""), fmt, _summary(None, started), pieces)
            result = handle.query(request.sql, fmt, params=request.params)
            buffer = result.get_memview()
            body = _layout(buffer.view(), request, fmt)
            return Answer(body, fmt, _summary(result, started), None, (result, buffer))
        except ChError:
            raise
        except ValueError as exc:  # a database name the store cannot hold
            raise ChError("UNKNOWN_DATABASE", str(exc), code=81) from None
        except Exception as exc:  # the engine's own refusal: its code and message
            raise from_engine(str(exc)) from None
        finally:
            if handle is not None:
                handle.close()

    def _prepare(self, handle, request: SqlRequest, info: ServerInfo) -> str:
        """The read tuning, limits, output settings, then readonly on the
        handle; the parse checked; -> the engine's name of the answer's format.
        The tuning is the interface's own (a reader cannot send it, all being
        read-only): the rollup's reads use both cores here as in-process."""
        settings = {name: str(value) for name, value in (SPLIT_SMALL_READS | self.caps | request.settings).items()}
        settings["log_comment"] = MARK
        handle.query("SET " + ", ".join(_ASSIGN[name] for name in settings), "TabSeparated", params=settings)
        handle.query("SET readonly = 1", "TabSeparated")
        # An identifier cannot be bound: quote_identifier refuses all but letters, digits and _.
        handle.query("USE " + quote_identifier(request.database or self.database), "TabSeparated")
        # The reader's own text, already one statement (check_text): the engine only parses it here.
        ast = handle.query("EXPLAIN AST " + request.sql, "TabSeparatedRaw", params=request.params)
        fmt = check_ast(ast.bytes().decode(), info.table_functions, info.views,
                        request.database or self.database) or request.default_format
        if fmt.lower() not in info.output_formats:
            raise ChError("UNKNOWN_FORMAT", f"Unknown output format {fmt}")
        return info.output_formats[fmt.lower()]

    def _pieces(self, handle, request: SqlRequest, fmt: str):
        stream = None
        try:
            stream = handle.send_query(request.sql, fmt, params=request.params)
            for result in stream:
                piece = result.bytes()
                if piece:
                    yield _layout(piece, request, fmt)
        except ChError:
            raise
        except Exception as exc:
            raise from_engine(str(exc)) from None
        finally:
            if stream is not None:
                stream.close()
            handle.close()


def _layout(body, request: SqlRequest, fmt: str):
    if fmt != "Native" or not request.protocol_revision:
        return body
    try:
        return with_revision(body, request.protocol_revision)
    except Unsupported as exc:
        raise ChError("NOT_IMPLEMENTED", str(exc), code=48) from None


def _summary(result, started: int) -> dict:
    """X-ClickHouse-Summary: what the query read (chDB's storage_rows_read;
    its rows_read() is what it returned). A streamed answer's headers go out
    with its first block, before the totals are known; `wait_end_of_query=1`
    asks for the whole answer first, and its totals."""
    read = (result.storage_rows_read(), result.storage_bytes_read(), result.rows_read()) if result else (0, 0, 0)
    return {"read_rows": str(read[0]), "read_bytes": str(read[1]), "written_rows": "0", "written_bytes": "0",
            "total_rows_to_read": str(read[0]), "result_rows": str(read[2]),
            "elapsed_ns": str(time.perf_counter_ns() - started)}


def caps_of(settings) -> dict:
    """The worker's limits, by ClickHouse setting name."""
    return {"max_execution_time": settings.sql_max_execution_s, "max_memory_usage": settings.sql_max_memory_bytes,
            "max_result_rows": settings.sql_max_result_rows, "max_result_bytes": settings.sql_max_result_bytes,
            "max_threads": settings.sql_max_threads}
