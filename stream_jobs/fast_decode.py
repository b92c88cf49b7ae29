"""The worker's common message, decoded and checked in C.

msgspec parses a well-formed generation, phase event or envelope of them straight into Structs, checking the
contract's types and ranges in one pass: `json.loads` and Python's checks field by field took over half of the
worker's time per generation (docs/performance/worker.md). An accelerator, not a second contract: the Structs
come from contract.py's limits and the field lists of derive.py and phase_events.py, the checks across fields
are formulas.py's and `phase_events.check_across`. Any event it does not take goes to the full path, which
alone names reasons; a test holds both paths to one result on the poison corpus and on generated messages.
"""

from __future__ import annotations

import json
from itertools import repeat
from operator import attrgetter
from typing import Annotated, Literal, Optional, Union

import msgspec

from .buckets import Bucketer
from .contract import COUNTS, DURATIONS, LABEL_FIELDS, MAX_BATCH, MAX_DURATION_S, MAX_TOKENS, MIN_T0, PD_FIELDS
from .contract import SCHEMA_VERSIONS, STATUSES, STREAMED, V2_ONLY, V2_OPTIONAL, has_control, may_hold_control
from .contract import may_hold_lone_surrogate
from .derive import KNOWN, REQUIRED, Rejection, process_event, process_message
from .phase_events import PHASE_VERSION, SPEC, check_across

_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)]
_Duration = Annotated[float, msgspec.Meta(ge=0.0, le=MAX_DURATION_S)]
_Version = Literal[SCHEMA_VERSIONS]  # type: ignore[valid-type]
_EPOCHS = ("t0", "t_first", "t_end")
_GAPS = DURATIONS + ("kv_transfer_s",)  # kv_transfer_s a gap: contract.check_gap's range, a duration's
# Each contract field's C type.
_TYPES = {**{n: Annotated[str, msgspec.Meta(min_length=1, max_length=m)] for n, m in LABEL_FIELDS.items()},
          **dict.fromkeys(COUNTS, _Count), **dict.fromkeys(_GAPS, _Duration),
          # an epoch's upper bound moves with the clock: checked per event below
          **dict.fromkeys(_EPOCHS, Annotated[float, msgspec.Meta(ge=MIN_T0)]),
          "status": Literal[STATUSES],  # type: ignore[valid-type]
          "schema_version": _Version,
          STREAMED: bool}  # a JSON boolean only (contract.check_bool)
# A generation's counts and durations are only typed (an int64, a number), their ranges checked on columns
# (formulas.out_of_range), so that one bad value does not send its envelope event by event. A duration keeps
# its JSON type, for derive.ranged to name its row as the full path does (docs/performance/worker.md).
_GENERATION_TYPES = {**_TYPES, **dict.fromkeys(COUNTS, Annotated[int, msgspec.Meta(ge=-2 ** 63, le=2 ** 63 - 1)]),
                     **dict.fromkeys(_GAPS, Union[int, float])}


def _struct(title: str, tag: str, required: list, optional: list, gc: bool = False) -> type:
    # Tagged by `kind` and only decoded in unions, where the tag is required. An event's strings and numbers
    # cannot form a cycle, so gc=False spares each collection a walk of a batch's ~100,000 Structs.
    return msgspec.defstruct(title, [*required, *optional], tag_field="kind", tag=tag,
                             forbid_unknown_fields=True, frozen=True, gc=gc)


# A generation as `derive.validate` accepts it without stall data (its ranges aside: formulas.out_of_range).
# Its V2_ONLY fields are UNSET when absent, None when null: a v1 generation naming one, even as null, is the
# full path's to refuse (unknown_field; `_v1_naming_v2_only`).
Generation = _struct("Generation", "generation", [(n, _GENERATION_TYPES[n]) for n in REQUIRED if n != "kind"],
                     [(n, _GENERATION_TYPES[n], "ok") if n == "status" else (n, Optional[_GENERATION_TYPES[n]], None)
                      for n in sorted(KNOWN - set(REQUIRED))]
                     + [(n, Union[_GENERATION_TYPES[n], None, msgspec.UnsetType], msgspec.UNSET) for n in V2_ONLY])
