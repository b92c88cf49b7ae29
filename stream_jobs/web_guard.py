"""Who may call the worker's web port, and what one caller may cost it.

One aiohttp middleware runs before every route, so a route added later is covered too; docs/live.md
("Security") tables its checks. The SQL interface, whose clients send plain POSTs, has its own listener
(sql_http.py).
"""

from __future__ import annotations

import asyncio

from aiohttp import web

from phasemeter.callers import allowed_names, host_allowed, is_simple_request

# Answered from memory on the event loop, in one step: not counted, so a probe never takes a busy worker for dead.
MONITORING: frozenset[str] = frozenset({"/health", "/metrics"})
MAX_IN_FLIGHT = 16  # each request may hold a thread of the executor and the store's lock
RETRY_AFTER_S = 1
BODY_READ_S = 10.0
IDLE_S = 15.0
# A served command carries the operator's --rules/--slos files: small text.
MAX_BODY_BYTES = 1 << 20


def _refuse(status: int, message: str, **headers) -> web.Response:
    return web.json_response({"error": message}, status=status, headers=headers or None)


def guard(allowed: frozenset[str], max_in_flight: int = MAX_IN_FLIGHT, body_read_s: float = BODY_READ_S):
    """The middleware for a port answering the `allowed` Host names."""
    in_flight = 0  # one event loop: a plain counter, no lock

    @web.middleware
    async def middleware(request: web.Request, handler):
        nonlocal in_flight
        if not host_allowed(request.headers.get("Host"), allowed):
            return _refuse(403, f"Host {request.headers.get('Host')!r} is not a name this worker serves "
                                "(loopback, its bind address, PHASEMETER_ALLOWED_HOSTS)")
        if (request.method not in ("GET", "HEAD")
                and is_simple_request(request.method, request.headers.get("Content-Type"))):
            return _refuse(415, f"{request.method} needs Content-Type: application/json "
                                "(a form or text/plain is what any web page may send)")
        resource = request.match_info.route.resource  # None when no route matches: counted
        counted = resource is None or resource.canonical not in MONITORING
        if counted and in_flight >= max_in_flight:
            return _refuse(503, f"busy: {max_in_flight} requests in progress", **{"Retry-After": str(RETRY_AFTER_S)})
        in_flight += counted
        try:
            if request.body_exists:
                try:  # read whole here, so a half-sent body costs no more than BODY_READ_S
                    await asyncio.wait_for(request.read(), body_read_s)
                except TimeoutError:
                    # Closed now: aiohttp would otherwise linger up to 10 s more for the unread body.
                    resp = _refuse(408, f"the request body did not arrive within {body_read_s:g}s")
                    resp.force_close()
                    await resp.prepare(request)
                    await resp.write_eof()
                    request.transport.close()
                    return resp
            try:
                return await handler(request)
            except RecursionError:
                return _refuse(400, "bad request: the body is nested too deeply to decode")
        finally:
            in_flight -= counted

    return middleware


def application_options(settings) -> dict:
    """Faust's `web_application_options`: aiohttp Application's arguments."""
    allowed = allowed_names(settings.web_host, settings.allowed_hosts)
    return {"middlewares": [guard(allowed)], "client_max_size": MAX_BODY_BYTES}
