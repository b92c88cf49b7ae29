"""The calls that emit an event (`record`, and `start` / `first_token` / `end`
for phase events): each checks its arguments on the caller's thread, then
hands one tuple to `self._put`. `Meter` queues it; `Batch` holds it for
`Meter.put_all` (the OTLP receiver: a request is queued whole, or refused).
One set of checks for both, refusals counted in the Meter's Channel.
"""

from __future__ import annotations

from math import isfinite as _isfinite

import phasemeter.stream_jobs.reasons as R

from .checks import BadArgument, check_duration, check_outcome, check_request, check_t0
from phasemeter.stream_jobs.contract import MAX_DURATION_S
from .optional import check_estimated, check_stalls, with_pd, with_streamed
from .phases import end_item, first_token_item, start_item

_ESTIMATED = (None, None, None, None, True)  # the v2 fields of a record(output_tokens_estimated=True)
_MAX_S = MAX_DURATION_S


class Calls:
    """The emitting calls; a subclass gives `_ch` (its Channel), `_stall_s`
    and `_put(item)`."""

    __slots__ = ()

    def record(self, *, model: str, input_tokens: int, output_tokens: int, t0: float,
               ttft_s: float | None = None, e2e_s: float | None = None, queue_s: float | None = None,
               cached_input_tokens: int | None = None, status: str = "ok",
               finish_reason: str | None = None, request_id: str | None = None,
               replica: str | None = None, t_first: float | None = None, t_end: float | None = None,
               t_scheduled: float | None = None, output_tokens_estimated: bool = False,
               chunks: int | None = None, max_gap_s: float | None = None, gaps_over: int | None = None,
               gap_threshold_s: float | None = None, prefill_replica: str | None = None,
               decode_replica: str | None = None, kv_transfer_s: float | None = None,
               streamed: bool | None = None) -> None:
        """Emit a generation timed elsewhere. Give durations (ttft_s, e2e_s,
        queue_s) or epoch timestamps (t_first, t_end, t_scheduled) -- not both;
        durations from a monotonic clock are preferable (immune to NTP steps).
        `output_tokens_estimated=True`: output_tokens was counted by the
        caller (chunks), not reported by the server; sent as schema_version 2.

        Decode stalls timed by the caller (docs/metrics.md): `chunks` timed,
        the largest gap between consecutive ones `max_gap_s`, and `gaps_over`,
        how many gaps exceeded `gap_threshold_s` (None: this Meter's
        `stall_threshold_s`, sent whenever gaps_over is). Checked by the
        worker's rules (gaps_over <= chunks, max_gap_s <= e2e_s, ...); the
        event is then schema_version 2. Leave them None when nothing was
        timed per chunk: absent is "unknown", 0 would claim a smooth stream.
        `prefill_replica`, `decode_replica`, `kv_transfer_s`: as Generation.finish().
        `streamed=False`: the call was not streamed, so it has no first token
        (leave ttft_s/t_first None): the row is stored with null phases
        instead of being refused for output without a first token
        (docs/metrics.md). None: not said; either bool makes the event v2."""
        try:  # free unless it raises (3.11+)
            if not (t0.__class__ is float and _isfinite(t0) or t0.__class__ is int):
                check_t0(t0)
            check_request(model, input_tokens, cached_input_tokens, request_id, replica)
            check_outcome(output_tokens, status, finish_reason)
            v2 = None  # the common event: v1, exactly as before
            if output_tokens_estimated is not False:
                check_estimated(output_tokens_estimated)
                v2 = _ESTIMATED
            stalls = chunks is not None or max_gap_s is not None or gaps_over is not None or gap_threshold_s is not None
            if t_end is not None or t_first is not None or t_scheduled is not None:
                if e2e_s is not None or ttft_s is not None or queue_s is not None:
                    raise BadArgument("give durations (ttft_s/e2e_s/queue_s) or timestamps "
                                      "(t_first/t_end/t_scheduled), not both")
                if t_end is None:
                    raise BadArgument("t_end is required when timestamps are given", R.MISSING_FIELD)
                e2e_s = t_end - t0
                ttft_s = None if t_first is None else t_first - t0
                queue_s = None if t_scheduled is None else t_scheduled - t0
                names = ("t_end", "t_first", "t_scheduled")
            elif e2e_s is None:
                raise BadArgument("e2e_s (or t_end) is required", R.MISSING_FIELD)
            else:
                names = ("e2e_s", "ttft_s", "queue_s")
            try:  # the common case inline: three calls cost more than their checks
                ok = 0 <= e2e_s <= _MAX_S and (ttft_s is None or 0 <= ttft_s <= _MAX_S) \
                    and (queue_s is None or 0 <= queue_s <= _MAX_S)
            except (TypeError, ArithmeticError):  # a str; a Decimal NaN signals when compared
                ok = False
            if not ok:  # check_duration holds the rule and says what is wrong
                check_duration(names[0], e2e_s)
                check_duration(names[1], ttft_s)
                check_duration(names[2], queue_s)
            if stalls:  # checked once e2e_s is known (a gap lies inside the generation)
                if gap_threshold_s is None and gaps_over is not None:
                    gap_threshold_s = self._stall_s
                v2 = check_stalls(chunks, max_gap_s, gaps_over, gap_threshold_s, e2e_s) + (
                    True if output_tokens_estimated else None,)
            # Tested inline, as the stall fields are: the common record() makes no call for them.
            if prefill_replica is not None or decode_replica is not None or kv_transfer_s is not None:
                v2 = with_pd(v2, prefill_replica, decode_replica, kv_transfer_s, ttft_s, e2e_s)
            if streamed is not None:
                v2 = with_streamed(v2, streamed)
            # EVENT_FIELDS order; request_id None is filled in by the sender thread.
            self._put((request_id, model, t0, ttft_s, e2e_s, queue_s, input_tokens, output_tokens,
                       cached_input_tokens, status, finish_reason, replica, v2))
        except ValueError as exc:  # counted, then the caller's to handle
            self._ch.refuse(exc)
            raise
        except (TypeError, ArithmeticError) as exc:  # a timestamp that is no number: t_end - t0
            bad = BadArgument(f"record(): {exc}", R.WRONG_TYPE)
            self._ch.refuse(bad)
            raise bad from None

    # -- phase events from separate callbacks (docs/phases.md) ----------------
    # Durations (s since t0, from time.monotonic() differences) are preferred
    # over epoch timestamps: an NTP step between phases cannot skew them. Use
    # t_first/t_end only where the gateway has nothing but a wall clock.
    # queue_s and cached_input_tokens go on whichever phase first knows them.
    def start(self, *, model: str, input_tokens: int, t0: float | None = None,
              request_id: str | None = None, cached_input_tokens: int | None = None,
              queue_s: float | None = None, replica: str | None = None, prefill_replica: str | None = None,
              decode_replica: str | None = None, kv_transfer_s: float | None = None) -> str:
        """Send `start` and return the request_id (given, or a new uuid4 hex)
        to pass to `first_token()` and `end()`. t0 defaults to time.time(); a
        caller computing durations should read time.monotonic() alongside.
        The P/D fields (as Generation.finish()) may ride on the start or the end."""
        try:
            item = start_item(model, input_tokens, t0, request_id, cached_input_tokens, queue_s, replica,
                              (prefill_replica, decode_replica, kv_transfer_s))
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)
        return item[1]

    def first_token(self, request_id: str, *, ttft_s: float | None = None, t_first: float | None = None,
                    queue_s: float | None = None, cached_input_tokens: int | None = None) -> None:
        """Send `first_token`: exactly one of ttft_s (s since t0) or t_first (epoch s)."""
        try:
            item = first_token_item(request_id, ttft_s, t_first, queue_s, cached_input_tokens)
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)

    def end(self, request_id: str, *, output_tokens: int, e2e_s: float | None = None,
            t_end: float | None = None, status: str = "ok", finish_reason: str | None = None,
            queue_s: float | None = None, cached_input_tokens: int | None = None,
            output_tokens_estimated: bool = False, prefill_replica: str | None = None,
            decode_replica: str | None = None, kv_transfer_s: float | None = None) -> None:
        """Send `end`: exactly one of e2e_s (s since t0) or t_end (epoch s)."""
        try:
            item = end_item(request_id, output_tokens, e2e_s, t_end, status, finish_reason, queue_s,
                            cached_input_tokens, output_tokens_estimated,
                            (prefill_replica, decode_replica, kv_transfer_s))
        except ValueError as exc:
            self._ch.refuse(exc)
            raise
        self._put(item)


class Batch(Calls):
    """Events checked one by one, queued together by `Meter.put_all` or not
    at all. `record` and the phase calls are Meter's (one set of checks,
    refusals counted by the Meter); they append here instead of to the
    queue."""

    __slots__ = ("_ch", "_stall_s", "items")

    def __init__(self, meter) -> None:
        self._ch, self._stall_s, self.items = meter._ch, meter._stall_s, []

    def _put(self, item: tuple) -> None:
        self.items.append(item)

    def __len__(self) -> int:
        return len(self.items)
