"""`PhasemeterMiddleware`: one generation event per LLM request proxied by a
Python ASGI gateway (Starlette, FastAPI), streaming (OpenAI-style SSE) or not.

It watches the ASGI messages go by and changes none of them: request body
chunks are observed as the app reads them (receive is wrapped, never drained
ahead of the app), response chunks are forwarded one by one as they come,
and SSE is parsed incrementally beside the stream, never by holding it back.

    t0           the request reaches the middleware
    first token  for SSE only: the first `data:` event whose choices[] have
                 a non-empty delta field (content, tool_calls, reasoning,
                 ...) or text
    end          the last body chunk (more_body false), or the disconnect

A response not announced as SSE (`text/event-stream`), a JSON answer say,
is a whole answer: recorded `streamed=False` with no first token, so its
row has null phases (docs/metrics.md). Its first body chunk is a piece of
the end of the generation, not a first token: timing it would count the
decode as prefill (prefill_tps = input / e2e). The content type decides,
not the chunking: a non-SSE body's chunks are the transport's (a proxy
forwards its upstream's reads), so a token stream in another framing
(NDJSON) is recorded the same way, its e2e and counts kept.

Decode stalls: for SSE, the data events from the first token to the last
one carrying content are the timed chunks (sse.py), and the event carries `chunks`,
`max_gap_s`, `gaps_over` and `gap_threshold_s` (the Meter's
`stall_threshold_s`), schema v2. A JSON response, or a stream without one
content event, carries none: nothing was timed per chunk.

Model from the request's `model`; input, cached and output tokens from the
response's `usage` (for streams: the final usage chunk, which OpenAI-style
servers send when the request asks `stream_options: {"include_usage": true}`).
Hooks can supply any of them. Status: ok; error when the app raises, answers
5xx or the stream carries an error object; cancelled when the client leaves
before the end. 4xx answers are not generations and are not recorded.

Cost on the app's path (bench/bench_asgi.py): the SSE reading of sse.py,
then one `Meter.record()` (a queue append). A failure of the middleware's
own bookkeeping is counted in `stats()`, never raised into the app.
"""

from __future__ import annotations

import asyncio
import collections
import json
import re
import time
from typing import Any, Callable

from phasemeter.producers.sender import Throttled
from phasemeter.stream_jobs.contract import DEFAULT_STALL_THRESHOLD_S, LABEL_FIELDS, MAX_TOKENS

# The response's SSE and JSON are read by sse.py; its limits are re-exported.
from .sse import MAX_CAPTURE_BYTES, TAIL_EVENTS, SseObserver, _loads

DEFAULT_PATHS = ("/v1/chat/completions", "/v1/completions")
MAX_REQUEST_BYTES = 4 << 20   # request body kept (as references to its chunks) to find `model`

# A top-level key in a JSON text: the quote closing `model` cannot be escaped,
# so inside a string this cannot match (short of a key that itself ends in
# an escaped quote and "model"). One match is the model; else a full parse.
_MODEL_KEY = re.compile(rb'"model"\s*:\s*("(?:[^"\\]|\\.)*")')  # matched only where bytes.find points
# How a disconnect surfaces as an exception: asyncio cancels, a closed
# generator exits; Starlette, uvicorn and trio name theirs (matched by name:
# this module imports no web framework). An OSError means a gone client only
# when the server's send raises it: from the app it is more likely the
# upstream engine's connection failing, an error.
_GONE_NAMES = frozenset({"ClientDisconnect", "ClientDisconnected", "Cancelled"})


def _is_gone(exc: BaseException, from_send: bool = False) -> bool:
    return (isinstance(exc, (asyncio.CancelledError, GeneratorExit)) or type(exc).__name__ in _GONE_NAMES
            or (from_send and isinstance(exc, OSError)))

Hook = Callable[["Exchange"], Any]