# The v2 phases as validate_phase accepts them (its SPEC); stall data or P/D fields send one to the full path.
PHASES = {kind: _struct(kind.title().replace("_", ""), kind,
                        [("schema_version", Literal[PHASE_VERSION]), ("request_id", _TYPES["request_id"])]
                        + [(n, _TYPES[n]) for n in required],
                        [(n, Optional[_TYPES[n]], None) for n in optional + either
                         if n not in V2_OPTIONAL + PD_FIELDS])
          for kind, (required, optional, either) in SPEC.items()}
_EVENT = Union[(Generation, *PHASES.values())]
Envelope = _struct("Envelope", "batch", [("schema_version", _Version),
                                         ("events", Annotated[list[_EVENT], msgspec.Meta(min_length=1)])], [], gc=True)
_DECODER = msgspec.json.Decoder(Union[_EVENT, Envelope])
_EVENT_DECODER = msgspec.json.Decoder(_EVENT)
# Events left undecoded, to take one by one when the whole fails; the second type only makes the tag required.
_RawEnvelope = _struct("RawEnvelope", "batch", [("schema_version", _Version),
                                                ("events", Annotated[list[msgspec.Raw], msgspec.Meta(min_length=1)])],
                       [], gc=True)
_RAW_ENVELOPE = msgspec.json.Decoder(Union[_RawEnvelope, _struct("NotAnEnvelope", "", [], [])])
_PHASE_KIND = {struct: kind for kind, struct in PHASES.items()}
GENERATIONS_ONLY = {Generation}  # the types of a batch that is generations only
# Each Struct's label fields, for the control-character rule (contract.has_control).
_LABELS = {t: tuple(n for n in t.__struct_fields__ if n in LABEL_FIELDS) for t in (Generation, *PHASES.values())}


_UNSET = msgspec.UNSET
_VERSION = attrgetter("schema_version")


def _v1_naming_v2_only(events) -> bool:
    """Whether a v1 generation among `events` names a V2_ONLY field. Versions are read in C and only a
    message with a v1 event is walked (scanning its bytes cost +5 ms per 20,000 v2 generations). The fields
    are spelled out, as a loop over V2_ONLY took 2-5x as long; tests refuse a v1 event naming each."""
    return 1 in map(_VERSION, events) and any(
        type(e) is Generation and e.schema_version == 1
        and (e.prefill_replica is not _UNSET or e.decode_replica is not _UNSET or e.kv_transfer_s is not _UNSET
             or e.streamed is not _UNSET)
        for e in events)


def given(value):
    """A V2_ONLY field of a Generation, None when absent (UNSET) or null."""
    return None if value is _UNSET else value


def attr(e, name: str):
    """A Struct's field (None where its kind has none): the accessor for rules written on dicts
    (phase_events.check_across, join.completes)."""
    return getattr(e, name, None)


def accepted(e, kind: str, latest: float) -> bool:
    """Whether the full path takes this phase Struct as it is: epochs within the clock, and check_across."""
    for name in _EPOCHS:
        value = getattr(e, name, None)
        if value is not None and value > latest:
            return False
    return check_across(kind, e, attr) is None


def phase_fields(e, kind: str) -> dict:
    """A phase Struct `accepted` took, as validate_phase gives its fields."""
    out = {"kind": kind}
    for name in e.__struct_fields__:
        value = getattr(e, name)
        if value is not None and name != "schema_version":  # nulls dropped, as validate_phase does
            out[name] = value
    return out


def decoded_events(raw: bytes, max_batch: int):
    """A message's events as Structs (an envelope's in a list, a lone event in a tuple), or None when any
    is not one: the full path's to name."""
    # msgspec refuses a lone surrogate escape (the full path names it not_utf8), and objects nested past the
    # recursion limit raise RecursionError (arrays a DecodeError): malformed_json on the full path.
    message = _decoded(_DECODER, raw)
    if message is None:
        return None
    events = message.events if type(message) is Envelope else (message,)
    bad = len(events) > max_batch or (may_hold_control(raw) and any(map(_holds_control, events)))
    return None if bad or _v1_naming_v2_only(events) else events


