"""A local OpenAI-compatible HTTP server whose timing is scripted per request.

The integration tests drive the real `openai` SDK (and LiteLLM) against it, so
the wire protocol under test is the real one: SSE over chunked HTTP/1.1,
`data: [DONE]`, the final usage chunk when `stream_options.include_usage` is
set, an error event mid-stream, `choices: null` chunks, tool-call deltas.

    with LLMServer() as srv:
        srv.push(Script(ttft_s=0.03, gap_s=0.01, chunks=5))
        client = openai.OpenAI(base_url=srv.base_url, api_key="x")

Each request takes the next pushed Script (FIFO), or `srv.default`. The server
runs in a thread of the test process and stamps `time.monotonic()` when it
reads a request and when it writes each chunk (`srv.log`), so a test can hold
the client's timings to what was really sent, not only to the script.
"""

from __future__ import annotations

import collections
import contextlib
import gc
import json
import sys
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kafka_events import unwrap


@dataclass
class Script:
    ttft_s: float = 0.0          # request read -> first content chunk
    gap_s: float = 0.0           # between content chunks
    chunks: int = 3              # content chunks (one token each)
    model: str | None = None     # the served model; None echoes the request's
    prompt_tokens: int = 11
    cached_tokens: int | None = None
    usage: str = "auto"          # "auto": only if include_usage asked; "always"; "never"
    role_chunk: bool = True      # a role-only chunk at once, before the first token
    null_choices: bool = False   # a `choices: null` chunk after the role chunk
    tool_calls: bool = False     # content chunks are tool-call argument deltas
    reasoning: bool = False      # content chunks are `reasoning_content` deltas (vLLM, DeepSeek)
    error_after: int | None = None   # an SSE error event after this many content chunks
    drop_after: int | None = None    # cut the connection after this many content chunks
    status: int = 200            # non-200: a JSON error body, after ttft_s
    finish_reason: str = "stop"
    finish_chunk: bool = True    # OpenAI's own style: finish_reason in an empty-delta chunk of its own
    stalls: dict = field(default_factory=dict)  # {i: s}: content chunk i comes s later (and all after it)

    def delay(self, i: int) -> float:
        """When content chunk i is due, in seconds after the request was read."""
        return self.ttft_s + i * self.gap_s + sum(s for j, s in self.stalls.items() if j <= i)


@dataclass
class Served:
    """What one request looked like from the server's side."""
    path: str
    body: dict
    t_request: float                       # monotonic, when the request was read
    t_chunks: list = field(default_factory=list)   # monotonic, just before each content chunk is written
    t_opened: float | None = None          # monotonic, the first SSE event (role chunk included)
    usage_sent: bool = False


class LLMServer:
    def __init__(self) -> None:
        self.scripts: collections.deque[Script] = collections.deque()
        self.default = Script()
        self.log: list[Served] = []
        self._httpd = _Quiet(("127.0.0.1", 0), _Handler)
        self._httpd.daemon_threads = True
        self._httpd.llm = self  # type: ignore[attr-defined]
        self.base_url = f"http://127.0.0.1:{self._httpd.server_address[1]}/v1"
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="llm-server", daemon=True)

    @staticmethod
    def wall(t_monotonic: float) -> float:
        """A monotonic stamp as epoch seconds, for events timed by a wall clock (LiteLLM)."""
        return t_monotonic + (time.time() - time.monotonic())

    def push(self, *scripts: Script) -> LLMServer:
        self.scripts.extend(scripts)
        return self

    def next_script(self) -> Script:
        try:
            return self.scripts.popleft()
        except IndexError:
            return self.default

    def start(self) -> LLMServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> LLMServer:
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


def _usage(s: Script, completion_tokens: int) -> dict:
    usage = {"prompt_tokens": s.prompt_tokens, "completion_tokens": completion_tokens,
             "total_tokens": s.prompt_tokens + completion_tokens}
    if s.cached_tokens is not None:
        usage["prompt_tokens_details"] = {"cached_tokens": s.cached_tokens}
    return usage


