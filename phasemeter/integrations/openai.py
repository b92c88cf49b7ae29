"""Time the OpenAI SDK's own calls: `instrument(client, meter)`.

Wraps `client.chat.completions.create` and `client.completions.create` of one
`openai.OpenAI` or `openai.AsyncOpenAI` instance (docs/ingest/openai.md). The
caller gets the SDK's own objects back: the same `ChatCompletion`, and the same
`Stream` / `AsyncStream` instance, whose private iterator is swapped for one
that watches the chunks go by. `isinstance`, `.response`, `.close()` and the
context manager therefore behave exactly as before.

One generation event per call goes through `Meter.record()` (a few µs, never
blocking). Nothing here raises into the caller's path: the caller's own
exceptions pass through unchanged; our own failures are counted in `stats`.

This module is `phasemeter.integrations.openai`; `import openai` is absolute
and imports the real SDK, not this file.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import threading
import time

import openai

log = logging.getLogger("phasemeter.integrations.openai")

# The SDK marks its with_raw_response / with_streaming_response calls with
# this header. Those return raw HTTP responses the caller parses itself: we
# leave them alone rather than change a stream they read byte by byte.
_RAW_HEADER = "x-stainless-raw-response"
STATS = ("recorded", "estimated_output_tokens", "estimated_input_tokens", "skipped_no_usage",
         "first_token_unseen", "unmeasured", "internal_errors")


class Instrumentation:
    """What `instrument()` returns: counters, and `uninstrument()`."""

    def __init__(self, client, meter, *, count_tokens=None, include_usage: bool = True,
                 replica: str | None = None) -> None:
        self.client, self.meter, self.count_tokens = client, meter, count_tokens
        self.include_usage, self.replica = include_usage, replica
        self._stats = dict.fromkeys(STATS, 0)
        self._lock = threading.Lock()
        self._patched: list = []
        self._warned = False

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot. `recorded`: events handed to the Meter;
        `estimated_output_tokens`: of those, how many counted output chunks
        because no usage arrived; `estimated_input_tokens`: how many took
        input_tokens from `count_tokens`; `skipped_no_usage`: calls not
        recorded because input_tokens was unknown; `first_token_unseen`:
        usage said tokens came out but no chunk carried one (ttft_s = e2e_s);
        `unmeasured`: raw-response calls passed through untouched;
        `internal_errors`: our own bugs, swallowed."""
        with self._lock:
            return dict(self._stats)

    def count(self, key: str) -> None:
        with self._lock:  # per call, not per chunk: the lock costs nothing that matters
            self._stats[key] += 1
        if key == "skipped_no_usage" and not self._warned:
            self._warned = True
            log.warning("phasemeter: a call without usage was not recorded (input tokens unknown); "
                        "pass count_tokens= to instrument() to record such calls")

    def uninstrument(self) -> None:
        for resource in self._patched:
            vars(resource).pop("create", None)  # the class's own method shows through again
        self._patched.clear()

    # -- one call ------------------------------------------------------------
    def begin(self, chat: bool, kwargs: dict) -> Call | None:
        """A Call for this request, or None to pass it through untouched."""
        try:
            return self._begin(chat, kwargs)
        except Exception:
            self.count("internal_errors")
            return None

    def _begin(self, chat: bool, kwargs: dict) -> Call | None:
        headers = kwargs.get("extra_headers")
        if isinstance(headers, dict) and any(str(k).lower() == _RAW_HEADER for k in headers):
            self.count("unmeasured")
            return None
        hide = False
        if kwargs.get("stream") and self.include_usage:
            opts = kwargs.get("stream_options")
            if not (isinstance(opts, dict) and opts.get("include_usage")):
                # Ask for the usage chunk; the caller did not, so it never sees it.
                opts = dict(opts) if isinstance(opts, dict) else {}
                opts["include_usage"] = True
                kwargs = {**kwargs, "stream_options": opts}
                hide = True
        return Call(self, chat, kwargs, hide)

    def track(self, call: Call, result):
        """Attach `call` to what create() returned; return the caller's object."""
        try:
            return self._track(call, result)
        except Exception:
            call.drop()
            self.count("internal_errors")
            return result

    def _track(self, call: Call, result):
        if isinstance(result, openai.Stream):
            return self._track_stream(call, result, _iterate, _close_hook)
        if isinstance(result, openai.AsyncStream):
            return self._track_stream(call, result, _aiterate, _aclose_hook)
        if hasattr(result, "choices") and hasattr(result, "model"):
            call.whole(result)  # ChatCompletion / Completion
        else:
            call.drop()
            self.count("unmeasured")
        return result

    def _track_stream(self, call: Call, stream, iterate, close_hook):
        inner = getattr(stream, "_iterator", None)
        if inner is None:  # an SDK without the attribute: measure nothing, break nothing
            call.drop()
            self.count("unmeasured")
            return stream
        call.t_last = time.monotonic()  # the response has begun: what a stream dropped unread got to
        stream._iterator = iterate(call, inner)
        # An instance attribute shadows the method, also for the SDK's own
        # __exit__ / aclose(), which call self.close().
        stream.close = close_hook(call, stream.close)
        return stream


