"""The stall alert family on a real store: v2 events with chunk timing,
through the worker's derivation, then `phasemeter alerts check`: a rise of
stalled streams fires PhasemeterDecodeStalls to the decode runbook's
KV-cache section, a steady share does not, and rows without chunk data are
not in its frame at all."""

from __future__ import annotations

import contextlib
import io
import json
from datetime import datetime, timezone

import pytest
from clock import days_ago

pytestmark = pytest.mark.integration
T0 = days_ago(3)


def rows(start: float, minutes: int, stall_every: int | None, chunks: bool = True, offset0: int = 0) -> list[dict]:
    from phasemeter.stream_jobs.buckets import Bucketer, parse_edges
    from phasemeter.stream_jobs.derive import process

    bucket, out = Bucketer(parse_edges("default")), []
    for i in range(minutes * 20):
        ev = {"schema_version": 2, "kind": "generation", "request_id": f"s-{offset0 + i}", "model": "m",
              "t0": start + i * 3.0, "ttft_s": 0.3, "e2e_s": 4.0, "input_tokens": 300, "output_tokens": 120}
        if chunks:
            stalled = stall_every is not None and i % stall_every == 0
            ev.update(chunks=120, max_gap_s=1.5 if stalled else 0.04, gaps_over=1 if stalled else 0,
                      gap_threshold_s=0.5)
        row = process(json.dumps(ev).encode(), bucket, 1_000_000, now=start + 86400 * 5)
        assert isinstance(row, dict), row
        out.append({**row, "src_topic": "t", "src_partition": 0, "src_offset": offset0 + i})
    assert len(out) == minutes * 20 > 0  # three seconds apart, each checked above
    return out


def _check(at: float) -> tuple[int, dict]:
    from phasemeter.cli.main import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        rc = main(["alerts", "check", f"--at={datetime.fromtimestamp(at, timezone.utc).isoformat()}",
                   "--format", "json"])
    return rc, json.loads(out.getvalue())


def test_stalls_rise_fires_the_stall_alert_only(tmp_path, monkeypatch):
    from phasemeter.settings import Settings
    from phasemeter.store.client import connect
    from phasemeter.store.migrate import migrate
    from phasemeter.stream_jobs.sink import Sink

    monkeypatch.setenv("PHASEMETER_DATA_DIR", str(tmp_path / "d"))
    for var in ("CLICKHOUSE_URL", "PHASEMETER_SLOS"):
        monkeypatch.delenv(var, raising=False)
    client = connect(Settings.from_env())
    migrate(client)
    sink = Sink.over(client, "chdb")
    # A day of 1-in-100 stalls, then 15 minutes of 1 in 5; and a model without chunk data.
    sink.write(rows(T0, 24 * 60, 100), [])
    sink.write(rows(T0 + 86400, 15, 5, offset0=10**6), [])
    sink.write([dict(r, model="plain", src_offset=r["src_offset"] + 2 * 10**6)
                for r in rows(T0 + 86400 - 3600, 75, None, chunks=False)], [])
    client.close()
    rc, doc = _check(T0 + 86400 + 15 * 60)
    stalls = [r for r in doc["results"] if r["rule"] == "decode-stalls"]
    assert rc == 1 and [(r["model"], r["state"]) for r in stalls] == [("m", "firing")], stalls
    assert stalls[0]["current"] == pytest.approx(0.2) and stalls[0]["baseline"] == pytest.approx(0.01)
    assert stalls[0]["runbook"].startswith("docs/runbooks/decode.md#a-kv-cache")
    # The throughput rules do not fire on it: decode_tps did not change.
    assert all(r["state"] != "firing" for r in doc["results"] if r["rule"] != "decode-stalls")
    # Before the rise: the same 1 % as its baseline, silent.
    rc, doc = _check(T0 + 86400 - 60)
    assert rc == 0 and {r["state"] for r in doc["results"] if r["rule"] == "decode-stalls"} == {"ok"}
