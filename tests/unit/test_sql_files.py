"""Named queries: parameters are typed placeholders; web-served ones are read-only."""

import re
from pathlib import Path

from phasemeter.migrate import discover
from phasemeter.store import is_read_only

ROOT = Path(__file__).resolve().parents[2]
WRITES = {"rollup_backfill", "set_raw_ttl", "set_rollup_ttl"}  # run by CLI commands only, never by the web port


def test_named_queries_use_typed_parameters_only():
    for path in (ROOT / "sql").glob("*.sql"):
        text = "\n".join(ln for ln in path.read_text().splitlines() if not ln.strip().startswith("--"))
        assert "%s" not in text and "%(" not in text and "{}" not in text, path.name
        for placeholder in re.findall(r"\{([^}]*)\}", text):
            assert re.fullmatch(r"\w+:[\w(),' ]+", placeholder), (path.name, placeholder)


def test_web_servable_queries_are_read_only():
    for path in (ROOT / "sql").glob("*.sql"):
        if path.stem not in WRITES:
            assert is_read_only(path.read_text()), path.name
    assert not is_read_only("INSERT INTO t SELECT 1")
    assert not is_read_only("SELECT 1; DROP TABLE t")


def test_migrations_are_numbered_and_contiguous_from_one():
    versions = [m.version for m in discover()]
    assert versions[0] == 1 and versions == sorted(set(versions))
