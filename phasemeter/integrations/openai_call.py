"""The timing of one OpenAI SDK call: `Call`, and the stream wrappers.

openai.py decides which calls to time and patches the client; this module
times one of them: the first token and the end of a stream as its chunks
go by, a whole response at once, and the one event per call handed to
`Meter.record()`. It never imports the SDK: it reads the chunks' and the
response's attributes only, so it is the same for sync and async clients.
"""

from __future__ import annotations

import asyncio
import time


class Call:
    """One request being timed. `observe()` runs once per chunk: keep it lean.

    Times are time.monotonic(); t0 (epoch) only places the event. The first
    token is the first chunk carrying output (text, a tool call, a refusal or
    reasoning), not the role-only opening chunk. The end is the last chunk's
    arrival, or the moment of an error or `close()`.

    Decode stalls, timed as `Generation.chunk()` times them (docs/metrics.md):
    each chunk carrying output is one timed chunk (however many choices it
    holds), the first one being the first token; `gap_max` and `over` are the
    largest gap between consecutive ones and how many exceeded the Meter's
    stall threshold. O(1) state; sent only for a stream that delivered output.

    A whole (non-streaming) response has no first token the caller saw: it
    is recorded with `streamed=False` and no ttft_s, so the row has null
    phases (docs/metrics.md) instead of a first token at the end, which
    would count the decode as prefill (prefill_tps = input / e2e).
    """

    __slots__ = ("inst", "chat", "kwargs", "hide_usage", "t0", "start", "t_first", "t_last",
                 "model", "usage", "finish_reason", "n_out", "n_finished", "_once",
                 "chunks", "t_chunk", "gap_max", "over", "streamed")

    def __init__(self, inst, chat: bool, kwargs: dict, hide_usage: bool) -> None:
        # inst: the openai.Instrumentation (counters, meter, count_tokens),
        # not imported here, so that the import graph stays one-way.
        self.inst, self.chat, self.kwargs, self.hide_usage = inst, chat, kwargs, hide_usage
        self.t0 = time.time()
        self.start = self.t_last = time.monotonic()
        self.t_first = self.model = self.usage = self.finish_reason = self.streamed = None
        self.n_out = self.n_finished = self.chunks = self.over = 0
        self.gap_max = 0.0
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
            out = False
            for choice in choices:
                if choice.finish_reason is not None:
                    self.finish_reason = choice.finish_reason
                    self.n_finished += 1
                if (_carries_output(choice.delta) if self.chat else choice.text):
                    self.n_out += 1
                    out = True
            if out:  # the chunk hook: one timed chunk, whatever its choices
                if self.t_first is None:
                    self.t_first = now  # the first token: no gap before it
                else:
                    gap = now - self.t_chunk
                    if gap > self.gap_max:
                        self.gap_max = gap
                    if gap > self.inst.stall_s:
                        self.over += 1
                self.t_chunk = now
                self.chunks += 1
        except Exception:  # an odd chunk must not break the caller's loop
            self.inst.count("internal_errors")
        return False

    def whole(self, response) -> None:
        """A non-streaming response: all of it at once, no first token to time."""
        self.streamed = False
        try:
            self.t_last = time.monotonic()
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
        estimated = False
        if usage is None or not isinstance(n_out, int):
            n_out = self.n_out
            if n_out:  # counted chunks, not the server's count: the row says so
                inst.count("estimated_output_tokens")
                estimated = True
        if not isinstance(cached, int) or not 0 <= cached <= n_in:
            cached = None
        e2e = t_end - self.start
        ttft = None if self.t_first is None else min(self.t_first - self.start, e2e)
        if ttft is None and n_out > 0 and self.streamed is not False:
            inst.count("first_token_unseen")
            ttft = e2e
        model = self.model if isinstance(self.model, str) and self.model else self.kwargs.get("model")
        model = str(model or "unknown")[:200]
        reason = self.finish_reason if isinstance(self.finish_reason, str) and self.finish_reason else None
        # Chunk stats only from a stream's output chunks (whole() times none):
        # absent means "not timed per chunk", never "a smooth stream".
        count = self.chunks
        inst.meter.record(model=model, input_tokens=n_in, output_tokens=n_out, t0=self.t0, ttft_s=ttft,
                          e2e_s=e2e, cached_input_tokens=cached, status=status,
                          finish_reason=None if reason is None else reason[:64], replica=inst.replica,
                          output_tokens_estimated=estimated,
                          chunks=count or None, max_gap_s=min(self.gap_max, e2e) if count > 1 else None,
                          gaps_over=self.over if count else None,
                          gap_threshold_s=inst.stall_s if count else None, streamed=self.streamed)
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
