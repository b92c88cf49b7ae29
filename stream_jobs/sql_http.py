"""The worker's read-only ClickHouse HTTP interface over the store it owns (docs/sql.md).

A listener of its own at `/`, as a ClickHouse server serves it, so BI tools, drivers and `curl` connect
unchanged. Queries run on threads of their own (never the loop, never the sink's lock).
"""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import secrets
import socket
import uuid
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit

from aiohttp import web

from phasemeter.callers import allowed_names, host_allowed, is_loopback
from phasemeter.settings import Settings
from phasemeter.store.sql_compress import Encoder
from phasemeter.store.sql_engine import SqlEngine, caps_of
from phasemeter.store.sql_guard import ChError, exception_block
from phasemeter.store.sql_request import parse
from phasemeter.timeparse import ArgError

log = logging.getLogger("phasemeter.sql")
WRITE_SLICE = 1 << 20


def check_bind(settings: Settings) -> None:
    """Bound beyond loopback, the interface asks for credentials: without a password, the worker does not start."""
    if not is_loopback(settings.web_host) and not settings.sql_password:
        raise ArgError(f"PHASEMETER_WEB_HOST={settings.web_host!r} is not loopback: set PHASEMETER_SQL_PASSWORD "
                       "(and PHASEMETER_SQL_USER) for the SQL interface, or bind to 127.0.0.1")


def reserve(settings: Settings) -> socket.socket | None:
    """The socket, bound before worker.json names it (phasemeter.query.remote): readers never reach a port another
    process holds. None (logged) when it cannot be bound: ingest goes on, and readers are told there is no SQL."""
    check_bind(settings)
    try:
        family, _, _, _, address = socket.getaddrinfo(settings.web_host, settings.sql_port,
                                                      type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0]
        return socket.create_server(address[:2], family=family, backlog=128)
    except OSError as exc:
        log.error("SQL interface not served: PHASEMETER_SQL_PORT=%s on %s: %s", settings.sql_port,
                  settings.web_host, exc)
        return None


