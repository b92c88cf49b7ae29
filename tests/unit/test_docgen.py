"""The generated references agree with their one source (phasemeter/docgen.py).
On a difference, each test names the command that regenerates them."""

from __future__ import annotations

import ast
import dataclasses
import re

import pytest

from phasemeter import docgen
from phasemeter.cli.main import build_parser
from phasemeter.settings import Settings

ROOT = docgen.ROOT
FIX = f"regenerate with `{docgen.COMMAND}` and commit the result"


def test_the_readme_configuration_table_is_generated_from_settings():
    readme = (ROOT / "README.md").read_text()
    assert readme == docgen.with_config_table(readme, docgen.config_table(Settings)), FIX


def test_the_config_table_has_one_row_per_setting_and_can_fail():
    table = docgen.config_table(Settings)
    fields = dataclasses.fields(Settings)
    assert len(table.splitlines()) == 2 + len(fields)
    readme = (ROOT / "README.md").read_text()
    changed = readme.replace("| `PHASEMETER_WEB_PORT` | `6066` |", "| `PHASEMETER_WEB_PORT` | `6067` |")
    assert changed != readme
    assert changed != docgen.with_config_table(changed, table)


def test_the_cli_reference_is_generated_from_the_parsers():
    assert (ROOT / "docs" / "cli.md").read_text() == docgen.cli_reference(build_parser()), FIX


def test_the_cli_reference_names_every_command_and_flag():
    text = docgen.cli_reference(build_parser())
    found = list(docgen.commands(build_parser()))
    assert len(found) >= 16
    flags = 0
    for name, parser in found:
        assert f"## `{name}`" in text
        for action in parser._actions[1:]:  # [0] is --help, which every command answers
            assert all(f"`{flag}" in text or f", {flag}" in text for flag in action.option_strings), (name, action)
            flags += 1
    assert flags > 2 * len(found), flags  # a command may take none; most take several


def _env_names_in_code() -> dict[str, str]:
    """Every string literal shaped like one of our environment variables, in
    the package's code outside settings.py: a variable read elsewhere would be
    a hidden switch the table cannot show."""
    found = {}
    for folder in ("phasemeter", "stream_jobs", "producers"):
        for path in (ROOT / folder).rglob("*.py"):
            if path.name == "settings.py":
                continue
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.Constant) and isinstance(node.value, str) \
                        and re.fullmatch(r"(PHASEMETER|KAFKA|CLICKHOUSE)_[A-Z0-9_]+", node.value):
                    found[node.value] = str(path.relative_to(ROOT))
    return found


def test_every_variable_the_code_names_is_a_setting():
    names = _env_names_in_code()
    assert len(names) >= 2  # the demo passes its settings to its worker by name
    known = {f.metadata["env"] for f in dataclasses.fields(Settings)}
    assert {n: p for n, p in names.items() if n not in known} == {}


@pytest.mark.parametrize("name", ["PHASEMETER_KAFKA_CACHE"])
def test_the_broker_cache_is_a_setting(name, monkeypatch, tmp_path):
    from phasemeter import kafka_local

    monkeypatch.setenv(name, str(tmp_path))
    assert kafka_local.cache_dir().parent == tmp_path
