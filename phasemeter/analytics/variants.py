"""What a band holds: abandoned generations in or out, and which prefill throughput.

* `--abandoned include|exclude` (default include: no survivorship bias, docs/metrics.md).
  Either way every row counts the abandoned generations of its cell:
  `abandoned` = `abandoned_prefill` (no first token) + `abandoned_decode`.
  Excluded, they leave `n` and every percentile, never the counts.
* `--prefill total|engine|uncached` (default total): which prefill throughput the
  `prefill_*` columns hold; the SQL picks it from a bound parameter.
* `--by prefill_replica|decode_replica`: one row per prefill/decode
  disaggregated pool too (schema/0027), a bound parameter as well.

The rollup (generations_minute) holds abandoned rows inside its sketches, only
`prefill_tps` and no pools, so `exact_only` names what forces the exact path.
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
BY_CHOICES = ("prefill_replica", "decode_replica")


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


def check_by(kind: str, by: str | None, rebucket: bool) -> None:
    """`--by`: a P/D pool column, for the throughput bands and the latency view."""
    if by is None:
        return
    if by not in BY_CHOICES:
        raise ArgError(f"--by {by!r}: expected one of {', '.join(BY_CHOICES)}")
    if kind == "stalls":
        raise ArgError("--by with --stalls is not supported (the stall view is per model and bucket): drop --by")
    if rebucket:
        raise ArgError("--by with --buckets is not supported (the per-pool query reads the stored bucket): "
                       "drop --buckets")


def exact_only(abandoned: str, prefill: str, by: str | None = None) -> dict[str, str]:
    """{flag as typed: why the rollup cannot answer it}; empty when it can."""
    why = {}
    if by is not None:
        why[f"--by {by}"] = "the rollup keeps no prefill/decode pools"
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
    if meta.get("by") is not None:
        lines.append(f"per prefill/decode pool: {meta['by']} ('' = the event named none: a unified server)"
                     + ("; kv = the KV cache transfer (kv_transfer_s), rows that carry one"
                        if meta["kind"] == "latency" else ""))
    if meta.get("abandoned_split", True):
        lines.append("abandoned = abandoned_prefill (before the first token: no prefill/ttft value) "
                     "+ abandoned_decode (after it)")
    else:
        lines.append("abandoned by phase: not kept by the rollup (generations_minute has abandoned_n only), "
                     "so abandoned_prefill/abandoned_decode are unknown ('-'); --exact splits them")
    return lines