class SqlListener:
    def __init__(self, settings: Settings):
        self.settings = settings
        self.engine = SqlEngine(urlsplit(settings.store_dsn).path, settings.database, caps_of(settings))
        self.allowed = allowed_names(settings.web_host, settings.allowed_hosts)
        self.open = is_loopback(settings.web_host)  # on loopback no credentials are asked
        self.pool = ThreadPoolExecutor(settings.sql_concurrency, thread_name_prefix="phasemeter-sql")
        self.turns = asyncio.Semaphore(settings.sql_concurrency)
        self.runner: web.AppRunner | None = None
        self.stopping = False
        self.running = 0  # queries holding a turn

    async def start(self, sock: socket.socket) -> None:
        """Serve on `sock`, bound by `reserve`."""
        app = web.Application(client_max_size=16 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self.handle)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        await web.SockSite(self.runner, sock).start()
        log.info("SQL interface at %s", self.settings.sql_url)

    async def stop(self) -> None:
        """New queries are refused, running ones cancelled, then the listener closes."""
        self.stopping = True
        if self.running:
            try:
                await asyncio.get_running_loop().run_in_executor(None, self.engine.cancel_all)
            except Exception as exc:  # the store is gone already: nothing runs on it
                log.warning("SQL interface: cancelling queries at stop: %s", exc)
        if self.runner is not None:
            await self.runner.cleanup()
        self.pool.shutdown(wait=False, cancel_futures=True)

    def _error(self, err: ChError) -> web.Response:
        return web.Response(status=err.status, text=self.engine.error_body(err), headers={
            "X-ClickHouse-Exception-Code": str(err.code), "Content-Type": "text/plain; charset=UTF-8"})

    def _authorized(self, user: str, password: str) -> bool:
        return self.open or (hmac.compare_digest(user.encode(), self.settings.sql_user.encode())
                             and hmac.compare_digest(password.encode(), self.settings.sql_password.encode()))

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if not host_allowed(request.headers.get("Host"), self.allowed):
            return self._error(ChError("ACCESS_DENIED", "Host not served by this listener (PHASEMETER_ALLOWED_HOSTS)"))
        if request.path == "/ping" or (request.path == "/" and request.method in ("GET", "HEAD")
                                       and "query" not in request.query):
            return web.Response(text="Ok.\n")
        if request.path != "/" or request.method not in ("GET", "POST"):
            return self._error(ChError("UNKNOWN_EXCEPTION", f"No handler for {request.method} {request.path}",
                                       code=1002))
        try:
            body = (await request.read()).decode() if request.method == "POST" else ""
            headers = {k.lower(): v for k, v in request.headers.items()}
            req = parse(list(request.query.items()), body, headers, self.engine.caps)
            if not self._authorized(req.user, req.password):
                raise ChError("AUTHENTICATION_FAILED", f"{req.user or 'default'}: Authentication failed: password is "
                                                       "incorrect, or there is no user with such name")
            loop = asyncio.get_running_loop()
            if self.stopping:
                raise ChError("ABORTED", "The worker is stopping", code=236)
            try:
                await asyncio.wait_for(self.turns.acquire(), self.settings.sql_max_execution_s)
            except asyncio.TimeoutError:
                raise ChError("TOO_MANY_SIMULTANEOUS_QUERIES", "Too many simultaneous queries") from None
            self.running += 1
            try:
                answer = await loop.run_in_executor(self.pool, self.engine.run, req)
            except BaseException:
                self.running -= 1
                self.turns.release()
                raise
        except UnicodeDecodeError:
            return self._error(ChError("SYNTAX_ERROR", "The query is not UTF-8"))
        except ChError as err:
            return self._error(err)
        try:
            return await self._send(request, req, answer)
        finally:
            if answer.rest is not None:  # a stream left early (the client went away): its handle closes
                await loop.run_in_executor(self.pool, answer.rest.close)
            self.running -= 1
            self.turns.release()

    async def _send(self, request: web.Request, req, answer) -> web.StreamResponse:
        loop = asyncio.get_running_loop()
        encoder = Encoder(req.native_compression, request.headers.get("Accept-Encoding", "") if req.compression
                          else None)
        headers = {"X-ClickHouse-Format": answer.format, "X-ClickHouse-Query-Id": req.query_id or str(uuid.uuid4()),
                   "X-ClickHouse-Timezone": self.engine.info.timezone,
                   "X-ClickHouse-Summary": json.dumps(answer.summary),
                   "X-ClickHouse-Server-Display-Name": "phasemeter",
                   "X-ClickHouse-Database": req.database or self.settings.database,
                   "Content-Type": "application/octet-stream"}
        if encoder.encoding:
            headers["Content-Encoding"] = encoder.encoding
        response = web.StreamResponse(headers=headers)
        if answer.rest is None:
            body = await loop.run_in_executor(self.pool, _whole, encoder, answer.body)
            response.content_length = len(body)
            await response.prepare(request)
            await _write(response, body)
        else:
            piece = await loop.run_in_executor(self.pool, encoder.chunk, answer.body)
            response.enable_chunked_encoding()
            response.headers["X-ClickHouse-Exception-Tag"] = tag = secrets.token_hex(8)
            await response.prepare(request)
            await self._stream(response, piece, answer.rest, encoder, tag)
        await response.write_eof()
        return response

    async def _stream(self, response, piece, rest, encoder: Encoder, tag: str) -> None:
        """Each block is sent while the engine makes the next (bench_sql_http, read by curl: 0.76-0.94x the
        in-process time, against 0.89-1.05x pulling the blocks in turn)."""
        loop = asyncio.get_running_loop()
        while piece is not None:
            ahead = loop.run_in_executor(self.pool, _next_encoded, rest, encoder)
            try:
                await _write(response, piece)
            finally:  # the client went away: the block in the making ends before the stream closes
                if not ahead.done():
                    await asyncio.wait([ahead])
            try:
                piece = await ahead
            except ChError as err:  # the headers are gone: the error ends the body, as a server writes it
                await _write(response, encoder.chunk(exception_block(self.engine.error_body(err), tag)))
                break
        await _write(response, encoder.end())


def _whole(encoder: Encoder, body):
    encoded, tail = encoder.chunk(body), encoder.end()
    return bytes(encoded) + tail if tail else encoded


def _next_encoded(pieces, encoder: Encoder):
    piece = next(pieces, None)
    return None if piece is None else encoder.chunk(piece)


async def _write(response: web.StreamResponse, body) -> None:
    """In slices: asyncio's transport (Python < 3.12) keeps unsent data in one bytearray and deletes from its front
    after each send, so a 40 MB write moved gigabytes (40 MB read on loopback: 120-370 ms, 24-138 ms in slices)."""
    view = memoryview(body)
    for start in range(0, len(view), WRITE_SLICE):
        await response.write(view[start:start + WRITE_SLICE])