class _Quiet(ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        # A client closing an idle keep-alive connection resets it: normal here.
        if not isinstance(sys.exc_info()[1], OSError):
            super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"   # keep-alive and chunked SSE, as real servers do
    disable_nagle_algorithm = True  # each chunk leaves when written: timings stay exact

    def log_message(self, *args) -> None:  # quiet test output
        pass

    def do_POST(self) -> None:
        t_request = time.monotonic()
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
        llm: LLMServer = self.server.llm  # type: ignore[attr-defined]
        s = llm.next_script()
        served = Served(self.path, body, t_request)
        llm.log.append(served)
        chat = self.path.endswith("/chat/completions")
        model = s.model or body.get("model") or "unknown"
        try:
            if s.status != 200:
                self._sleep_until(t_request + s.ttft_s)
                self._json(s.status, {"error": {"message": "scripted failure", "type": "server_error"}})
            elif body.get("stream"):
                self._stream(s, served, chat, model, body)
            else:
                self._sleep_until(t_request + s.delay(max(0, s.chunks - 1)))
                self._json(200, self._whole(s, chat, model))
        except OSError:  # the client went away (a cancel, from here), or a scripted drop
            self.close_connection = True

    # -- helpers -------------------------------------------------------------
    @staticmethod
    def _sleep_until(t: float) -> None:
        delay = t - time.monotonic()
        if delay > 0:
            time.sleep(delay)

    def _json(self, status: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _whole(self, s: Script, chat: bool, model: str) -> dict:
        text = "".join(f"t{i} " for i in range(s.chunks))
        if chat:
            message: dict = {"role": "assistant", "content": None if s.tool_calls else text}
            if s.tool_calls:
                message["tool_calls"] = [{"id": "call_1", "type": "function",
                                          "function": {"name": "lookup", "arguments": "{}"}}]
            choice = {"index": 0, "message": message, "finish_reason": s.finish_reason}
            obj = "chat.completion"
        else:
            choice = {"index": 0, "text": text, "finish_reason": s.finish_reason, "logprobs": None}
            obj = "text_completion"
        out = {"id": "cmpl-1", "object": obj, "created": int(time.time()), "model": model, "choices": [choice]}
        if s.usage != "never":
            out["usage"] = _usage(s, s.chunks)
        return out

    def _event(self, payload, served: Served | None = None) -> None:
        if served is not None and served.t_opened is None:
            served.t_opened = time.monotonic()
        data = b"data: " + (payload if isinstance(payload, bytes) else json.dumps(payload).encode()) + b"\n\n"
        self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))

    def _stream(self, s: Script, served: Served, chat: bool, model: str, body: dict) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        asked = bool((body.get("stream_options") or {}).get("include_usage"))
        send_usage = s.usage == "always" or (s.usage == "auto" and asked)
        base = {"id": "cmpl-1", "object": "chat.completion.chunk" if chat else "text_completion",
                "created": int(time.time()), "model": model}
        extra = {"usage": None} if send_usage else {}

        def chunk(choices):
            return {**base, "choices": choices, **extra}

        if chat and s.role_chunk:
            self._event(chunk([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]),
                        served)
        if s.null_choices:
            self._event({**base, "choices": None}, served)
        for i in range(s.chunks):
            self._sleep_until(served.t_request + s.delay(i))
            if s.error_after is not None and i == s.error_after:
                self._event({"error": {"message": "scripted mid-stream failure", "type": "server_error"}})
                self.wfile.write(b"0\r\n\r\n")
                return
            if s.drop_after is not None and i == s.drop_after:
                self.close_connection = True
                self.connection.shutdown(2)  # no terminating chunk: a broken stream
                return
            finish = s.finish_reason if i == s.chunks - 1 and not s.finish_chunk else None
            if not chat:
                choice = {"index": 0, "text": f"t{i} ", "finish_reason": finish, "logprobs": None}
            elif s.tool_calls:
                call = {"index": 0, "function": {"arguments": f'"a{i}"'}}
                if i == 0:
                    call.update(id="call_1", type="function", function={"name": "lookup", "arguments": ""})
                choice = {"index": 0, "delta": {"tool_calls": [call]}, "finish_reason": finish}
            else:
                key = "reasoning_content" if s.reasoning else "content"
                choice = {"index": 0, "delta": {key: f"t{i} "}, "finish_reason": finish}
            served.t_chunks.append(time.monotonic())  # before the write: a hard lower bound for the client
            self._event(chunk([choice]), served)
        if s.finish_chunk:
            self._event(chunk([{"index": 0, "delta": {}, "finish_reason": s.finish_reason} if chat else
                               {"index": 0, "text": "", "finish_reason": s.finish_reason, "logprobs": None}]))
        if send_usage:
            self._event({**base, "choices": [], "usage": _usage(s, s.chunks)})
            served.usage_sent = True
        self._event(b"[DONE]")
        self.wfile.write(b"0\r\n\r\n")


class MemoryProducer:
    """A kafka-python stand-in for `Meter(producer_factory=...)` in unit tests:
    keeps each event the sender thread encodes (unwrapping envelopes),
    acknowledges at once. The
    Meter, its queue and sender thread stay real; only the socket is gone."""

    def __init__(self) -> None:
        self.events: list[dict] = []
        self._cond = threading.Condition()

    def __call__(self, **kwargs) -> MemoryProducer:  # the factory: one producer, this one
        return self

    def partitions_for(self, topic):
        return {0, 1, 2, 3}

    def send(self, topic, key=None, value=None, partition=None):
        with self._cond:  # an envelope (the Meter's default) or one event
            self.events.extend(unwrap(value))
            self._cond.notify_all()
        return _Acked()

    def wait(self, n: int, timeout_s: float = 5.0) -> list[dict]:
        """Every event collected, once there are at least n (a deadline):
        all of them, not the first n, so that `(ev,) = sink.wait(1)` fails
        on a duplicate instead of hiding it."""
        with self._cond:
            if not self._cond.wait_for(lambda: len(self.events) >= n, timeout_s):
                raise AssertionError(f"{len(self.events)} of {n} events after {timeout_s}s: {self.events}")
            return list(self.events)

    def flush(self, timeout=None) -> None:
        pass

    def close(self, timeout=None) -> None:
        pass


class _Acked:
    def add_callback(self, f):
        f(None)
        return self

    def add_errback(self, f):
        return self


@contextlib.contextmanager
def frozen_heap():
    """Move everything alive now out of the collector's reach for the block.

    With litellm imported, one full collection walks ~370k objects: 0.2-0.7 s
    on this machine, and it can strike between two chunks of a timed stream
    (or in a test's own gc.collect()). Frozen, a collection only walks what
    the tests themselves allocate."""
    gc.collect()
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()
