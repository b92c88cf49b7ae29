"""An event from the caller's tuple to the schema's JSON, in the sender
thread; and request ids.

An event travels from caller to sender thread as a plain tuple in EVENT_FIELDS
order (cheapest to build); `encode` turns it into the schema's JSON.
"""

from __future__ import annotations

import json
import numbers
import os
import random

from phasemeter.stream_jobs.contract import V2_ONLY, V2_OPTIONAL

EVENT_FIELDS = ("request_id", "model", "t0", "ttft_s", "e2e_s", "queue_s", "input_tokens",
                "output_tokens", "cached_input_tokens", "status", "finish_reason", "replica", "v2")
# The last element, "v2", is None for the common event (encoded as v1, as
# before), else the tuple of the contract's optional v2 fields in V2_OPTIONAL
# order (chunks, max_gap_s, gaps_over, gap_threshold_s, output_tokens_estimated),
# followed by the PD_FIELDS (prefill_replica, decode_replica, kv_transfer_s)
# when the caller gave any (optional.with_pd), then `streamed` when given
# (optional.with_streamed); an event carrying it is encoded as schema_version 2.
V2_FIELDS = V2_OPTIONAL + V2_ONLY  # the names of a v2 tuple's slots, for zip()

# uuid.uuid4() reads os.urandom, a syscall that releases the GIL; on a busy
# process, getting the GIL back can take milliseconds. A private PRNG seeded
# from os.urandom gives the same uuid4 hex layout in ~0.15 us. Private so that
# random.seed() elsewhere cannot make ids repeat; reseeded in forked children
# so pre-fork workers do not share a sequence.
_rng = random.Random()
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_rng.seed)
_UUID4_KEEP = ~((0xF << 76) | (0x3 << 62)) & ((1 << 128) - 1)
_UUID4_SET = (0x4 << 76) | (0x2 << 62)  # version 4, RFC 4122 variant

_bits = _rng.getrandbits  # bound once: the reseed after a fork keeps the same generator


def new_request_id() -> str:
    # The same text as "%032x" % n in half the time (~150 ns, not ~290): a
    # Generation whose caller gave no id makes one on the caller's thread.
    return (_bits(128) & _UUID4_KEEP | _UUID4_SET).to_bytes(16, "big").hex()


def _number(value):
    """A number json cannot write itself (numpy.int64, Decimal, Fraction: the
    checks compare them as numbers and let them in) as the int or float it
    is; anything else stays a TypeError (the sender counts the event failed)."""
    if isinstance(value, numbers.Integral) or isinstance(value, numbers.Rational) and value.denominator == 1:
        return int(value)
    if isinstance(value, numbers.Real):
        return float(value)
    if isinstance(value, numbers.Number) and not isinstance(value, numbers.Complex):  # Decimal
        f = float(value)
        return int(value) if f.is_integer() else f  # Decimal(5) is a count the worker takes as 5
    raise TypeError(f"{type(value).__name__} is not JSON")


# allow_nan=False: NaN/Infinity are not JSON; such an event counts as failed
# instead of poisoning the topic for every consumer.
_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False, default=_number).encode


def encode(item: tuple, gateway: str | None) -> tuple[bytes, bytes]:
    """Event tuple -> (key, value) exactly as schema/event-v1.schema.json says,
    or event-v2's `generation` when it carries optional v2 fields (only the
    known ones are written: an absent field is unknown, never null)."""
    (rid, model, t0, ttft_s, e2e_s, queue_s, input_tokens, output_tokens,
     cached, status, finish_reason, replica, v2) = item
    if rid is None:  # record() without an id: generated here, off the caller's path
        rid = new_request_id()
    ev = {
        "schema_version": 1, "kind": "generation", "request_id": rid, "model": model,
        "t0": t0, "ttft_s": ttft_s, "e2e_s": e2e_s, "queue_s": queue_s,
        "input_tokens": input_tokens, "output_tokens": output_tokens,
        "cached_input_tokens": cached, "status": status, "finish_reason": finish_reason,
        "gateway": gateway, "replica": replica,
    }
    if v2 is not None:
        ev["schema_version"] = 2
        ev.update((name, value) for name, value in zip(V2_FIELDS, v2) if value is not None)
    return rid.encode("utf-8"), _dumps(ev).encode("utf-8")
