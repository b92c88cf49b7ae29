"""A dead letter's record, the one shape both the `dead_letters` table and the dead-letter topic get. It holds no
prompt or response text: only the reason, the detail, the size, the field names and the contract's fields' values.
What each kind of message keeps, and why nothing of one that is not a JSON object (a prefix could be the prompt
itself), is in docs/delivery.md, "What a dead letter keeps". Pure: no Kafka, no store.
"""

from __future__ import annotations

import base64
import json
import re

import msgspec

from .contract import LABEL_FIELDS, escape_control
from .derive import KNOWN_V2
from .fast_decode import event_bytes, raw_events
from .join import JOINED_IN_INGEST
from .phase_events import PHASE_KINDS, SPEC
from . import reasons as R

# The contract's lists and objects, whose items are redacted by the same rule: an envelope's events, the join's
# records (an orphan's phases by kind, a note's kinds, the phases topic's [timestamp, fields] pairs).
CONTAINERS = frozenset({"events", "phases", "kinds"})
KNOWN_NAMES = (KNOWN_V2 | {name for spec in SPEC.values() for names in spec for name in names}
               | CONTAINERS | set(PHASE_KINDS) | {"reason", "detail"})
_TEXT_LIMIT = 64  # a known text field without a label limit (kind, status, reason, detail)
# An unknown field's name is kept if it looks like one (`prompt`, `messages`), else replaced by its position,
# "#3": a name can hold text as well as a value can.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_DETAIL_LIMIT = 400
_SCALARS = frozenset({int, float, bool})


def redact(value, key: str | None = None):
    """`value` with every value outside the contract's fields replaced by null."""
    if isinstance(value, dict):
        out = {}
        for i, (k, v) in enumerate(value.items()):
            if k not in KNOWN_NAMES:
                out[k if _NAME.fullmatch(k) else f"#{i}"] = None
            elif v is None or type(v) in _SCALARS:  # the common fields, without a call
                out[k] = v
            elif type(v) is str:
                out[k] = None if k in CONTAINERS or len(v) > LABEL_FIELDS.get(k, _TEXT_LIMIT) else v
            else:
                out[k] = redact(v, k)
        return out
    if isinstance(value, list):
        if key == "kinds":
            return [v if v in PHASE_KINDS or v == JOINED_IN_INGEST else None for v in value]
        return [redact(v, key) for v in value] if key in CONTAINERS else None
    if isinstance(value, str):
        if key is None or key in CONTAINERS or len(value) > LABEL_FIELDS.get(key, _TEXT_LIMIT):
            return None  # text outside any known field, or longer than the contract lets it be
        return value
    return value  # a number, a bool, null


def payload(raw: bytes | None, cap: int, parse: bool = True) -> str:
    """A rejected message's stored payload: its redacted JSON, cut at `cap` bytes, base64; "" when it does not
    parse as JSON or `parse` is False (a message of another encoding)."""
    return _kept(raw, cap) if raw and parse and cap > 0 else ""


def payloads(raw: bytes | None, cap: int, places: list, parse: bool = True, taken: list | None = None) -> list[str]:
    """The payload of each dead letter of one message, by its place (contract.Rejection.event): the whole
    message's for None, else that event of its envelope alone. `taken`: each place's Generation where the C
    decoder took it (None where not), found by fast_decode.event_bytes. The others are located once for all:
    located per dead letter, an envelope of 10,000 refused events was walked 10,000 times."""
    whole = payload(raw, cap, parse) if None in places else ""
    if not (raw and parse and cap > 0):
        return [whole if place is None else "" for place in places]
    found = [None if e is None else event_bytes(raw, e) for e in taken or ()] or [None] * len(places)
    lost = any(place is not None and part is None for place, part in zip(places, found))
    parts = _events_of(raw) if lost else []

    def kept(place: int, part) -> str:
        if part is None and 0 <= place < len(parts):
            part = parts[place]
        return "" if part is None else _kept(part, cap)
    return [whole if place is None else kept(place, part) for place, part in zip(places, found)]


def _events_of(raw: bytes) -> list:
    """An envelope's events as msgspec.Raw (parsed by json.loads where msgspec refuses the envelope: NaN...);
    [] when there are none, with no prefix of the envelope kept instead (docs/delivery.md)."""
    parts = raw_events(raw)
    if parts is not None:
        return parts
    try:
        events = json.loads(raw).get("events")
    except (ValueError, RecursionError, UnicodeError, AttributeError):
        return []
    return events if isinstance(events, list) else []