class Call:
    """One request being timed. `observe()` runs once per chunk: keep it lean.

    Times are time.monotonic(); t0 (epoch) only places the event. The first
    token is the first chunk carrying output (text, a tool call, a refusal or
    reasoning), not the role-only opening chunk. The end is the last chunk's
    arrival, or the moment of an error or `close()`.
    """

    __slots__ = ("inst", "chat", "kwargs", "hide_usage", "t0", "start", "t_first", "t_last",
                 "model", "usage", "finish_reason", "n_out", "n_finished", "_once")

    def __init__(self, inst: Instrumentation, chat: bool, kwargs: dict, hide_usage: bool) -> None:
        self.inst, self.chat, self.kwargs, self.hide_usage = inst, chat, kwargs, hide_usage
        self.t0 = time.time()
        self.start = self.t_last = time.monotonic()
        self.t_first = self.model = self.usage = self.finish_reason = None
        self.n_out = self.n_finished = 0
        self._once = [True]  # list.pop() is atomic: end() records exactly once, from any thread

    def observe(self, chunk) -> bool:
        """Note one chunk; True if it is the usage chunk we asked for (hidden)."""
        now = self.t_last = time.monotonic()
        try:
            usage = chunk.usage
            if usage is not None:
                self.usage = usage
            if self.model is None:
                self.model = chunk.model
            choices = chunk.choices  # None from some servers
            if not choices:
                return usage is not None and self.hide_usage
            for choice in choices:
                if choice.finish_reason is not None:
                    self.finish_reason = choice.finish_reason
                    self.n_finished += 1
                if (_carries_output(choice.delta) if self.chat else choice.text):
                    self.n_out += 1
                    if self.t_first is None:
                        self.t_first = now
        except Exception:  # an odd chunk must not break the caller's loop
            self.inst.count("internal_errors")
        return False

    def whole(self, response) -> None:
        """A non-streaming response: the first token arrives with the last one."""
        try:
            self.t_last = self.t_first = time.monotonic()
            self.model, self.usage = response.model, response.usage
            choices = response.choices or ()
            self.finish_reason = choices[0].finish_reason if choices else None
        except Exception:
            self.inst.count("internal_errors")
        self.end("ok")

    def drop(self) -> None:
        if self._once:
            self._once.clear()

    def end(self, status: str, t_end: float | None = None) -> None:
        """Record once. t_end None: the last chunk's time (a stream collected
        unfinished: when the caller stopped is unknown, the last chunk is the
        best lower bound)."""
        try:
            self._once.pop()
        except IndexError:
            return
        try:
            self._record(status, self.t_last if t_end is None else t_end)
        except Exception:
            self.inst.count("internal_errors")

    def __del__(self) -> None:
        # A stream dropped before its first read: no generator code ever ran.
        if getattr(self, "_once", None):
            self.end("cancelled")

    def _record(self, status: str, t_end: float) -> None:
        inst, usage = self.inst, self.usage
        n = self.kwargs.get("n")
        if status == "cancelled" and self.n_finished >= (n if isinstance(n, int) and n > 1 else 1):
            status = "ok"  # every choice had finished; only the trailing usage chunk went unread
        n_in = cached = None
        if usage is not None:
            n_in, n_out = usage.prompt_tokens, usage.completion_tokens
            details = getattr(usage, "prompt_tokens_details", None)
            cached = getattr(details, "cached_tokens", None) if details is not None else None
        if not isinstance(n_in, int) or isinstance(n_in, bool):
            n_in = inst.count_tokens(self.kwargs) if inst.count_tokens is not None else None
            if not isinstance(n_in, int) or n_in < 0:
                inst.count("skipped_no_usage")
                return
            inst.count("estimated_input_tokens")
        if usage is None or not isinstance(n_out, int):
            n_out = self.n_out
            if n_out:
                inst.count("estimated_output_tokens")
        if not isinstance(cached, int) or not 0 <= cached <= n_in:
            cached = None
        e2e = t_end - self.start
        ttft = None if self.t_first is None else min(self.t_first - self.start, e2e)
        if ttft is None and n_out > 0:
            inst.count("first_token_unseen")
            ttft = e2e
        model = self.model if isinstance(self.model, str) and self.model else self.kwargs.get("model")
        model = str(model or "unknown")[:200]
        reason = self.finish_reason if isinstance(self.finish_reason, str) and self.finish_reason else None
        inst.meter.record(model=model, input_tokens=n_in, output_tokens=n_out, t0=self.t0, ttft_s=ttft,
                          e2e_s=e2e, cached_input_tokens=cached, status=status,
                          finish_reason=None if reason is None else reason[:64], replica=inst.replica)
        inst.count("recorded")


