"""Read commands through the worker: the CLI side (docs/reads-through-the-worker.md).

While a worker owns the embedded store (or with --via), a read command is
not run here on an HttpRunner, which would need pandas to rebuild each frame
and to render it (half a second of imports). The CLI sends the worker the
command as typed (its argv, after the relative-time glue), its own settings
and the text of the operator's files it names; the worker parses the same
argv with the same parser and runs the same command function on its own
runner (phasemeter.query.served, POST /query/command in stream_jobs/web.py).
Back come stdout, stderr, the exit code and any --out file's bytes, which
this side writes. No SQL and no values cross as text: the worker binds every
parameter as a direct run would.

If the worker cannot serve (an older worker, store down, unreachable, a
crash), the command runs here as before, so its errors and exit codes are
the ones it always had.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import sys

from phasemeter.alerts import cli as alerts_cli
from phasemeter.analytics import cli as analytics_cli
from phasemeter.cli import commands, dlq, slo
from phasemeter.files import snapshot
from phasemeter.settings import Settings

# The commands a worker runs for the CLI: each reads through open_runner()
# and writes nothing but its output and --out. `alerts check --webhook`
# stays here: the delivery is the caller's, not the worker's.
SERVED = (commands.cmd_query, commands.cmd_chart, analytics_cli.cmd_latency, slo.cmd_slo,
          alerts_cli.cmd_check, alerts_cli.cmd_backtest, dlq.inspect)
TIMEOUT_S = 120.0  # HttpRunner's: a long window on the exact path takes a while


def servable(args) -> bool:
    return args.func in SERVED and not getattr(args, "webhook", None)


def request_for(args, argv: list[str], settings: Settings) -> dict:
    named = [getattr(args, "slos", None), getattr(args, "rules", None), settings.slos]
    files = snapshot(sorted({p for p in named if p and p != "example"}))  # `example`: the shipped file
    shared = {f.name: getattr(settings, f.name) for f in dataclasses.fields(settings) if not f.metadata["secret"]}
    shared["data_dir"] = str(settings.data_path)  # resolved here: the worker's folder is not ours
    return {"argv": list(argv), "settings": shared, "files": files}


def settings_of(request: dict) -> Settings:
    """The worker side: the CLI's settings (secrets stay unset: a served
    command opens no store and no Kafka client)."""
    known = {f.name for f in dataclasses.fields(Settings)}
    return Settings(**{k: v for k, v in request["settings"].items() if k in known})


def worker_for(args, settings: Settings) -> str | None:
    from phasemeter.query.remote import worker_url

    return getattr(args, "via", None) or (worker_url(settings.data_path) if settings.is_embedded else None)


def through_worker(args, argv: list[str], settings: Settings) -> int | None:
    """Exit code of the command run by the worker, or None: run it here."""
    if not servable(args):
        return None
    url = worker_for(args, settings)
    reply = _ask(url, request_for(args, argv, settings)) if url else None
    if reply is None:
        return None
    from phasemeter.query.served import write_file

    for path, data in reply["files"].items():  # before the "wrote ..." line, as a direct run
        write_file(path, base64.b64decode(data))
    sys.stdout.write(reply["stdout"])
    sys.stderr.write(reply["stderr"])
    return int(reply["rc"])


def _ask(url: str, request: dict) -> dict | None:
    # Deferred: urllib.request costs ~40 ms, and this module loads for every command.
    import urllib.error
    import urllib.request

    req = urllib.request.Request(f"{url.rstrip('/')}/query/command", data=json.dumps(request).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(req, timeout=TIMEOUT_S) as resp:
            return json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError):  # HTTPError included: not served, run here
        return None