def _kept(value, cap: int) -> str:
    """The redacted JSON of a message or an envelope's event (bytes, msgspec.Raw or parsed), cut at `cap` bytes,
    base64; "" if it is not a JSON object. ASCII (\\u escapes), so the cut stays decodable. Only what the cut keeps
    of a longer value is parsed and redacted; a shorter one is cheaper parsed whole (docs/performance/worker.md)."""
    try:
        whole = not isinstance(value, (bytes, msgspec.Raw)) or len(value) <= cap
        event = _parsed(value) if whole else _parsed(value, _FIELDS)
        if not isinstance(event, dict):
            return ""  # a bare string or list has no field names: nothing of it is known
        text = (_JSON.encode(redact(event)) if whole else _redacted_json(event, cap)).encode("ascii")
    except (ValueError, RecursionError, UnicodeError):
        return ""  # malformed, too deep, not UTF-8, a lone surrogate: nothing of it is kept
    return base64.b64encode(text[:cap]).decode()


# msgspec decoders of any JSON value, and of an object or array whose values stay msgspec.Raw.
_ANY = msgspec.json.Decoder().decode
_FIELDS = msgspec.json.Decoder(dict[str, msgspec.Raw]).decode
_ITEMS = msgspec.json.Decoder(list[msgspec.Raw]).decode


def _parsed(value, decode=_ANY):
    """Bytes or msgspec.Raw parsed as json.loads would: by msgspec's `decode`, else by json.loads (NaN, 1E400...)."""
    if not isinstance(value, (bytes, msgspec.Raw)):
        return value
    try:
        return decode(value)
    except msgspec.MsgspecError:
        return json.loads(bytes(value))


def _items(value) -> list | None:
    """The items of a JSON array, each left as msgspec.Raw; None for any other value."""
    if type(value) is not msgspec.Raw:
        return value if isinstance(value, list) else None
    try:
        return _ITEMS(value)
    except msgspec.ValidationError:
        return None


def _redacted_json(event: dict, cap: int) -> str:
    """The part of json.dumps(redact(event)) a cut at `cap` keeps, built a field or a container's item at a time."""
    text = ""
    for piece in _pieces(event):
        text += piece
        if len(text) >= cap:
            break
    return text


def _pieces(event: dict):
    yield "{"
    for i, (k, v) in enumerate(event.items()):
        name = k if k in KNOWN_NAMES or _NAME.fullmatch(k) else f"#{i}"
        yield ("," if i else "") + _JSON.encode(name) + ":"
        items = _items(v) if k in CONTAINERS and k != "kinds" else None
        if items is not None:
            yield "["
            for j, item in enumerate(items):
                yield ("," if j else "") + _JSON.encode(redact(_parsed(item), k))
            yield "]"
        else:
            yield _JSON.encode(redact(_parsed(v), k) if k in KNOWN_NAMES else None)
    yield "}"


_JSON = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"))


def record(reason: str, detail: str, raw: bytes | None, source: dict, now: float, cap: int,
           parse: bool = True, kept: str | None = None) -> dict:
    """The dead letter of a rejected message (the sink's DLQ_COLUMNS). `kept`: its payload if the caller has it
    (`payloads`: each refused event of an envelope keeps its own)."""
    return {"ts": now, "reason": reason, "detail": escape_control(detail[:_DETAIL_LIMIT]),
            "payload": payload(raw, cap, parse) if kept is None else kept,
            "payload_size": len(raw or b""), **source}


def duplicate_detail(request_id: str) -> str:
    """A duplicate's dead-letter detail, which also names it on a re-read (ledger.Stored.duplicates)."""
    return f"request_id {request_id[:128]} already stored"


def refused_row(row: dict, code: int | None, message: str, now: float) -> dict:
    """The dead letter of a row the store refused for good (refusals.isolate): its contract fields, the error."""
    fields = {k: v for k, v in row.items() if k in KNOWN_NAMES}
    body = json.dumps(redact(fields), ensure_ascii=True, default=str).encode()
    return record(R.STORE_REFUSED, f"the store refused this row (code {code}): {message}", body,
                  {k: row[k] for k in ("src_topic", "src_partition", "src_offset")}, now, 0,
                  kept=base64.b64encode(body).decode())
