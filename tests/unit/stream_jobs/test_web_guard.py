"""The web port's guard as configured from settings: which Host names pass,
and the URL the CLI is told for a worker on a wildcard bind passes them."""

from __future__ import annotations

from phasemeter.callers import allowed_names, host_allowed
from phasemeter.cli.commands import local_url
from phasemeter.settings import Settings
from phasemeter.stream_jobs import web_guard


def test_application_options_hold_one_middleware_and_a_body_limit():
    opts = web_guard.application_options(Settings())
    assert len(opts["middlewares"]) == 1 and opts["client_max_size"] == web_guard.MAX_BODY_BYTES


def test_the_url_the_cli_is_told_is_one_the_port_answers():
    assert len(["127.0.0.1", "0.0.0.0", "::", "::1", "pm.internal"]) == 5
    for bind in ("127.0.0.1", "0.0.0.0", "::", "::1", "pm.internal"):
        s = Settings.from_env({"PHASEMETER_WEB_HOST": bind, "PHASEMETER_WEB_PORT": "6066"})
        url = local_url(s)
        host = url.split("//", 1)[1]
        assert host_allowed(host, allowed_names(s.web_host, s.allowed_hosts)), (bind, url)


def _serve(middleware, check):
    """Run `check(base_url)` against a real aiohttp server on a free port with
    `middleware` and three routes: GET /x, a slow GET /slow, POST /cmd and /sql."""
    import asyncio

    from aiohttp import web
    from aiohttp.test_utils import TestServer

    release = asyncio.Event()

    async def x(request):
        return web.json_response({"ok": True})

    async def slow(request):
        await release.wait()
        return web.json_response({"ok": True})

    async def cmd(request):
        return web.json_response(await request.json())

    async def main():
        app = web.Application(middlewares=[middleware])
        app.router.add_get("/x", x)
        app.router.add_get("/slow", slow)
        app.router.add_post("/cmd", cmd)
        app.router.add_post("/sql", x)
        server = TestServer(app, host="127.0.0.1")
        await server.start_server()
        try:
            await check(server, release)
        finally:
            release.set()
            await server.close()

    asyncio.run(main())


def test_simple_posts_are_refused_on_every_route_and_json_posts_run():
    import aiohttp

    mw = web_guard.guard(frozenset({"127.0.0.1"}))

    async def check(server, release):
        async with aiohttp.ClientSession() as s:
            for path in ("/sql", "/cmd"):  # the SQL interface is a listener of its own (sql_http.py)
                async with s.post(server.make_url(path), data=b"SELECT 1",
                                  headers={"Content-Type": "text/plain"}) as r:
                    assert r.status == 415, (path, r.status)
            async with s.post(server.make_url("/cmd"), json={"a": 1}) as r:
                assert r.status == 200 and await r.json() == {"a": 1}
            async with s.post(server.make_url("/cmd"), data=b"[" * 100_000,
                              headers={"Content-Type": "application/json"}) as r:
                assert r.status == 400 and "nested" in (await r.json())["error"]

    _serve(mw, check)


def test_over_the_bound_is_503_at_once_and_a_half_sent_body_408():
    import asyncio

    import aiohttp

    mw = web_guard.guard(frozenset({"127.0.0.1"}), max_in_flight=2, body_read_s=0.3)

    async def check(server, release):
        async with aiohttp.ClientSession() as s:
            held = [asyncio.ensure_future(s.get(server.make_url("/slow"))) for _ in range(2)]
            for _ in range(200):  # until both hold their slot
                async with s.get(server.make_url("/x")) as r:
                    if r.status == 503:
                        assert r.headers["Retry-After"] == "1"
                        break
                await asyncio.sleep(0.01)
            else:
                raise AssertionError("never refused")
            release.set()
            assert len(held) == 2
            for f in held:
                assert (await f).status == 200
            async with s.get(server.make_url("/x")) as r:
                assert r.status == 200
        reader, writer = await asyncio.open_connection(server.host, server.port)
        writer.write(b"POST /cmd HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{")
        await writer.drain()
        answer = await asyncio.wait_for(reader.read(), 30)  # to EOF: the server closes it
        assert answer.startswith(b"HTTP/1.1 408")
        writer.close()

    _serve(mw, check)