class Exchange(SseObserver):
    """What the middleware saw of one request. Hooks receive it at the end:
    `scope`, `request` (the parsed JSON body, or None), `status_code`,
    `response_headers`, `usage` (the response's usage object, or None),
    `finish_reason`, `data_events` (SSE data events seen, [DONE] excluded:
    content chunks plus the few that carry none), `chunks` / `gaps_over` /
    `gap_max` (the chunks timed, final once the response ended)."""

    __slots__ = ("scope", "status_code", "response_headers", "t0", "start", "t_end", "gone_at", "done",
                 "_body", "_size", "_request", "_resp")

    def __init__(self, scope: dict, stall_s: float = DEFAULT_STALL_THRESHOLD_S) -> None:
        SseObserver.__init__(self, stall_s)
        self.scope = scope
        self.t0, self.start = time.time(), time.monotonic()
        self.status_code: int | None = None
        self.response_headers: list = []
        self.t_end = self.gone_at = None
        self.done = False  # the event is decided (recorded or skipped)
        self._body: list[bytes] | None = []
        self._size = 0
        self._request: Any = False  # False: not parsed yet
        self._resp: bytearray | None = None

    @property
    def request(self) -> dict | None:
        if self._request is False:
            try:
                parsed = json.loads(b"".join(self._body)) if self._body else None
            except ValueError:  # not JSON
                parsed = None
            self._request = parsed if isinstance(parsed, dict) else None
            self._body = None
        return self._request

    def request_model(self):
        """The request's `model`. A long prompt makes a full parse cost more
        than everything else the middleware does, so an unambiguous key is
        read alone; anything unusual takes the full parse."""
        if self._request is False and self._body:
            raw, found = b"".join(self._body), []
            i = raw.find(b'"model"')  # a substring search is many times faster than a regex scan
            while i >= 0 and len(found) < 2:
                m = _MODEL_KEY.match(raw, i)
                if m:
                    found.append(m.group(1))
                i = raw.find(b'"model"', i + 7)
            if len(found) == 1:
                try:
                    return json.loads(found[0])
                except ValueError:
                    pass
        return (self.request or {}).get("model")

    # -- request side: observed as the app reads it --------------------------
    def on_receive(self, message: dict) -> None:
        kind = message.get("type")
        if kind == "http.request":
            body = self._body
            if body is not None and self._request is False:
                chunk = message.get("body", b"")
                self._size += len(chunk)
                if self._size <= MAX_REQUEST_BYTES:
                    body.append(chunk)  # a reference, not a copy: the app holds the same bytes
                else:
                    self._body = None  # too big to keep; the model must come from a hook
        elif kind == "http.disconnect" and self.t_end is None and self.gone_at is None:
            self.gone_at = time.monotonic()

    # -- response side: every message, before it is forwarded ----------------
    def on_send(self, message: dict, now: float) -> bool:
        """Observe one outgoing message; True when it ends the response."""
        kind = message.get("type")
        if kind == "http.response.body":
            body = message.get("body", b"")
            if body:
                if self._sse:
                    self._feed(body, now)
                elif self._sse is not None:  # None: announced as SSE, but it is not; no guessing
                    resp = self._resp  # a whole answer: kept for its usage, no first token
                    if resp is not None:
                        if len(resp) + len(body) <= MAX_CAPTURE_BYTES:
                            resp += body
                        else:
                            self._resp = None
            if not message.get("more_body", False):
                self.t_end = now
                if self._resp:
                    self._inspect(_loads(bytes(self._resp)))
                return True
        elif kind == "http.response.start":
            self.status_code = message.get("status")
            self.response_headers = message.get("headers") or []
            for name, value in self.response_headers:
                if name.lower() == b"content-type":
                    self._sse = value.lower().startswith(b"text/event-stream")
            if not self._sse:
                self._resp = bytearray()
        return False


def _none() -> None:
    return None


def _count(value) -> int | None:
    return value if type(value) is int and 0 <= value <= MAX_TOKENS else None


def _label(value, name: str) -> str | None:
    return value if isinstance(value, str) and 0 < len(value) <= LABEL_FIELDS[name] else None


