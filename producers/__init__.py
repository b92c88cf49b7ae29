"""Gateway-side emitter: one JSON event per LLM generation, or phase events
(start / first_token / end, docs/phases.md), sent to Kafka.

Needs only the standard library and kafka-python (imported lazily, in the
sender thread). Events carry timings and token counts, never prompt or
response text.
"""

from .emitter import EmitterStats, Meter
from .generation import Generation
from .phases import PhaseGeneration

__all__ = ["Meter", "Generation", "PhaseGeneration", "EmitterStats"]
