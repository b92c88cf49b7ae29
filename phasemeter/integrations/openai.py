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

import functools
import logging
import threading
import time

import openai

from phasemeter.stream_jobs.contract import DEFAULT_STALL_THRESHOLD_S

# The per-call timing lives in openai_call.py; `Call` and `_iterate` are
# re-exported (bench/bench_openai_wrapper.py drives `_iterate` directly).
from .openai_call import Call, _aclose_hook, _aiterate, _close_hook, _iterate, _status

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
        # What a gap between output chunks must exceed to count in gaps_over.
        self.stall_s = getattr(meter, "stall_threshold_s", DEFAULT_STALL_THRESHOLD_S)
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
