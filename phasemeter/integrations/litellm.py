"""A LiteLLM callback that sends one phasemeter event per call: `PhasemeterLogger`.

For the SDK (`litellm.callbacks = [PhasemeterLogger(meter)]`) and the proxy
(`litellm_settings: callbacks: phasemeter.integrations.litellm.proxy_handler_instance`,
configured from the environment); docs/ingest/litellm.md.

LiteLLM stamps each call itself and hands the stamps to its callbacks:
`start_time` (the call entered LiteLLM), `completion_start_time` (the first
streamed chunk; for a non-streaming call LiteLLM sets it to the end, which
is not read: such a call is recorded `streamed=False` with no first token,
docs/metrics.md) and `end_time`. They are wall-clock datetimes, so unlike our own wrappers the
durations here could be skewed by an NTP step during a call.

No decode-stall fields (chunks, max_gap_s, gaps_over): the per-call success
and failure hooks used here hand over those three stamps and no time per
chunk, so no gap between chunks is measured and the events go without them
(unknown, not "smooth"). LiteLLM's per-chunk logging hooks are not used:
whether their timing follows the stream or LiteLLM's own logging is untested.
For stall data, time the stream with the OpenAI wrapper or the ASGI
middleware (docs/ingest/openai.md, asgi.md).

This module is `phasemeter.integrations.litellm`; `import litellm` is
absolute and imports the real package, not this file.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading

from litellm.integrations.custom_logger import CustomLogger

log = logging.getLogger("phasemeter.integrations.litellm")

MODEL_FROM = ("deployment", "model_group", "response")
STATS = ("recorded", "estimated_usage", "estimated_input_tokens", "skipped_no_usage", "internal_errors")


def _epoch(value) -> float | None:
    if isinstance(value, datetime.datetime):
        return value.timestamp()  # naive datetimes are local time, as LiteLLM's datetime.now()
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    return None


def _field(obj, name):
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name, None)


def _count(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


class PhasemeterLogger(CustomLogger):
    """Records every completion LiteLLM reports, success or failure, sync or async.

    `model_from`: which name labels the event. "deployment" (default):
    `standard_logging_object["model"]`, the deployment LiteLLM actually
    called after routing and fallbacks (e.g. `openai/llama-3-8b` behind a
    router, `llama-3-8b` for a direct SDK call). "model_group": the name the
    client asked the proxy for. "response": what the server said it ran.
    `replica`: a fixed label; default the deployment's `model_id` (the
    proxy's `model_info.id`) when LiteLLM has one. `count_tokens(kwargs) ->
    int | None`: input tokens for failed calls, which have no usage;
    without it they are counted in `stats`, not recorded.
    """

    def __init__(self, meter, *, model_from: str = "deployment", replica: str | None = None,
                 count_tokens=None, **kwargs) -> None:
        if model_from not in MODEL_FROM:
            raise ValueError(f"model_from must be one of {MODEL_FROM}, got {model_from!r}")
        super().__init__(**kwargs)
        self.meter, self.model_from, self.replica, self.count_tokens = meter, model_from, replica, count_tokens
        # LiteLLM drops a logger whose class and public str/int/bool attributes
        # equal one already registered. Loggers on one Meter are duplicates
        # (they would count each call twice); on two Meters they are not.
        self.meter_key = f"meter-{id(meter):x}"
        self._stats = dict.fromkeys(STATS, 0)
        self._lock = threading.Lock()

    @property
    def stats(self) -> dict[str, int]:
        """A snapshot. `estimated_usage`: streamed calls that did not ask for
        usage, whose token counts are LiteLLM's own tokenizer estimate;
        `estimated_input_tokens`: failed calls sized by `count_tokens`;
        `skipped_no_usage`: failed calls not recorded (no input size)."""
        with self._lock:
            return dict(self._stats)

    def _inc(self, key: str) -> None:
        with self._lock:
            self._stats[key] += 1

    # LiteLLM passes these by keyword: the parameter names are part of its API.
    def log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._safe(kwargs, response_obj, start_time, end_time, failed=False)

    def log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._safe(kwargs, response_obj, start_time, end_time, failed=True)

    # Only a dict read and a queue append: no await needed, nothing blocks the loop.
    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):
        self._safe(kwargs, response_obj, start_time, end_time, failed=False)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):
        self._safe(kwargs, response_obj, start_time, end_time, failed=True)

    def _safe(self, kwargs, response_obj, start_time, end_time, failed: bool) -> None:
        try:
            self._record(kwargs or {}, response_obj, start_time, end_time, failed)
        except Exception:  # a logging callback must never fail the call it observes
            self._inc("internal_errors")
            log.debug("phasemeter: LiteLLM event not recorded", exc_info=True)

    def _record(self, kwargs: dict, response, start_time, end_time, failed: bool) -> None:
        slo = kwargs.get("standard_logging_object") or {}
        # The hook's own arguments first: kwargs is LiteLLM's shared per-call
        # dict, which its logging threads keep writing while a stream runs
        # (kwargs["end_time"] was seen 10 ms before the last chunk was sent).
        t0 = _epoch(start_time) or _epoch(kwargs.get("start_time")) or _epoch(slo.get("startTime"))
        t_end = _epoch(end_time) or _epoch(kwargs.get("end_time")) or _epoch(slo.get("endTime"))
        streamed = bool(kwargs.get("stream"))
        # A non-streaming call has no first token the caller saw: LiteLLM's
        # stamp for it is the end, which would count the decode as prefill.
        t_first = (_epoch(kwargs.get("completion_start_time")) or _epoch(slo.get("completionStartTime"))
                   if streamed else None)
        if t0 is None or t_end is None:
            raise ValueError("no start_time/end_time")
        e2e = max(0.0, t_end - t0)
        ttft = None if t_first is None else min(max(0.0, t_first - t0), e2e)

        usage = None if failed else (_field(response, "usage") if response is not None else None)
        n_in = _count(_field(usage, "prompt_tokens")) if usage is not None else None
        n_out = _count(_field(usage, "completion_tokens")) if usage is not None else None
        if not failed and n_in is None:  # the payload LiteLLM built carries the same counts
            n_in, n_out = _count(slo.get("prompt_tokens")), _count(slo.get("completion_tokens"))
        if n_in is None:
            n_in = _count(self.count_tokens(kwargs)) if self.count_tokens is not None else None
            if n_in is None:
                self._inc("skipped_no_usage")
                return
            self._inc("estimated_input_tokens")
        estimated = False
        if failed or n_out is None:
            n_out = 0
        elif kwargs.get("stream") and not self._asked_usage(kwargs):
            # LiteLLM's own tokenizer count, not the server's: the row says so
            self._inc("estimated_usage")
            estimated = n_out > 0
        if n_out > 0 and ttft is None and streamed:
            ttft = e2e
        details = _field(usage, "prompt_tokens_details") if usage is not None else None
        cached = _count(_field(details, "cached_tokens")) if details is not None else None
        if cached is not None and cached > n_in:
            cached = None

        exc = kwargs.get("exception")
        status = ("cancelled" if isinstance(exc, asyncio.CancelledError) else "error") if failed else "ok"
        reason = None
        choices = _field(response, "choices") if response is not None and not failed else None
        if choices:
            reason = _field(choices[0], "finish_reason")
        replica = self.replica or slo.get("model_id") or None
        self.meter.record(model=self._model(kwargs, slo, response)[:200], input_tokens=n_in, output_tokens=n_out,
                          t0=t0, ttft_s=ttft, e2e_s=e2e, cached_input_tokens=cached, status=status,
                          finish_reason=reason[:64] if isinstance(reason, str) and reason else None,
                          replica=replica[:200] if isinstance(replica, str) else None,
                          output_tokens_estimated=estimated, streamed=None if streamed else False)
        self._inc("recorded")

    @staticmethod
    def _asked_usage(kwargs: dict) -> bool:
        for opts in (kwargs.get("stream_options"), (kwargs.get("optional_params") or {}).get("stream_options")):
            if isinstance(opts, dict) and opts.get("include_usage"):
                return True
        return False

    def _model(self, kwargs: dict, slo: dict, response) -> str:
        deployment = slo.get("model") or kwargs.get("model")
        if self.model_from == "model_group":
            name = slo.get("model_group") or deployment
        elif self.model_from == "response" and response is not None:
            hidden = getattr(response, "_hidden_params", None) or {}
            name = hidden.get("provider_response_model") or _field(response, "model") or deployment
        else:
            name = deployment
        return str(name or "unknown")


# -- the proxy's entry point -----------------------------------------------------
# The proxy resolves `callbacks: phasemeter.integrations.litellm.proxy_handler_instance`
# with getattr(): the Meter is built on first use, from the environment, so
# importing this module for the SDK starts nothing.
_proxy_lock = threading.Lock()
_proxy_instance: PhasemeterLogger | None = None


def __getattr__(name: str):
    global _proxy_instance
    if name != "proxy_handler_instance":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    with _proxy_lock:
        if _proxy_instance is None:
            from phasemeter.producers import Meter
            from phasemeter.settings import Settings

            s = Settings.from_env()
            meter = Meter(s.kafka_bootstrap_servers or "localhost:9092", s.topic,
                          gateway="litellm-proxy", producer_config=s.kafka_client_config())
            _proxy_instance = PhasemeterLogger(meter)
        return _proxy_instance
