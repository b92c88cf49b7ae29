"""Tiny migrator: applies schema/NNNN_name.sql in order, once each.

Applied versions are recorded with a checksum; a shipped file that changed
after it was applied is an error (ship a new numbered file instead).
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")

_LEDGER = """
CREATE TABLE IF NOT EXISTS schema_migrations
(
    version    UInt32,
    name       String,
    checksum   String,
    applied_at DateTime64(3, 'UTC') DEFAULT now64(3)
)
ENGINE = MergeTree ORDER BY version
"""
# Bound values, like every statement; not the client's row insert, which
# imports pandas for its DataFrame check (0.4-0.5 s of every migrate).
_RECORD = """
INSERT INTO schema_migrations (version, name, checksum)
SELECT {version:UInt32}, {name:String}, {checksum:String}
"""


# Whole-text checksums of shipped files as they were before their comments
# were reworded (they cited a document outside the project); stores migrated
# then recorded these. The statements are unchanged.
LEGACY: dict[int, str] = {1: "371f2d7c3b68f346", 3: "16b5ecbbc8efdcb1"}


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        """Over the statements with their comments left out: a shipped file's
        schema may never change, but its comments may be reworded."""
        code = "\n".join(ln.rstrip() for ln in self.sql.splitlines()
                         if ln.strip() and not ln.strip().startswith("--"))
        return hashlib.sha256(code.encode()).hexdigest()[:16]

    @property
    def legacy_checksum(self) -> str:
        """What stores migrated before comments were exempt recorded (the whole text)."""
        return hashlib.sha256(self.sql.encode()).hexdigest()[:16]

    def statements(self) -> list[str]:
        # One statement per `;` at a line end; comments stay with their statement.
        parts = re.split(r";\s*(?:\n|$)", self.sql)
        return [p.strip() for p in parts if _has_code(p)]


def _has_code(chunk: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in chunk.splitlines())


def discover() -> list[Migration]:
    found = []
    for entry in resources.files("phasemeter.schema").iterdir():
        m = _FILE.match(entry.name)
        if m:
            found.append(Migration(int(m.group(1)), m.group(2), entry.read_text(encoding="utf-8")))
    found.sort(key=lambda mig: mig.version)
    versions = [mig.version for mig in found]
    if len(set(versions)) != len(versions):
        raise RuntimeError(f"duplicate schema versions in {versions}")
    return found


def applied(client) -> dict[int, str]:
    client.command(_LEDGER)
    return _ledger(client)


def _ledger(client) -> dict[int, str]:
    rows = client.query("SELECT version, checksum FROM schema_migrations").result_rows
    return {int(v): c for v, c in rows}


def migrate(client) -> list[Migration]:
    """Apply pending migrations; return the ones applied now."""
    done = applied(client)
    now_applied = []
    for mig in discover():
        if mig.version in done:
            if done[mig.version] not in (mig.checksum, LEGACY.get(mig.version), mig.legacy_checksum):
                raise RuntimeError(
                    f"schema/{mig.version:04d}_{mig.name}.sql changed after it was applied "
                    "(never edit a shipped migration; add a new numbered file)")
            continue
        for statement in mig.statements():
            client.command(statement)
        client.command(_RECORD,
                       parameters={"version": mig.version, "name": mig.name, "checksum": mig.checksum})
        now_applied.append(mig)
    return now_applied


# Whether the ledger exists: a read, so that checking a store (every reader
# does) never sends DDL; the worker's SQL interface refuses any.
_HAS_LEDGER = """
SELECT count() FROM system.tables WHERE database = currentDatabase() AND name = 'schema_migrations'
"""


def pending(client) -> list[Migration]:
    """The migrations not applied yet. Reads only: creates nothing."""
    done = _ledger(client) if int(client.command(_HAS_LEDGER)) else {}
    return [mig for mig in discover() if mig.version not in done]
