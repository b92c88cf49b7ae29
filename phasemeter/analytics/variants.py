"""What a band holds: abandoned generations in or out, and which prefill throughput.

* `--abandoned include|exclude` (default include: no survivorship bias, docs/metrics.md).
  Either way every row counts the abandoned generations of its cell:
  `abandoned` = `abandoned_prefill` (no first token) + `abandoned_decode`.
  Excluded, they leave `n` and every percentile, never the counts.
* `--prefill total|engine|uncached` (default total): which prefill throughput the
  `prefill_*` columns hold; the SQL picks it from a bound parameter.

The rollup (generations_minute) holds abandoned rows inside its sketches and only
`prefill_tps`, so `exact_only` names what forces the exact path.
"""

from __future__ import annotations

from phasemeter.timeparse import ArgError

ABANDONED_CHOICES = ("include", "exclude")
PREFILL_VARIANTS = {
    "total": "prefill_tps = input_tokens / ttft_s (includes queue time: what users feel)",
    "engine": "input_tokens / (ttft_s - queue_s): prefill excluding queue "
              "(none when queue_s is unknown or ttft_s <= queue_s)",
    "uncached": "prefill_tps_uncached = (input_tokens - cached_input_tokens) / "
                "(t_first - (t_scheduled or t0)) (none when cached tokens are unknown)",
}
ABANDONED_COLUMNS = ("abandoned", "abandoned_prefill", "abandoned_decode")
SPLIT_COLUMNS = ABANDONED_COLUMNS[1:]


def check(kind: str, abandoned: str, prefill: str) -> None:
    """Bad values name the flag (the library path gets no argparse `choices`)."""
    if abandoned not in ABANDONED_CHOICES:
        raise ArgError(f"--abandoned {abandoned!r}: expected one of {', '.join(ABANDONED_CHOICES)}")
    if prefill not in PREFILL_VARIANTS:
        raise ArgError(f"--prefill {prefill!r}: expected one of {', '.join(PREFILL_VARIANTS)}")
    if kind == "latency" and prefill != "total":
        raise ArgError(f"--prefill {prefill} applies to throughput bands; the latency view "
                       "(--latency, `phasemeter latency`) has no prefill throughput: drop --prefill")
    if kind == "stalls" and prefill != "total":
        raise ArgError(f"--prefill {prefill} applies to throughput bands; the stall view (--stalls) "
                       "has no prefill throughput: drop --prefill")


def exact_only(abandoned: str, prefill: str) -> dict[str, str]:
    """{flag as typed: why the rollup cannot answer it}; empty when it can."""
    why = {}
    if abandoned == "exclude":
        why["--abandoned exclude"] = ("the rollup's per-minute sketches already contain abandoned generations "
                                      "and cannot take them out")
    if prefill != "total":
        why[f"--prefill {prefill}"] = "the rollup keeps only prefill total (prefill_tps)"
    return why


def prefill_label(prefill: str) -> str:
    """Phase name for column titles, axes and panel titles."""
    return "prefill" if prefill == "total" else f"prefill ({prefill})"


def header_lines(meta: dict) -> list[str]:
    """What the numbers include, for table headers and chart notes."""
    lines = []
    if meta["kind"] == "bands":
        lines.append(f"prefill = {meta['prefill']}: {PREFILL_VARIANTS[meta['prefill']]}")
    if meta["abandoned"] == "include":
        lines.append("abandoned generations (never ended): INCLUDED in n and percentiles (no survivorship bias); "
                     "--abandoned exclude drops them")
    else:
        lines.append("abandoned generations (never ended): EXCLUDED from n and percentiles (--abandoned exclude); "
                     "still counted in the abandoned columns")
    if meta.get("abandoned_split", True):
        lines.append("abandoned = abandoned_prefill (before the first token: no prefill/ttft value) "
                     "+ abandoned_decode (after it)")
    else:
        lines.append("abandoned by phase: not kept by the rollup (generations_minute has abandoned_n only), "
                     "so abandoned_prefill/abandoned_decode are unknown ('-'); --exact splits them")
    return lines
