"""Messages of the phases topic, read as the input they are.

Ingest writes {"phases": [[gateway timestamp, phase fields], ...]} (join_agent's `phase_envelopes`), but anyone
may write to the topic, and one foreign message stopped the join agent, and the worker, after every restart. So
each pair must be a phase `validate_phase` accepts, or ingest's note of a generation it joined; anything else
becomes an orphan record (join.orphan), stored as a dead letter; its neighbours are joined as usual. Pure.
"""

from __future__ import annotations

import math

import msgspec

from . import join
from . import reasons as R
from .contract import LABEL_FIELDS, Rejection
from .phase_events import PHASE_KINDS, validate_phase

_loads = msgspec.json.decode
_NOTE_FIELDS = {"kind", "request_id", "kinds"}
_NOT_PAIR = "not a [timestamp, phase] pair"


def read_phases(raw: bytes | None, now: float) -> tuple[list[tuple[float, dict]], list[join.Output]]:
    """A message -> (its valid (timestamp, fields) pairs, orphan records for the rest)."""
    try:
        body = _loads(raw) if raw else None
    except (msgspec.DecodeError, RecursionError) as exc:  # nothing of it travels: it may be any text
        return [], [_orphan(R.MALFORMED_JSON, f"phases topic: {str(exc)[:200]}")]
    if not isinstance(body, dict) or set(body) != {"phases"} or not isinstance(body["phases"], list):
        return [], [_orphan(R.NOT_OBJECT, 'phases topic: expected {"phases": [[timestamp, phase], ...]}')]
    pairs, refused = [], []
    for i, item in enumerate(body["phases"]):
        fields = item[1] if isinstance(item, list) and len(item) == 2 and isinstance(item[1], dict) else None
        bad = Rejection(R.WRONG_TYPE, _NOT_PAIR) if fields is None else _check(item[0], fields, now)
        if bad is None:
            pairs.append((item[0], fields))
        else:
            refused.append(_orphan(bad.reason, f"phases[{i}]: {bad.detail}", fields))
    return pairs, refused


def _check(ts, fields: dict, now: float) -> Rejection | None:
    if type(ts) not in (int, float) or not math.isfinite(ts):
        return Rejection(R.WRONG_TYPE, "the timestamp is not a finite number")
    kind = fields.get("kind")
    if kind == join.JOINED_IN_INGEST:
        rid, kinds = fields.get("request_id"), fields.get("kinds")
        ok = (set(fields) == _NOTE_FIELDS and type(rid) is str and 0 < len(rid) <= LABEL_FIELDS["request_id"]
              and isinstance(kinds, list) and all(k in PHASE_KINDS for k in kinds))
        return None if ok else Rejection(R.BAD_VALUE, f"a malformed {kind} note")
    if kind not in PHASE_KINDS:
        return Rejection(R.BAD_KIND, f"kind={str(kind)[:40]!r}")
    checked = validate_phase({**fields, "schema_version": 2}, now)
    return checked if isinstance(checked, Rejection) else None


def _orphan(reason: str, detail: str, fields: dict | None = None) -> join.Output:
    rid = fields.get("request_id") if fields is not None else None
    rid = rid if type(rid) is str else ""
    ph = {str(fields.get("kind"))[:40]: fields} if fields is not None else {}
    return rid, join.orphan(rid, reason, detail, ph)
