"""Prometheus text exposition (format 0.0.4) of the worker's state, for GET /metrics. Hand-written rather
than with prometheus_client: a dozen series, and one dependency less for the worker.
"""

from __future__ import annotations

# health() key -> (metric name, help)
_COUNTERS = {
    "consumed": ("phasemeter_worker_messages_consumed_total", "Kafka records taken by the ingest agent."),
    "accepted": ("phasemeter_worker_generations_stored_total", "Generation rows written to the store."),
    "rejected": ("phasemeter_worker_dead_letters_total", "Records dead-lettered (any reason)."),
    "duplicates": ("phasemeter_worker_duplicates_total", "Duplicate deliveries from gateways (dead-lettered)."),
    "phases_forwarded": ("phasemeter_worker_phases_forwarded_total",
                         "Valid phase events, and notes of generations joined in a batch, forwarded to the join."),
    "joined_in_batch": ("phasemeter_worker_joined_in_batch_total",
                        "Generations whose phases all came in one ingest batch, joined there."),
    "rejoined_dropped": ("phasemeter_worker_rejoined_dropped_total",
                         "Joined generations that were already stored (a re-publish or re-read after a crash)."),
    "store_retries": ("phasemeter_worker_store_retries_total", "Store operations retried (store down/locked)."),
}


def _label(value: str) -> str:
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def render(health: dict, inflight: dict) -> str:
    out: list[str] = []

    def family(name: str, kind: str, help_: str, samples: list[tuple[dict, float]]) -> None:
        out.append(f"# HELP {name} {help_}")
        out.append(f"# TYPE {name} {kind}")
        for labels, value in samples:
            inner = ",".join(f'{k}="{_label(v)}"' for k, v in labels.items())
            out.append(f"{name}{{{inner}}} {value}" if inner else f"{name} {value}")

    cells = [({k: c[k] for k in ("model", "input_bucket", "phase")}, c) for c in inflight["in_flight"]]
    family("phasemeter_inflight_generations", "gauge",
           "Generations started and not ended, per model, input bucket and phase (prefill: no first token yet).",
           [(labels, c["in_flight"]) for labels, c in cells])
    family("phasemeter_inflight_oldest_age_seconds", "gauge",
           "Age of the oldest in-flight generation (now - t0); a stuck prefill shows here before it expires.",
           [(labels, c["oldest_age_s"]) for labels, c in cells])
    family("phasemeter_inflight_awaiting_start", "gauge",
           "first_token/end phases waiting for their start event.", [({}, inflight["awaiting_start"])])
    family("phasemeter_abandon_after_seconds", "gauge", "Expiry after which a generation is abandoned.",
           [({}, inflight["abandon_after_s"])])
    family("phasemeter_join_total", "counter",
           "Join outcomes: phases_joined/partial/duplicate/late, abandoned, orphaned, forgotten markers.",
           [({"what": k}, v) for k, v in sorted(inflight["counts"].items())])
    for key, (name, help_) in _COUNTERS.items():
        family(name, "counter", help_, [({}, health.get(key, 0))])
    family("phasemeter_worker_paused", "gauge",
           "1 while consumption is paused: the store is unavailable, or Kafka refuses what a batch publishes.",
           [({}, 1 if health.get("status") == "paused" else 0)])
    return "\n".join(out) + "\n"