def _carries_output(delta) -> bool:
    if delta is None:
        return False
    if delta.content or delta.tool_calls or delta.function_call or delta.refusal:
        return True
    # Reasoning models (vLLM, DeepSeek, ...) stream thoughts in an extra field
    # first: those are output tokens too, and end the prefill.
    extra = delta.model_extra
    return bool(extra) and bool(extra.get("reasoning_content") or extra.get("reasoning"))


# -- the streams -----------------------------------------------------------
def _status(exc: BaseException) -> str:
    return "cancelled" if isinstance(exc, (GeneratorExit, asyncio.CancelledError, KeyboardInterrupt)) else "error"


def _iterate(call: Call, inner):
    observe = call.observe
    try:
        for chunk in inner:
            if not observe(chunk):
                yield chunk
    except BaseException as exc:  # GeneratorExit: closed or collected before the end
        call.end(_status(exc), time.monotonic() if not isinstance(exc, GeneratorExit) else None)
        raise
    call.end("ok")


async def _aiterate(call: Call, inner):
    observe = call.observe
    try:
        async for chunk in inner:
            if not observe(chunk):
                yield chunk
    except BaseException as exc:
        call.end(_status(exc), time.monotonic() if not isinstance(exc, GeneratorExit) else None)
        raise
    call.end("ok")


def _close_hook(call: Call, close):
    def closed():
        call.end("cancelled", time.monotonic())  # a no-op once the stream has ended
        return close()
    return closed


def _aclose_hook(call: Call, close):
    async def closed():
        call.end("cancelled", time.monotonic())
        return await close()
    return closed


# -- patching ----------------------------------------------------------------
def _wrap_sync(inst: Instrumentation, chat: bool, create):
    @functools.wraps(create)
    def create_measured(*args, **kwargs):
        call = inst.begin(chat, kwargs)
        if call is None:
            return create(*args, **kwargs)
        try:
            result = create(*args, **call.kwargs)
        except BaseException as exc:
            call.end(_status(exc), time.monotonic())
            raise
        return inst.track(call, result)
    create_measured.__phasemeter__ = inst
    return create_measured


def _wrap_async(inst: Instrumentation, chat: bool, create):
    @functools.wraps(create)
    async def create_measured(*args, **kwargs):
        call = inst.begin(chat, kwargs)
        if call is None:
            return await create(*args, **kwargs)
        try:
            result = await create(*args, **call.kwargs)
        except BaseException as exc:
            call.end(_status(exc), time.monotonic())
            raise
        return inst.track(call, result)
    create_measured.__phasemeter__ = inst
    return create_measured


def instrument(client, meter, *, count_tokens=None, include_usage: bool = True,
               replica: str | None = None) -> Instrumentation:
    """Measure every `chat.completions.create` and `completions.create` of
    `client` (an `openai.OpenAI` or `openai.AsyncOpenAI`) into `meter`.

    `count_tokens(request_kwargs) -> int | None` gives input_tokens when no
    usage arrives (a failed or cancelled call, a server that ignores
    `stream_options`); without it such calls are counted, not recorded.
    `include_usage=False` stops asking servers for the usage chunk (for one
    that rejects `stream_options`): output tokens are then counted from
    chunks. `replica` labels every event. Instrumenting a client twice
    returns the first Instrumentation. Copies made later with
    `client.with_options()` are not instrumented.
    """
    if not isinstance(client, (openai.OpenAI, openai.AsyncOpenAI)):
        raise TypeError(f"expected openai.OpenAI or openai.AsyncOpenAI, got {type(client).__name__}")
    resources = ((client.chat.completions, True), (client.completions, False))
    existing = getattr(resources[0][0].create, "__phasemeter__", None)
    if existing is not None:
        return existing
    inst = Instrumentation(client, meter, count_tokens=count_tokens, include_usage=include_usage,
                           replica=replica)
    wrap = _wrap_async if isinstance(client, openai.AsyncOpenAI) else _wrap_sync
    for resource, chat in resources:
        resource.create = wrap(inst, chat, resource.create)
        inst._patched.append(resource)
    return inst
