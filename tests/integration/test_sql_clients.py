"""Real ClickHouse clients connect to a worker's SQL interface unchanged,
each driven by its own library: clickhouse-connect (Superset's), clickhouse-go
v2 over HTTP (Grafana's plugin's), the JDBC driver (Metabase's, DBeaver's,
Tableau's) and curl. The Go and Java programs are built from the Go module
proxy and Maven Central into ~/.cache/phasemeter, so later runs are fast.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest
import sql_worker
from requires import missing

pytestmark = [pytest.mark.integration]

CLIENTS = Path(__file__).parents[1] / "clients"
CACHE = Path(os.environ.get("PHASEMETER_CACHE", Path.home() / ".cache" / "phasemeter"))


def missing_toolchain(tool: str, why: str) -> None:
    """The one place a missing toolchain is decided: skip loudly on a
    developer's machine, fail in CI (tests/requires.py)."""
    message = f"\n*** {tool} NOT FOUND: {why} is not tested (install it; .ci/run does) ***\n"
    print(message)
    missing(message)


@pytest.fixture(scope="module")
def sqlw(kafka_bootstrap, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sqlclients")
    t0 = (time.time() - 3 * 3600) // 60 * 60
    w = sql_worker.start(sql_worker.sql_env(kafka_bootstrap, tmp), tmp, t0)
    w.models = sql_worker.written_models(t0)
    yield w
    w.stop()


def test_clickhouse_connect(sqlw):
    import clickhouse_connect
    from clickhouse_connect.driver.exceptions import DatabaseError

    client = clickhouse_connect.get_client(host="127.0.0.1", port=sqlw.sql_port,
                                           database=sqlw.env["PHASEMETER_DATABASE"])
    assert client.server_version.count(".") == 3
    rows = client.query("SELECT model, count() FROM generations GROUP BY model ORDER BY model").result_rows
    assert dict(rows) == sqlw.models
    model = sorted(sqlw.models)[0]
    got = client.query("SELECT count() FROM generations WHERE model = {m:String}", parameters={"m": model})
    assert got.result_rows == [(sqlw.models[model],)]
    df = client.query_df("SELECT model, input_tokens FROM generations WHERE model = {m:String}",
                         parameters={"m": model})
    assert len(df) == sqlw.models[model] and set(df["model"]) == {model}
    table = client.query_arrow("SELECT model, count() AS n FROM generations GROUP BY model ORDER BY model")
    assert dict(zip(table["model"].to_pylist(), table["n"].to_pylist(), strict=True)) == sqlw.models
    with pytest.raises(DatabaseError, match="Code: 164"):
        client.command("INSERT INTO generations (model) VALUES ('x')")
    uncompressed = clickhouse_connect.get_client(host="127.0.0.1", port=sqlw.sql_port, compress=False,
                                                 database=sqlw.env["PHASEMETER_DATABASE"])
    assert uncompressed.query("SELECT count() FROM generations").result_rows == [(sum(sqlw.models.values()),)]


def test_curl(sqlw):
    if shutil.which("curl") is None:
        missing_toolchain("curl", "the curl one-liner")
    out = subprocess.run(["curl", "-sS", "--fail-with-body", sqlw.sql_url, "--data-binary",
                          "SELECT model, count() FROM generations GROUP BY model ORDER BY model FORMAT JSONEachRow"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = [json.loads(line) for line in out.stdout.splitlines()]
    assert {d["model"]: int(d["count()"]) for d in lines} == sqlw.models
    refused = subprocess.run(["curl", "-sS", "--fail-with-body", f"{sqlw.sql_url}?query=DROP+TABLE+generations"],
                             capture_output=True, text=True, timeout=60)
    assert refused.returncode == 22 and refused.stdout.startswith("Code: 164. DB::Exception:")


def _go_client() -> Path:
    go = shutil.which("go")
    if go is None:
        missing_toolchain("go", "clickhouse-go v2 (Grafana's driver)")
    binary = CACHE / "clients" / "chgo"
    env = {**os.environ, "GOPATH": str(CACHE / "go"), "GOCACHE": str(CACHE / "go-build"), "GOFLAGS": "-modcacherw"}
    t = time.monotonic()
    built = subprocess.run([go, "build", "-o", str(binary), "."], cwd=CLIENTS / "go", env=env,
                           capture_output=True, text=True, timeout=900)
    assert built.returncode == 0, built.stderr[-3000:]
    print(f"go client built in {time.monotonic() - t:.1f}s")
    return binary


def test_clickhouse_go_over_http(sqlw):
    binary = _go_client()
    out = subprocess.run([str(binary), f"127.0.0.1:{sqlw.sql_port}", sqlw.env["PHASEMETER_DATABASE"]],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    got = {d["what"]: d["value"] for d in map(json.loads, out.stdout.splitlines())}
    assert got["params"] == {"n": 3, "model": "it's a model"}
    assert got["generations"] == sqlw.models
    assert got["refused"]["code"] == 164
    assert got["version"].count(".") == 3


def _java_classpath() -> str:
    mvn, java = shutil.which("mvn"), shutil.which("java")
    if mvn is None or java is None:
        missing_toolchain("mvn" if mvn is None else "java", "the ClickHouse JDBC driver (Metabase's, DBeaver's)")
    lib = CACHE / "clients" / "java-lib"
    t = time.monotonic()
    built = subprocess.run([mvn, "-q", f"-Dmaven.repo.local={CACHE / 'm2'}", "dependency:copy-dependencies",
                            f"-DoutputDirectory={lib}"], cwd=CLIENTS / "java", capture_output=True, text=True,
                           timeout=900)
    assert built.returncode == 0, (built.stdout + built.stderr)[-3000:]
    print(f"JDBC driver fetched in {time.monotonic() - t:.1f}s")
    return f"{lib}/*"


def test_jdbc_driver(sqlw):
    classpath = _java_classpath()
    model = sorted(sqlw.models)[0]
    url = f"jdbc:clickhouse://127.0.0.1:{sqlw.sql_port}/{sqlw.env['PHASEMETER_DATABASE']}"
    out = subprocess.run(["java", "-cp", classpath, str(CLIENTS / "java" / "ChJdbc.java"), url, "default", "",
                          model], capture_output=True, text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [line.split("\t") for line in out.stdout.splitlines()]
    assert len(lines) >= len(sqlw.models) + 3
    got = {line[1]: int(line[2]) for line in lines if line[0] == "generations"}
    assert got == sqlw.models
    assert ["prepared", str(sqlw.models[model])] in lines
    assert ["tables", "generations"] in lines
    assert ["refused", "164"] in lines
