"""schema/CURRENT.sql is what a fresh store holds once every migration is
applied: the test migrates a new embedded store and compares."""

from __future__ import annotations

from phasemeter import docgen


def test_current_sql_is_the_migrated_schema():
    live = docgen.migrated_schema()
    assert live.count("CREATE VIEW") >= 4 and live.count("CREATE FUNCTION") >= 2
    assert (docgen.ROOT / "schema" / "CURRENT.sql").read_text() == live, \
        f"schema/CURRENT.sql drifted from the migrations: regenerate with `{docgen.COMMAND}` and commit it"
