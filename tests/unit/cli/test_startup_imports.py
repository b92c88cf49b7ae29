"""`phasemeter --help`, `phasemeter config` and building the parser import no
heavy dependency (docs/performance/reads.md): those load only in the commands that use them.

No timing here (a shared 2-core machine is too noisy for that; see
bench/bench_cli_startup.py): each case runs in a fresh interpreter and the
test asserts which modules it imported. On a failure the message names the
line that first imported each heavy package.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# The worker's, the store's and the charts' dependencies, plus the optional
# ingest SDKs (google = protobuf and grpc, for OTLP).
HEAVY = ("pandas", "numpy", "pyarrow", "chdb", "clickhouse_connect", "matplotlib", "faust", "aiokafka",
         "kafka", "opentelemetry", "google", "grpc", "openai", "litellm")

# Runs in the child: records who first asked for each heavy package, then
# runs `main(argv)` (or only builds the parser) with its output captured.
PROBE = r"""
import contextlib, io, json, sys, traceback
heavy, argv = set(sys.argv[1].split(",")), json.loads(sys.argv[2])
first = {}


class Spy:  # first on sys.meta_path: sees every import, finds nothing itself
    @staticmethod
    def find_spec(name, path=None, target=None):
        top = name.partition(".")[0]
        if top in heavy and top not in first:
            stack = [f for f in traceback.extract_stack()[:-1] if "importlib" not in f.filename
                     and not f.filename.startswith("<")]
            first[top] = " <- ".join(f"{f.filename}:{f.lineno}" for f in reversed(stack[-4:]))
        return None


sys.meta_path.insert(0, Spy)
out, code = io.StringIO(), None
with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
    if argv[0] == "import":
        __import__(argv[1])
    elif argv[0] == "exec":
        exec(argv[1])
    else:
        from phasemeter.cli.main import build_parser, main
        if argv == ["build_parser"]:
            build_parser()
        else:
            try:
                code = main(argv)
            except SystemExit as exc:
                code = exc.code
loaded = sorted({m.partition(".")[0] for m in sys.modules} & heavy)
print(json.dumps({"code": code, "out": out.getvalue(), "heavy": loaded, "first": first}))
"""


def _env(tmp_path) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PHASEMETER_", "CLICKHOUSE_", "KAFKA_"))}
    return {**env, "PHASEMETER_DATA_DIR": str(tmp_path / "data")}


def probe(argv: list[str], tmp_path) -> dict:
    proc = subprocess.run([sys.executable, "-c", PROBE, ",".join(HEAVY), json.dumps(argv)], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.splitlines()[-1])


def explain(result: dict) -> str:
    return "heavy imports: " + "; ".join(f"{m} first from {result['first'].get(m, '?')}" for m in result["heavy"])


@pytest.mark.parametrize("argv", [
    ["build_parser"],
    ["--help"],
    ["config"],
    # every parser is built for any command; a feature's own --help must not load more
    ["query", "bands", "--help"], ["alerts", "check", "--help"], ["dlq", "inspect", "--help"],
    ["emit", "--help"], ["otlp", "--help"], ["worker", "--help"],
], ids=" ".join)
def test_light_commands_import_no_heavy_dependency(argv, tmp_path):
    result = probe(argv, tmp_path)
    assert result["heavy"] == [], explain(result)
    if argv != ["build_parser"]:
        assert result["code"] == 0, result["out"]
    if argv == ["config"]:
        assert "PHASEMETER_DATA_DIR" in result["out"] and str(tmp_path / "data") in result["out"]
    elif argv[-1] == "--help":
        assert "usage: phasemeter" in result["out"]


def test_the_installed_entry_point_imports_no_heavy_dependency(tmp_path):
    """`python -m phasemeter --help` as a user runs it: package __init__ and
    __main__ included, every import listed by the interpreter itself."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-m", "phasemeter", "--help"], cwd=tmp_path,
                          env=_env(tmp_path), capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "usage: phasemeter" in proc.stdout, proc.stderr[-2000:]
    names = {line.rsplit("|", 1)[-1].strip() for line in proc.stderr.splitlines() if line.startswith("import time:")}
    assert "phasemeter.cli.main" in names  # the listing is real
    assert sorted({n.partition(".")[0] for n in names} & set(HEAVY)) == []


def test_the_probe_sees_a_heavy_import(tmp_path):
    """The check can fail: a module that needs pandas is reported, with the line."""
    result = probe(["import", "phasemeter.render.csv_text"], tmp_path)
    assert "pandas" in result["heavy"]
    assert "phasemeter/render/csv_text.py" in result["first"]["pandas"]


def test_the_worker_starts_without_pandas_or_matplotlib(tmp_path):
    """The worker's own code builds Arrow tables, never frames, so importing
    it loads no pandas. pyarrow still imports pandas on its first array
    whenever it is installed; the worker does that import in a thread while
    it waits for Kafka (stream_jobs/preload.py, tested in
    tests/integration/test_pipeline.py), never on the start's own path."""
    result = probe(["import", "phasemeter.stream_jobs.app"], tmp_path)
    assert "faust" in result["heavy"]  # the probe saw the worker's imports
    assert not {"pandas", "matplotlib"} & set(result["heavy"]), explain(result)


def test_migrate_opens_the_store_without_pandas(tmp_path):
    """`phasemeter migrate` (run by every deploy, and before every worker in
    the tests) records each migration with a bound statement: the client's
    row insert would import pandas for its DataFrame check (0.4-0.5 s)."""
    result = probe(["migrate"], tmp_path)
    assert result["code"] == 0 and "applied now" in result["out"], result["out"]
    assert "chdb" in result["heavy"] and "pandas" not in result["heavy"], explain(result)


def test_registering_new_slos_imports_no_pandas(tmp_path):
    """A worker that starts with newly declared SLOs registers them with a
    bound statement (sql/slo_register.sql): the client's row insert would
    import pandas for its DataFrame check (0.4-0.5 s of that start)."""
    code = ("from phasemeter.settings import Settings\n"
            "from phasemeter.store.client import connect\n"
            "from phasemeter.store.migrate import migrate\n"
            "from phasemeter.store import slo_defs\n"
            "from phasemeter.alerts.slo_rules import parse_slos\n"
            "client = connect(Settings())\n"
            "migrate(client)\n"
            "sloset = parse_slos({'slo': [{'name': 'chat', 'objectives': {'ttft_s': 1.0}, 'target': 0.95}]})\n"
            "assert slo_defs.register(client, sloset)[0] == ['chat']\n")
    result = probe(["exec", code], tmp_path)
    assert "chdb" in result["heavy"] and "pandas" not in result["heavy"], explain(result)


def test_building_the_parser_loads_no_otlp_mapping(tmp_path):
    """Every command builds the whole parser, `otlp --help`'s defaults included:
    they are read from phasemeter.integrations.otlp_limits, not from the span
    mapping, which would load the stream contract into every read command."""
    code = ("import sys\n"
            "from phasemeter.cli.main import build_parser\n"
            "build_parser()\n"
            "assert 'phasemeter.integrations.otlp_limits' in sys.modules\n"
            "loaded = sorted(m for m in sys.modules if m.startswith(('phasemeter.integrations.otlp_map',\n"
            "                'phasemeter.integrations.otlp_decode', 'phasemeter.stream_jobs.contract')))\n"
            "assert loaded == [], loaded\n")
    assert probe(["exec", code], tmp_path)["heavy"] == []
