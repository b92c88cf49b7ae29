"""ClickHouse access through clickhouse-connect, embedded (chDB) or server.

One code path for both: only the DSN differs. A chDB path can be open in a
single process, so the worker owns it and everything else goes through the
worker's web port while it runs (see `phasemeter.query.remote`).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from pathlib import Path
from urllib.parse import urlsplit

from phasemeter.settings import Settings, redact
from phasemeter.timeparse import ArgError

_SQL_NAME = re.compile(r"^[a-z0-9_]+$")


class StoreError(RuntimeError):
    pass


def check_dsn(settings: Settings) -> None:
    """A store address that cannot be right is refused before anything is
    opened or created, naming where it came from."""
    dsn = settings.store_dsn
    where = "CLICKHOUSE_URL / --clickhouse-url" if settings.clickhouse_url else "PHASEMETER_DATA_DIR / --data-dir"
    parts = urlsplit(dsn)
    if parts.scheme == "chdb":
        if parts.netloc or not parts.path.startswith("/"):
            raise ArgError(f"{where}={redact(dsn)!r}: an embedded store is chdb:///absolute/path")
    elif parts.scheme in ("http", "https"):
        try:
            port = parts.port
        except ValueError:
            raise ArgError(f"{where}={redact(dsn)!r}: the port is not a number") from None
        if not parts.hostname or (port is not None and not 0 < port < 65536):
            raise ArgError(f"{where}={redact(dsn)!r}: expected http(s)://host:port")
    else:
        raise ArgError(f"{where}={redact(dsn)!r}: expected chdb:///absolute/path or http(s)://host:port")


def connect(settings: Settings, database: str | None = "", create: bool = True, **kwargs):
    """Open a client. database="" -> settings.database; None -> server default.
    `create=False` (every read): a missing chDB folder or database is an
    error naming it, and nothing is created."""
    import clickhouse_connect  # heavy import: only for worker/CLI paths

    check_dsn(settings)
    dsn = settings.store_dsn
    db = settings.database if database == "" else database
    if db:
        check_database(db)
    if settings.is_embedded:
        path = Path(urlsplit(dsn).path)
        if not create and not path.is_dir():
            raise ArgError(f"no store at {path}: run `phasemeter migrate` to create it, or point "
                           "--data-dir / CLICKHOUSE_URL at an existing one")
        path.parent.mkdir(parents=True, exist_ok=True)
    try:
        client = clickhouse_connect.get_client(dsn=dsn, **kwargs)
        if db and create:
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(db)}")
        elif db and not client.command("SELECT count() FROM system.databases WHERE name = {d:String}",
                                       parameters={"d": db}):
            client.close()
            raise ArgError(f"PHASEMETER_DATABASE / --database={db!r}: no such database in the store at "
                           f"{redact(dsn)}: run `phasemeter migrate`")
        if db:
            client.database = db
        return client
    except ArgError:
        raise
    except Exception as exc:  # never echo credentials embedded in the DSN
        msg = redact(str(exc))
        password = urlsplit(dsn).password
        if password:
            msg = msg.replace(password, "***")
        raise StoreError(f"cannot open store {redact(dsn)}: {msg[:500]}") from None


# Table aliases inside the shipped views: ClickHouse resolves `d.generations`
# in schema/0013's SLO view as the alias `d`, so a database of that name
# cannot be migrated (measured: every other alias of schema/ works as a name).
_ALIASES = {"d"}


def check_database(name: str) -> None:
    """A database name the store cannot take is refused before anything is
    opened or created, naming where it came from (exit 2)."""
    where = "PHASEMETER_DATABASE / --database"
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise ArgError(f"{where}={name!r}: use letters, digits and _ only (at most 63, not starting with a digit)")
    if name in _ALIASES:
        raise ArgError(f"{where}={name!r}: a table alias of phasemeter's views; choose another name")


def quote_identifier(name: str) -> str:
    """Database names come from our own settings, but still: identifiers are
    validated, never spliced raw (values always go through bound params)."""
    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]{0,62}", name):
        raise ValueError(f"PHASEMETER_DATABASE={name!r}: use letters, digits and _ only")
    return f"`{name}`"


@functools.cache  # only names of shipped files get here: misses raise and are not cached
def load_sql(name: str) -> str:
    """Named query from the `sql/` folder shipped inside the package. Cached:
    the worker runs some of them every batch, and the web port checks each
    one before running it."""
    if not _SQL_NAME.match(name):
        raise ValueError(f"bad query name {name!r}")
    path = resources.files("phasemeter.sql").joinpath(f"{name}.sql")
    if not path.is_file():
        raise ValueError(f"no query named {name!r} in phasemeter/sql")
    return path.read_text(encoding="utf-8")


def is_read_only(sql: str) -> bool:
    """True when a named query is a plain SELECT/WITH (what the web port may run)."""
    code = [ln.strip() for ln in sql.splitlines() if ln.strip() and not ln.strip().startswith("--")]
    if not code:
        return False
    first = code[0].split(None, 1)[0].upper()
    body = "\n".join(code).rstrip().rstrip(";")
    return first in ("SELECT", "WITH") and ";" not in body


def open_migrated_store(settings: Settings, **kwargs):
    """The store a reader (or the worker) may use: it exists and is fully
    migrated. Creates nothing. `kwargs`: clickhouse-connect's options."""
    from phasemeter.store.migrate import pending

    client = connect(settings, create=False, **kwargs)
    todo = pending(client)
    if todo:
        client.close()
        raise StoreError(f"store {settings.database!r} has {len(todo)} pending migration(s): "
                         "run `phasemeter migrate` first")
    return client
