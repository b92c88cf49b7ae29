"""Deliver firing alerts in Alertmanager's webhook JSON shape (version "4").

Why that shape: every on-call tool that accepts Alertmanager webhooks
(PagerDuty/Opsgenie bridges, Slack relays, custom receivers) can take
phasemeter alerts unchanged. One POST per alertname, like an Alertmanager
route grouped by `alertname`, so prefill and decode page separately.
"""

from __future__ import annotations

import base64
import hashlib
import json
import urllib.error
import urllib.request
from datetime import timezone
from urllib.parse import urlsplit, urlunsplit

from phasemeter.alerts.evaluate import Result

RECEIVER = "phasemeter"
ZERO_TIME = "0001-01-01T00:00:00Z"  # Alertmanager's endsAt for a still-firing alert


class WebhookError(RuntimeError):
    pass


def _utc(at) -> str:
    return at.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


def labels_of(r: Result) -> dict:
    return {"alertname": r.rule.alertname, "phase": r.rule.phase, "model": r.model,
            "input_bucket": r.bucket, "severity": r.rule.severity, "rule": r.rule.name}


def alert_of(r: Result, runbook_url: str, generator_url: str) -> dict:
    labels = labels_of(r)
    # Alertmanager fingerprints are a hash of the label set: stable across checks.
    fingerprint = hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]
    return {
        "status": "firing",
        "labels": labels,
        "annotations": {
            "summary": (f"KV transfer of {r.model} {r.bucket} (p{r.rule.percentile:g} {r.rule.metric}) rose with "
                        "TTFT, prefill compute steady" if r.rule.transfer else
                        f"decode stalls of {r.model} {r.bucket}: {r.rule.metric} rose" if r.rule.rises else
                        f"{r.rule.phase} slow tail (p{r.rule.percentile:g} {r.rule.metric}) of {r.model} "
                        f"{r.bucket} dropped {-r.change:.0%}"),
            "description": (f"{r.rule.metric} {r.current:,.4g} vs baseline "
                            f"{r.baseline:,.4g} ({r.rule.baseline.describe()}; {r.n_current} / "
                            f"{r.n_baseline} samples); {r.evidence}") if r.rule.rises else
                           (f"p{r.rule.percentile:g} {r.rule.metric} {r.current:,.1f} vs baseline "
                            f"{r.baseline:,.1f} ({r.rule.baseline.describe()}; {r.n_current} / "
                            f"{r.n_baseline} samples); {r.evidence}"),
            "runbook_url": runbook_url,
        },
        "startsAt": _utc(r.at),
        "endsAt": ZERO_TIME,
        "generatorURL": generator_url,
        "fingerprint": fingerprint,
    }


def _common(dicts: list[dict]) -> dict:
    first = dicts[0]
    return {k: v for k, v in first.items() if all(d.get(k) == v for d in dicts[1:])}


def payloads(firing: list[Result], runbook_url, external_url: str = "", extra: list[dict] = ()) -> list[dict]:
    """One Alertmanager v4 message per alertname; `runbook_url(rule) -> str`.
    `extra`: alerts already in Alertmanager's shape (the SLO burn-rate alerts)."""
    groups: dict[str, list[dict]] = {}
    for r in firing:
        groups.setdefault(r.rule.alertname, []).append(alert_of(r, runbook_url(r.rule), external_url))
    for alert in extra:
        groups.setdefault(alert["labels"]["alertname"], []).append(alert)
    out = []
    for name, alerts in groups.items():
        out.append({
            "version": "4",
            "groupKey": f'{{}}:{{alertname="{name}"}}',
            "truncatedAlerts": 0,
            "status": "firing",
            "receiver": RECEIVER,
            "groupLabels": {"alertname": name},
            "commonLabels": _common([a["labels"] for a in alerts]),
            "commonAnnotations": _common([a["annotations"] for a in alerts]),
            "externalURL": external_url,
            "alerts": alerts,
        })
    return out


def safe_url(url: str) -> str:
    """The URL without user:password and query (tokens live there) for messages."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    netloc = host + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, "", ""))


def post(url: str, payload: dict, timeout_s: float = 10.0) -> int:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise WebhookError(f"--webhook {safe_url(url) or '?'}: expected an http(s) URL")
    headers = {"Content-Type": "application/json", "User-Agent": "phasemeter-alerts"}
    if parts.username is not None:  # credentials in the URL become Basic auth, never part of the host
        cred = f"{parts.username}:{parts.password or ''}".encode()
        headers["Authorization"] = "Basic " + base64.b64encode(cred).decode()
    netloc = parts.hostname + (f":{parts.port}" if parts.port else "")
    target = urlunsplit((parts.scheme, netloc, parts.path or "/", parts.query, ""))
    req = urllib.request.Request(target, data=json.dumps(payload).encode(), headers=headers, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=timeout_s) as resp:
            return resp.status
    except urllib.error.HTTPError as exc:
        raise WebhookError(f"webhook {safe_url(url)} answered HTTP {exc.code} {exc.reason}") from None
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        raise WebhookError(f"webhook {safe_url(url)} unreachable: {reason}") from None


def fingerprinted(labels: dict, annotations: dict, at, generator_url: str) -> dict:
    """An alert in Alertmanager's shape from its labels (the SLO burn-rate alerts)."""
    return {"status": "firing", "labels": labels, "annotations": annotations, "startsAt": _utc(at),
            "endsAt": ZERO_TIME, "generatorURL": generator_url,
            "fingerprint": hashlib.sha256(json.dumps(labels, sort_keys=True).encode()).hexdigest()[:16]}


def deliver(url: str, firing: list[Result], runbook_url, external_url: str = "", extra: list[dict] = ()) -> int:
    """POST every group; returns how many messages were delivered."""
    messages = payloads(firing, runbook_url, external_url, extra)
    for message in messages:
        post(url, message)
    return len(messages)
