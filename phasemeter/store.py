"""ClickHouse access through clickhouse-connect, embedded (chDB) or server.

One code path for both: only the DSN differs. A chDB path can be open in a
single process, so the worker owns it and everything else goes through the
worker's web port while it runs (see `phasemeter.remote`).
"""

from __future__ import annotations

import functools
import re
from importlib import resources
from urllib.parse import urlsplit

from .settings import Settings, redact

_SQL_NAME = re.compile(r"^[a-z0-9_]+$")


class StoreError(RuntimeError):
    pass


def connect(settings: Settings, database: str | None = "", **kwargs):
    """Open a client. database="" -> settings.database; None -> server default."""
    import clickhouse_connect  # heavy import: only for worker/CLI paths

    dsn = settings.store_dsn
    if settings.is_embedded:
        settings.data_path.mkdir(parents=True, exist_ok=True)
    db = settings.database if database == "" else database
    try:
        client = clickhouse_connect.get_client(dsn=dsn, **kwargs)
        if db:
            client.command(f"CREATE DATABASE IF NOT EXISTS {quote_identifier(db)}")
            client.database = db
        return client
    except Exception as exc:  # never echo credentials embedded in the DSN
        msg = redact(str(exc))
        password = urlsplit(dsn).password
        if password:
            msg = msg.replace(password, "***")
        raise StoreError(f"cannot open store {redact(dsn)}: {msg[:500]}") from None


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
