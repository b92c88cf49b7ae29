"""A migrated embedded store for integration tests that talk to ClickHouse directly."""

from __future__ import annotations

import contextlib

import clickhouse_connect

from phasemeter.store.migrate import migrate


@contextlib.contextmanager
def migrated_client(folder, database: str):
    """A chDB client on <folder>/store, inside `database`, every migration applied."""
    c = clickhouse_connect.get_client(dsn=f"chdb://{folder}/store")
    try:
        c.command("CREATE DATABASE IF NOT EXISTS {db:Identifier}", parameters={"db": database})
        c.database = database
        migrate(c)
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
