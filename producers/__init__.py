"""Gateway-side emitter: one JSON event per LLM generation, sent to Kafka.

Needs only the standard library and kafka-python (imported lazily, in the
sender thread). Events carry timings and token counts, never prompt or
response text.
"""

from .emitter import EmitterStats, Meter
from .generation import Generation

__all__ = ["Meter", "Generation", "EmitterStats"]
