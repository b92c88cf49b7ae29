"""Migrated embedded stores for integration tests: copies of what `phasemeter
migrate` makes, and clients of stores the tests talk to directly."""

from __future__ import annotations

import atexit
import contextlib
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

import clickhouse_connect

from phasemeter.settings import Settings
from phasemeter.store.migrate import migrate

# The database of every test worker's store. Each test has a data dir (so a
# store) of its own, and one name lets the stores be copies of one template.
DATABASE = "db_test"

_templates: dict[tuple, Path] = {}
_lock = threading.Lock()  # the member hand-off test prepares stores in a thread


def migrated(env: dict) -> None:
    """Leave env's store as `phasemeter migrate` (run with `env`) would: a copy
    of the store the real command made in this test process for the same
    database and retention. A run of the command took 2.3 CPU s (its
    interpreter, chDB and some 80 statements), and the suite ran it ~45 times;
    a copy takes milliseconds. A store that exists already, or one on a server,
    gets the command itself."""
    settings = Settings.from_env(env)
    if not settings.is_embedded or (settings.data_path / "store").exists():
        _run_migrate(env)
        return
    _copy_template(("phasemeter migrate", settings.database, settings.raw_ttl_days, settings.rollup_ttl_days),
                   settings.data_path, lambda folder: _run_migrate({**env, "PHASEMETER_DATA_DIR": str(folder)}))


def _run_migrate(env: dict) -> None:
    done = subprocess.run([sys.executable, "-m", "phasemeter", "migrate"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]


def _copy_template(key: tuple, data_dir: Path, make) -> None:
    """Copy into `data_dir` the template data dir of `key`, which make(folder)
    fills at its first use in this process."""
    with _lock:
        if key not in _templates:
            folder = Path(tempfile.mkdtemp(prefix="phasemeter-migrated-"))
            atexit.register(shutil.rmtree, folder, True)
            make(folder)
            _templates[key] = folder
    # symlinks=True: a database's folder links to its tables' by relative
    # symlinks, which must stay links (followed, the copy won't open).
    shutil.copytree(_templates[key], data_dir, symlinks=True, dirs_exist_ok=True)


@contextlib.contextmanager
def migrated_client(folder, database: str):
    """A chDB client on <folder>/store, inside `database`, every migration
    applied by migrate(): a new store is a copy of one it migrated in this
    process for the same database (~1 s of CPU a store; test_ledger.py alone
    made 24). chDB opens one path at a time in a process, so the template is
    made and closed before the client opens its own."""
    folder = Path(folder)
    there = (folder / "store").exists()
    if not there:
        _copy_template(("migrate()", database), folder, lambda template: _migrate_in(template, database))
    with _opened(folder, database) as c:
        if there:
            migrate(c)  # a store that was there may still need some; a copy needs none
        yield c


def _migrate_in(folder: Path, database: str) -> None:
    with _opened(folder, database) as c:
        migrate(c)


@contextlib.contextmanager
def _opened(folder: Path, database: str):
    c = clickhouse_connect.get_client(dsn=f"chdb://{folder}/store")
    try:
        c.command("CREATE DATABASE IF NOT EXISTS {db:Identifier}", parameters={"db": database})
        c.database = database
        yield c
    finally:
        c.close()


@contextlib.contextmanager
def worker_store(env):
    """A chDB client on the store of a stopped test worker (`pm_env`), inside its database."""
    c = clickhouse_connect.get_client(dsn=f"chdb://{env['PHASEMETER_DATA_DIR']}/store")
    try:
        c.database = env["PHASEMETER_DATABASE"]
        yield c
    finally:
        c.close()


@contextlib.contextmanager
def in_database(client, database: str):
    """Run a block against another database of the same store (created if
    missing), then give the client its own database back, whatever happened."""
    client.command("CREATE DATABASE IF NOT EXISTS {db:Identifier}", parameters={"db": database})
    own, client.database = client.database, database
    try:
        yield client
    finally:
        client.database = own
