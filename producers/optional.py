"""The checks of the contract's optional v2 fields, which only an event that
carries one pays for: output_tokens_estimated, the chunk stats of record()
(decode stalls, docs/metrics.md) and the prefill/decode fields of
disaggregated serving (prefill_replica, decode_replica, kv_transfer_s;
docs/phases.md), and `streamed` (false: a call not streamed, docs/metrics.md).
Each is held to the worker's own rule (contract.py) and refused with its
reason code, as in checks.py.

The v2 tuple an event carries is these fields in V2_OPTIONAL order, then,
when any is given, the PD_FIELDS, then `streamed` when given
(encode.V2_FIELDS).
"""

from __future__ import annotations

import phasemeter.stream_jobs.reasons as R
from phasemeter.stream_jobs.contract import (LABEL_FIELDS, MAX_DURATION_S, PD_FIELDS, PD_LABELS, V2_OPTIONAL,
                                             STREAMED, check_bool, check_gap, check_gap_within, check_v2_optional)
from phasemeter.stream_jobs.formulas import check_transfer_within

from .checks import BadArgument, label_error, label_ok

_NO_V2 = (None,) * len(V2_OPTIONAL)  # a v2 tuple holding none of the V2_OPTIONAL fields


def check_estimated(value) -> None:
    if value.__class__ is not bool:
        raise BadArgument(f"output_tokens_estimated must be a bool, got {value!r}", R.WRONG_TYPE)


def check_threshold(value) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value <= MAX_DURATION_S:
        raise BadArgument(f"stall_threshold_s must be seconds in (0, {MAX_DURATION_S:g}], got {value!r}")
    return float(value)


def check_stalls(chunks, max_gap_s, gaps_over, gap_threshold_s, e2e_s) -> tuple:
    """record()'s chunk stats, held to the worker's own rules (contract.py:
    types, ranges, gaps_over <= chunks, max_gap_s <= e2e_s, ...), so an
    accepted event is never dead-lettered for them. The four checked fields
    in V2_OPTIONAL order. Only called when one of them is given: the common
    record() pays nothing."""
    given = {"chunks": chunks, "max_gap_s": max_gap_s, "gaps_over": gaps_over,
             "gap_threshold_s": gap_threshold_s}
    out: dict = {}
    bad = check_v2_optional(given, out) or check_gap_within(out["max_gap_s"], e2e_s)
    if bad is not None:
        # The contract's detail names the field, which is also the argument's name.
        raise BadArgument(f"record(): {bad.detail}", bad.reason)
    return out["chunks"], out["max_gap_s"], out["gaps_over"], out["gap_threshold_s"]


def check_pd(prefill_replica, decode_replica, kv_transfer_s, ttft_s: float | None, e2e_s: float | None) -> tuple:
    """The prefill/decode fields, held to the worker's rules (labels like
    replica; the transfer a gap no longer than the TTFT, or than e2e_s
    without a first token; neither bound when unknown yet, as on a start):
    the three in PD_FIELDS order. They are not remembered as model and
    replica are (checks.label_seen): only a P/D deployment pays for them."""
    for name, value in zip(PD_LABELS, (prefill_replica, decode_replica)):
        if value is not None and not label_ok(value, LABEL_FIELDS[name]):
            raise label_error(name, value, LABEL_FIELDS[name])
    if kv_transfer_s is not None:
        bad = check_gap("kv_transfer_s", kv_transfer_s) or check_transfer_within(kv_transfer_s, ttft_s, e2e_s)
        if bad is not None:
            raise BadArgument(f"finish(): {bad.detail}", bad.reason)
        kv_transfer_s = float(kv_transfer_s)
    return prefill_replica, decode_replica, kv_transfer_s


def with_pd(v2: tuple | None, prefill_replica, decode_replica, kv_transfer_s, ttft_s, e2e_s) -> tuple | None:
    """An event's v2 tuple with the prefill/decode fields appended when any
    is given (checked by check_pd), else `v2` as it was."""
    if prefill_replica is None and decode_replica is None and kv_transfer_s is None:
        return v2
    return (v2 or _NO_V2) + check_pd(prefill_replica, decode_replica, kv_transfer_s, ttft_s, e2e_s)


_BEFORE_STREAMED = len(V2_OPTIONAL) + len(PD_FIELDS)  # the slots a v2 tuple has before `streamed`


def with_streamed(v2: tuple | None, streamed) -> tuple | None:
    """An event's v2 tuple with `streamed` in its slot (the slots before it
    None where not given), or `v2` as it was when `streamed` is None. A
    non-bool is refused as the worker refuses it (contract.check_bool)."""
    if streamed is None:
        return v2
    bad = check_bool(STREAMED, streamed)
    if bad is not None:
        raise BadArgument(f"record(): {bad.detail}", bad.reason)
    v2 = v2 or _NO_V2
    return v2 + (None,) * (_BEFORE_STREAMED - len(v2)) + (streamed,)
