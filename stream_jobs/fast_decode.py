"""The worker's common message, decoded and checked in C.

Nearly every message is a well-formed v1/v2 `generation` event, or an
envelope of them. For those, msgspec parses the JSON and checks every type
and range of the contract in one pass, straight into Structs, instead of
`json.loads` building dicts that Python then checks field by field: in the
profile of the envelope path, the JSON parse and the checks were over half
of the worker's time per generation (BENCHMARKS.md §2).

This is an accelerator, not a second contract. Its Structs are built from
the limits in contract.py and the field lists in derive.py, and the checks
across fields are derive's own (`ordered_fields`). Anything it does not
accept whole (a bad event, a phase event, chunk data, a lone surrogate, an
envelope with one bad event in it) goes to `derive.process_message`
unchanged, which alone names reasons. A test holds the two paths to the same
result on the poison corpus and on generated messages.
"""

from __future__ import annotations

import time
from typing import Annotated, Literal, Optional, Union

import msgspec

from .buckets import Bucketer
from .contract import LABEL_FIELDS, MAX_DURATION_S, MAX_TOKENS, MIN_T0, SCHEMA_VERSIONS, STATUSES
from .derive import COUNTS, DURATIONS, KNOWN, REQUIRED, Phase, Rejection, derive, ordered_fields, process_message

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
_Duration = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_DURATION_S)]
_Version = Literal[SCHEMA_VERSIONS]  # type: ignore[valid-type]


def _type_of(name: str):
    if name in LABEL_FIELDS:
        return Annotated[str, msgspec.Meta(min_length=1, max_length=LABEL_FIELDS[name])]
    if name in COUNTS:
        return _Count
    if name in DURATIONS:
        return _Duration
    if name == "t0":  # its upper bound moves with the clock: checked per event below
        return Annotated[float, msgspec.Meta(ge=MIN_T0)]
    if name == "status":
        return Literal[STATUSES]  # type: ignore[valid-type]
    if name == "schema_version":
        return _Version
    raise AssertionError(f"no C type for contract field {name!r}")


def _generation_struct(title: str, tagged: bool) -> type:
    """A v1 generation as derive's `_fast` accepts it, built from its lists:
    required fields first, the optional ones with their defaults. At the top
    level `kind` is the tag that tells a generation from an envelope; inside
    an envelope it is a field, because msgspec lets a lone tagged type leave
    its tag out, and the contract does not."""
    fields = [(name, _type_of(name)) for name in REQUIRED if name != "kind"]
    if not tagged:
        fields.append(("kind", Literal["generation"]))
    for field in sorted(KNOWN - set(REQUIRED)):
        kind = _type_of(field)
        fields.append((field, kind, "ok") if field == "status" else (field, Optional[kind], None))
    tag = {"tag_field": "kind", "tag": "generation"} if tagged else {}
    return msgspec.defstruct(title, fields, forbid_unknown_fields=True, frozen=True, **tag)


Generation = _generation_struct("Generation", tagged=True)
InnerGeneration = _generation_struct("InnerGeneration", tagged=False)
Envelope = msgspec.defstruct(
    "Envelope", [("schema_version", _Version),
                 ("events", Annotated[list[InnerGeneration], msgspec.Meta(min_length=1)])],
    tag_field="kind", tag="batch", forbid_unknown_fields=True, frozen=True)
_DECODER = msgspec.json.Decoder(Union[Generation, Envelope])
_LIMIT = MAX_DURATION_S


def common_fields(raw: bytes, now: float, max_batch: int) -> list[dict] | None:
    """Validated fields of every event in `raw` when all of them are
    well-formed generations; None sends the message to the full path."""
    # msgspec refuses a lone surrogate escape as malformed, so that message
    # too goes to the full path, which names the field (not_utf8).
    try:
        message = _DECODER.decode(raw)
    except msgspec.MsgspecError:
        return None
    events = message.events if type(message) is Envelope else (message,)
    if len(events) > max_batch:
        return None
    latest = now + _LIMIT
    out = []
    for e in events:
        t0 = e.t0
        if t0 > latest:
            return None
        fields = ordered_fields(e.model, e.request_id, e.finish_reason, e.gateway, e.replica, e.status,
                                e.input_tokens, e.output_tokens, e.cached_input_tokens, t0, e.ttft_s, e.e2e_s,
                                e.queue_s, e.schema_version)
        if fields is None:
            return None
        out.append(fields)
    return out


def process_message_fast(raw: bytes, bucket: Bucketer, max_bytes: int, now: float | None = None,
                         max_batch: int = 10_000, internal: bool = False) -> list[dict | Phase | Rejection]:
    """`derive.process_message`, the same results, with the common message in C."""
    now = time.time() if now is None else now
    if raw is not None and len(raw) <= max_bytes:
        common = common_fields(raw, now, max_batch)
        if common is not None:
            return [derive(fields, bucket) for fields in common]
    return process_message(raw, bucket, max_bytes, now, max_batch, internal)
