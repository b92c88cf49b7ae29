"""The dashboard on the embedded default: every query of
dashboards/grafana/phasemeter.json, its macros expanded as the plugin expands
them, read through a running worker's ClickHouse HTTP interface with
clickhouse-connect (as the provisioned phasemeter-embedded data source reads
it) gives the rows the same query gives on the store opened directly.

A subprocess writes the store and answers every query directly (a chDB path
opens in one process at a time); then a worker owns that store and the test
asks it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import WorkerProc

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _rows(res) -> list:
    return json.loads(json.dumps(res.result_rows, default=str))  # as JSON: datetimes as text, nan as NaN


def write_and_answer(out: str) -> None:
    """In a subprocess: the store of test_grafana_queries, and every dashboard query's rows on it."""
    from test_grafana_queries import concrete_queries, fill

    from phasemeter.settings import Settings
    from phasemeter.store.client import connect

    client = connect(Settings.from_env())
    fill(client)
    answers = {name: _rows(client.query(sql)) for name, sql in concrete_queries(client).items()}
    answers |= {name: _rows(client.query(sql)) for name, sql in no_pool_queries(client).items()}
    client.close()
    Path(out).write_text(json.dumps(answers))


def no_pool_queries(client) -> dict[str, str]:
    """The per-pool panels over the 3 hours before the data (no pool there: no rows to show)."""
    from test_grafana_queries import POOL_PANELS, T0, pool_panel, substitute

    models = sorted(r[0] for r in client.query("SELECT DISTINCT model FROM generations").result_rows)
    buckets = sorted(r[0] for r in client.query("SELECT DISTINCT input_bucket FROM generations").result_rows)
    return {f"no pools: {title}": substitute(pool_panel(title), int(T0 - 3 * 3600), int(T0), 300,
                                             {"model": models, "bucket": buckets}) for title in POOL_PANELS}


def test_every_panel_reads_the_same_through_the_worker_interface(pm_env, tmp_path):
    env = {**pm_env, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), str(Path(__file__).parents[1]),
                                                     os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", "import sys, test_grafana_worker as t; t.write_and_answer(sys.argv[1])",
                           str(tmp_path / "direct.json")], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    direct = json.loads((tmp_path / "direct.json").read_text())
    empty = {n for n in direct if n.startswith("no pools: ")}
    assert len(empty) == 3 and all(direct[n] == [] for n in empty), empty
    assert len(direct) >= 13 and all(r for n, r in direct.items() if n not in empty), [n for n, r in direct.items() if not r]

    from test_grafana_queries import SLOS_TOML

    slos = tmp_path / "slos.toml"
    slos.write_text(SLOS_TOML)  # the store's SLOs, declared by its worker too (it retires any other)
    w = WorkerProc({**pm_env, "PHASEMETER_SLOS": str(slos)}, tmp_path, int(pm_env["PHASEMETER_WEB_PORT"]))
    try:
        w.start()
        import clickhouse_connect
        from urllib.parse import urlsplit

        from phasemeter.query.remote import SQL_URL, worker_state

        sql_url = urlsplit(worker_state(Path(pm_env["PHASEMETER_DATA_DIR"]))[SQL_URL])
        client = clickhouse_connect.get_client(host=sql_url.hostname, port=sql_url.port,
                                               database=pm_env["PHASEMETER_DATABASE"])
        from test_grafana_queries import concrete_queries

        through = {name: _rows(client.query(sql)) for name, sql in concrete_queries(client).items()}
        through |= {name: _rows(client.query(sql)) for name, sql in no_pool_queries(client).items()}
        client.close()
    finally:
        w.stop()
    assert through.keys() == direct.keys()
    for name in direct:
        assert through[name] == direct[name], name
