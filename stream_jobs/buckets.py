"""Input-length buckets: edges -> labels, and the lookup used per event. Labels derive from the edges
(512 -> "512", 2048 -> "2k", 1000 -> "1k"), so a custom edge list needs no hand-written label list.
"""

from __future__ import annotations

import bisect

PRESETS = {
    "default": (0, 512, 2048, 8192, 32768),
    # LiteLLM's input-length labels: 0-1k, 1k-4k, 4k-16k, 16k-64k, 64k+.
    "litellm": (0, 1000, 4000, 16000, 64000),
}


def parse_edges(spec: str | tuple | list) -> tuple[int, ...]:
    """'0,512,2048' or a preset name -> validated ascending edges starting at 0."""
    if isinstance(spec, str):
        name = spec.strip().lower()
        if name in PRESETS:
            return PRESETS[name]
        try:
            edges = tuple(int(part) for part in name.split(",") if part.strip())
        except ValueError:
            raise ValueError(f"bucket edges {spec!r}: expected integers like 0,512,2048 or a preset "
                             f"({', '.join(PRESETS)})") from None
    else:
        edges = tuple(int(e) for e in spec)
    if not edges or edges[0] != 0:
        raise ValueError(f"bucket edges {spec!r}: the first edge must be 0")
    if any(b <= a for a, b in zip(edges, edges[1:])):
        raise ValueError(f"bucket edges {spec!r}: edges must be strictly increasing")
    return edges


def _short(n: int) -> str:
    for unit in (1024, 1000):
        if n and n % unit == 0:
            return f"{n // unit}k"
    return str(n)


def labels(edges: tuple[int, ...]) -> list[str]:
    return [f"{_short(a)}-{_short(b)}" for a, b in zip(edges, edges[1:])] + [f"{_short(edges[-1])}+"]


class Bucketer:
    """Maps input_tokens to a label; [lo, hi) intervals, last one open."""

    def __init__(self, edges: tuple[int, ...]):
        self.edges = edges
        self.labels = labels(edges)

    def __call__(self, input_tokens: int) -> str:
        return self.labels[bisect.bisect_right(self.edges, input_tokens) - 1]