def message_events(raw: bytes | None, bucket: Bucketer, max_bytes: int, now: float, max_batch: int = MAX_BATCH,
                   internal: bool = False, oldest: float = MIN_T0, decoded=...) -> tuple[list, bool]:
    """A message's events in order, and whether its Structs are an envelope's: the C decoder's Struct where it
    takes an event, else the full path's answer (`derive.process_event`, or `derive.process_message` for a
    message it answers whole: not an envelope, not JSON...). `decoded`: `decoded_events`' answer, if known."""
    latest = now + MAX_DURATION_S
    if raw is not None and len(raw) <= max_bytes:
        events = decoded_events(raw, max_batch) if decoded is ... else decoded
        if events is not None and (generations_only(events) or all(_taken(e, latest) for e in events)):
            return events, type(events) is list
        parts = raw_events(raw)
        out = _one_by_one(parts, raw, bucket, now, internal, oldest) if parts and len(parts) <= max_batch else None
        if out is not None:
            return out, True
    return process_message(raw, bucket, max_bytes, now, max_batch, internal, oldest), False


def generations_only(events) -> bool:
    """Whether a message's events are all Generations: a check in C, or one look at a lone event (a tuple)."""
    return type(events[0]) is Generation if type(events) is tuple else set(map(type, events)) <= GENERATIONS_ONLY


def _taken(e, latest: float) -> bool:
    """Whether a Struct stands as it is: a generation (checked on columns) or a phase `accepted` takes."""
    kind = _PHASE_KIND.get(type(e))
    return kind is None or accepted(e, kind, latest)


def _one_by_one(parts: list, raw: bytes, bucket: Bucketer, now: float, internal: bool, oldest: float) -> list | None:
    """An envelope `decoded_events` refused, event by event; None if one needs its whole message (a huge int...)."""
    structs = [_decoded(_EVENT_DECODER, part) for part in parts]
    taken = [e for e in structs if e is not None]
    control = may_hold_control(raw)
    latest = now + MAX_DURATION_S
    # Mostly a few bad events among generations: check the list at once, as `decoded_events` does, and visit
    # only the refused events; a check per event was a third of this function's time (docs/performance/worker.md).
    if (set(map(type, taken)) <= GENERATIONS_ONLY and not (control and any(map(_holds_control, taken)))
            and not _v1_naming_v2_only(taken)):
        refused = [i for i, e in enumerate(structs) if e is None]
    else:
        refused = [i for i, e in enumerate(structs) if e is None or (control and _holds_control(e))
                   or _v1_naming_v2_only((e,)) or not _taken(e, latest)]
    for i in refused:
        structs[i] = full_event(parts[i], i, bucket, now, internal, oldest)
        if structs[i] is None:
            return None
    return structs


def raw_events(raw: bytes) -> list | None:
    """An envelope's events, each left undecoded (msgspec.Raw); None when `raw` is no envelope."""
    envelope = _decoded(_RAW_ENVELOPE, raw)
    return envelope.events if type(envelope) is _RawEnvelope else None


def event_bytes(raw: bytes, e) -> bytes | None:
    """The bytes of an envelope's event the C decoder took as Generation `e` (or of an event equal to it), found
    by its request_id's key: a few C searches (~3 µs), where `raw_events` walks the whole envelope (~39 µs for 100
    events, a fifth of its decode; docs/performance/worker.md). A Generation is a flat object, so its bytes run from the
    last `{` before the key to the first `}` after it, unless a text holds a brace: a span counts only if it
    decodes to a Struct equal to `e`. None when no span does: `raw_events` then finds it."""
    key = b'"request_id":' + msgspec.json.encode(e.request_id)
    at = raw.find(key)
    for _ in range(_TRIES):  # a copy of the request_id in the same envelope may come first
        if at < 0:
            return None
        start, end = raw.rfind(b"{", 0, at), raw.find(b"}", at)
        if start >= 0 and end >= 0 and _decoded(_EVENT_DECODER, span := raw[start:end + 1]) == e:
            return span
        at = raw.find(key, at + 1)
    return None


_TRIES = 4


def full_event(part, i: int, bucket: Bucketer, now: float, internal: bool, oldest: float):
    """An envelope's event `i` as the full path answers it; None when it answers for the whole message."""
    try:
        part = bytes(part)
        result = process_event(json.loads(part), bucket, now, internal, may_hold_lone_surrogate(part), oldest)
    except (ValueError, RecursionError):
        return None
    return result.in_envelope(i) if type(result) is Rejection else result


def _decoded(decoder, raw):
    """`decoder`'s Struct, or None where msgspec refuses `raw` or it nests past the recursion limit."""
    try:
        return decoder.decode(raw)
    except (msgspec.MsgspecError, RecursionError):
        return None


def _holds_control(e) -> bool:
    return any(has_control(v) for v in map(getattr, repeat(e), _LABELS[type(e)]) if type(v) is str)
