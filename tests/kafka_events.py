"""Reading what the emitter put on a topic in tests: a message is one event
or an envelope of many (the Meter's default, producers/envelopes.py)."""

from __future__ import annotations

import json


def unwrap(value: bytes) -> list[dict]:
    """One Kafka message's events, in their order."""
    body = json.loads(value)
    return body["events"] if isinstance(body, dict) and body.get("kind") == "batch" else [body]
