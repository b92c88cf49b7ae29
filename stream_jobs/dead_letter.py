"""A dead letter's record, the one shape both the `dead_letters` table and
the dead-letter topic get, with no prompt or response text in it.

A rejected event can carry anything its sender put in it, a `prompt` field
included. A dead letter keeps the reason, the detail (which names fields,
never a payload), the field names, and the values of the contract's fields
only (docs/delivery.md, "What a dead letter keeps"):

* a message that parses as a JSON object keeps its structure, with the
  value of every field the contract does not define replaced by null; a
  known field's text longer than the contract allows, and an object or a
  list where the contract has a scalar, are replaced by null too;
* a message that does not parse as a JSON object (malformed JSON, not
  UTF-8, too deep, a bare string or list, an OTLP message) keeps nothing of
  its bytes: only its size, the reason and the detail. A prefix of it could
  be the prompt itself.

Pure: no Kafka, no store.
"""

from __future__ import annotations

import base64
import json
import re

from .contract import LABEL_FIELDS, escape_control
from .derive import KNOWN_V2
from .join import JOINED_IN_INGEST
from .phase_events import PHASE_KINDS, SPEC
from . import reasons as R

# Lists and objects of the contract: an envelope's events, the join's
# records (an orphan's phases by kind, a note's kinds, the phases topic's
# [timestamp, fields] pairs). Their items are redacted by the same rule.
CONTAINERS = frozenset({"events", "phases", "kinds"})
KNOWN_NAMES = (KNOWN_V2 | {name for spec in SPEC.values() for names in spec for name in names}
               | CONTAINERS | set(PHASE_KINDS) | {"reason", "detail"})
_TEXT_LIMIT = 64  # a known text field without a label limit (kind, status, reason, detail)
# An unknown field's name is kept when it looks like one (`prompt`,
# `messages`); any other name (text with spaces, ...) is replaced by its
# position, "#3": a name can hold text as well as a value can.
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_.\-]{0,63}")
_DETAIL_LIMIT = 400


def redact(value, key: str | None = None):
    """`value` with every value outside the contract's fields replaced by null."""
    if isinstance(value, dict):
        return {(k if k in KNOWN_NAMES or _NAME.fullmatch(k) else f"#{i}"): (redact(v, k) if k in KNOWN_NAMES else None)
                for i, (k, v) in enumerate(value.items())}
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
    """The stored payload of a rejected message: its redacted JSON, at most
    `cap` bytes of it, base64; "" when it does not parse as JSON (or
    `parse` is False: a message of another encoding)."""
    if not raw or not parse or cap <= 0:
        return ""
    try:
        event = json.loads(raw)
        if not isinstance(event, dict):
            return ""  # a bare string or list has no field names: nothing of it is known
        # ASCII (\u escapes): cut at `cap` it stays decodable text.
        body = json.dumps(redact(event), ensure_ascii=True, separators=(",", ":")).encode("ascii")
    except (ValueError, RecursionError, UnicodeError):
        return ""  # malformed, too deep, not UTF-8, a lone surrogate: nothing of it is kept
    return base64.b64encode(body[:cap]).decode()


def record(reason: str, detail: str, raw: bytes | None, source: dict, now: float, cap: int,
           parse: bool = True, kept: str | None = None) -> dict:
    """The dead letter of a rejected message (DLQ_COLUMNS of the sink).
    `kept`: its `payload`, when the caller has it already (an envelope's
    rejected events share their message's)."""
    return {"ts": now, "reason": reason, "detail": escape_control(detail[:_DETAIL_LIMIT]),
            "payload": payload(raw, cap, parse) if kept is None else kept,
            "payload_size": len(raw or b""), **source}


def refused_row(row: dict, code: int | None, message: str, now: float) -> dict:
    """The dead letter of a derived row the store refused for good
    (refusals.isolate): its contract fields, and the store's error."""
    fields = {k: v for k, v in row.items() if k in KNOWN_NAMES}
    body = json.dumps(redact(fields), ensure_ascii=True, default=str).encode()
    return {"ts": now, "reason": R.STORE_REFUSED,
            "detail": escape_control(f"the store refused this row (code {code}): {message}"[:_DETAIL_LIMIT]),
            "payload": base64.b64encode(body).decode(), "payload_size": len(body),
            **{k: row[k] for k in ("src_topic", "src_partition", "src_offset")}}