class PhasemeterMiddleware:
    """Wrap an ASGI app: `app = PhasemeterMiddleware(app, meter)`.

    Only POST requests to `paths` are measured; everything else (other
    paths, websockets, lifespan) goes to the app untouched. Hooks take the
    `Exchange` and return a value, or None to fall back to the built-in
    source: `model`, `input_tokens`, `output_tokens`, `cached_input_tokens`,
    `request_id`, `replica`. A generation whose model or input tokens stay
    unknown, or that ends ok without an output token count, is skipped and
    counted in `stats()["skipped"]` (an invented count would skew the
    percentiles); a cancelled or failed one without a count records 0
    output tokens, as the emitter's own context manager does.
    """

    def __init__(self, app, meter, *, paths=DEFAULT_PATHS, model: Hook | None = None,
                 input_tokens: Hook | None = None, output_tokens: Hook | None = None,
                 cached_input_tokens: Hook | None = None, request_id: Hook | None = None,
                 replica: Hook | None = None) -> None:
        if isinstance(paths, str) or not all(isinstance(p, str) and p.startswith("/") for p in paths):
            raise ValueError(f"paths must be a collection of paths starting with '/', got {paths!r}")
        hooks = {"model": model, "input_tokens": input_tokens, "output_tokens": output_tokens,
                 "cached_input_tokens": cached_input_tokens, "request_id": request_id, "replica": replica}
        for name, hook in hooks.items():
            if hook is not None and not callable(hook):
                raise ValueError(f"hook {name} must be callable, got {hook!r}")
        self.app, self.meter, self._paths, self._hooks = app, meter, frozenset(paths), hooks
        self._recorded, self._errors, self._skipped = 0, 0, collections.Counter()
        self._warn = Throttled()
        # What a gap between content events must exceed to count in gaps_over.
        self._stall_s = getattr(meter, "stall_threshold_s", DEFAULT_STALL_THRESHOLD_S)

    def stats(self) -> dict:
        return {"recorded": self._recorded, "errors": self._errors, "skipped": dict(self._skipped)}

    async def __call__(self, scope, receive, send) -> None:
        if scope.get("type") != "http" or scope.get("method") != "POST" or scope.get("path") not in self._paths:
            await self.app(scope, receive, send)
            return
        ex = Exchange(scope, self._stall_s)

        async def tapped_receive():
            message = await receive()
            try:
                ex.on_receive(message)
            except Exception as exc:
                self._broken(ex, exc)
            return message

        async def tapped_send(message):
            now = time.monotonic()
            last = False
            if not ex.done:
                try:
                    last = ex.on_send(message, now)
                except Exception as exc:
                    self._broken(ex, exc)
            try:
                await send(message)
            except BaseException as exc:
                if ex.gone_at is None and _is_gone(exc, from_send=True):
                    ex.gone_at = now  # the server could not pass the chunk on: the client is gone
                raise
            if last:  # recorded now: what the app does after its response is not the generation
                self._finish(ex, None)

        try:
            await self.app(scope, tapped_receive, tapped_send)
        except BaseException as exc:
            self._finish(ex, exc)
            raise
        self._finish(ex, None)

    def _finish(self, ex: Exchange, exc: BaseException | None) -> None:
        if ex.done:
            return
        ex.done = True
        try:
            self._record(ex, exc)
        except Exception as err:  # a bad hook, a bug of ours: counted, never raised into the app
            self._errors += 1
            self._warn.warning("phasemeter asgi: event not recorded (%s: %s)", type(err).__name__, str(err)[:200])

    def _broken(self, ex: Exchange, exc: Exception) -> None:
        ex.done = True  # stop observing this request; its event would be wrong
        self._errors += 1
        self._warn.warning("phasemeter asgi: stopped observing a request (%s)", type(exc).__name__)

    def _outcome(self, ex: Exchange, exc: BaseException | None) -> tuple[str | None, float]:
        now = time.monotonic()
        if ex.gone_at is not None or (exc is not None and _is_gone(exc)):
            return "cancelled", ex.gone_at if ex.gone_at is not None else now
        if ex.t_end is None or exc is not None:
            return "error", now  # raised, or returned without finishing its response
        code = ex.status_code or 0
        if 400 <= code < 500:
            return None, ex.t_end  # refused by the gateway or the engine: no generation happened
        return ("error" if code >= 500 or ex.upstream_error else "ok"), ex.t_end

    def _hook(self, name: str, ex: Exchange, fallback: Callable[[], Any]):
        """The hook's answer if it gives one, else the built-in source's."""
        hook = self._hooks[name]
        value = None if hook is None else hook(ex)
        return fallback() if value is None else value

    def _record(self, ex: Exchange, exc: BaseException | None) -> None:
        ex.settle()
        status, t_end = self._outcome(ex, exc)
        if status is None:
            self._skipped["client_error"] += 1
            return
        usage = ex.usage or {}
        model = _label(self._hook("model", ex, ex.request_model), "model")
        n_in = _count(self._hook("input_tokens", ex, lambda: usage.get("prompt_tokens")))
        n_out = _count(self._hook("output_tokens", ex, lambda: usage.get("completion_tokens")))
        if n_out is None and status != "ok":
            n_out = 0
        ttft = None if ex.t_first is None or ex.t_first > t_end else ex.t_first - ex.start
        # A response started and not announced as SSE is a whole answer (module docstring).
        streamed = False if ex.status_code is not None and ex._sse is False else None
        missing = ("no_model" if model is None else "no_input_tokens" if n_in is None
                   else "no_output_tokens" if n_out is None
                   else "no_first_token" if n_out and ttft is None and streamed is None else None)
        if missing:
            self._skipped[missing] += 1
            self._warn.warning("phasemeter asgi: generation not recorded (%s); see docs/ingest/asgi.md", missing)
            return
        details = usage.get("prompt_tokens_details")
        cached = _count(self._hook("cached_input_tokens", ex,
                                   lambda: details.get("cached_tokens") if isinstance(details, dict) else None))
        e2e = t_end - ex.start
        # Chunk stats only from an SSE stream that had content (None: absent, not "smooth").
        count = ex.chunks if ex._sse and ttft is not None else 0
        self.meter.record(model=model, input_tokens=n_in, output_tokens=n_out, t0=ex.t0, ttft_s=ttft,
                          e2e_s=e2e,
                          cached_input_tokens=cached if cached is not None and cached <= n_in else None,
                          status=status, finish_reason=_label(ex.finish_reason, "finish_reason"),
                          request_id=_label(self._hook("request_id", ex, _none), "request_id"),
                          replica=_label(self._hook("replica", ex, _none), "replica"),
                          chunks=count or None, max_gap_s=min(ex.gap_max, e2e) if count > 1 else None,
                          gaps_over=ex.gaps_over if count else None,
                          gap_threshold_s=ex.stall_s if count else None, streamed=streamed)
        self._recorded += 1
