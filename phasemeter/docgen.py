"""The references that are generated from their one source, never typed:

- the README's configuration table, from `Settings` (its fields' env and doc);
- docs/cli.md, from the parsers `phasemeter` builds;
- schema/CURRENT.sql, the live definition of every table, view and function,
  read from a freshly migrated embedded store.

    python -m phasemeter.docgen           # rewrite all three
    python -m phasemeter.docgen --check   # exit 1 and name what drifted

The tests compare each file with what this module renders and print the
command above on a difference. The renderers are pure; only `main` writes.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

COMMAND = "python -m phasemeter.docgen"
ROOT = Path(__file__).resolve().parent.parent
CONFIG_BEGIN = f"<!-- config: generated from phasemeter/settings.py by `{COMMAND}` -->"
CONFIG_END = "<!-- /config -->"


# -- the configuration table ---------------------------------------------------
def config_table(settings_cls) -> str:
    """One row per setting: variable, default, meaning (Settings' own doc)."""
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for f in dataclasses.fields(settings_cls):
        default = "(empty)" if f.default in ("", None) else f"`{f.default:g}`" if isinstance(
            f.default, float) else f"`{f.default}`"
        doc = f.metadata["doc"].replace("|", "\\|")
        rows.append(f"| `{f.metadata['env']}` | {default} | {doc} |")
    return "\n".join(rows)


def with_config_table(readme: str, table: str) -> str:
    """The README with the text between its config marks replaced by `table`."""
    a, b = readme.find(CONFIG_BEGIN), readme.find(CONFIG_END)
    if a < 0 or b < a:
        raise ValueError(f"README.md lacks the marks {CONFIG_BEGIN!r} ... {CONFIG_END!r}")
    return readme[:a] + f"{CONFIG_BEGIN}\n{table}\n" + readme[b:]


# -- the CLI reference -------------------------------------------------------
def commands(parser: argparse.ArgumentParser, prefix: str = "phasemeter"):
    """(full command, its parser, its one-line help) for every leaf command, in parser order."""
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        yield prefix, parser
        return
    for action in subs:
        for name, sub in action.choices.items():
            yield from commands(sub, f"{prefix} {name}")


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    out = {}
    for a in parser._actions:
        if isinstance(a, argparse._SubParsersAction):
            out.update({c.dest: c.help or "" for c in a._choices_actions})
    return out


def cli_reference(parser: argparse.ArgumentParser) -> str:
    lines = ["# Command-line reference", "",
             f"Generated from the parsers in `phasemeter/cli/` by `{COMMAND}`; a test fails when it drifts.",
             "Every command also answers `--help`. Settings that are also environment variables are in the",
             "README's configuration table.", ""]
    for name, sub in commands(parser):
        lines += [f"## `{name}`", ""]
        lines += [_help_of(parser, name.split()[1:]), ""]
        lines += ["| argument | default | meaning |", "|---|---|---|"]
        for a in sub._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            flag = ", ".join(a.option_strings) or a.dest
            if a.choices and not isinstance(a, argparse._SubParsersAction):
                flag += " {" + ",".join(str(c) for c in a.choices) + "}"
            default = "" if a.default in (None, False, [], argparse.SUPPRESS) or not a.option_strings \
                else f"`{a.default}`"
            text = (a.help or "").replace("|", "\\|").replace("\n", " ")
            lines.append(f"| `{flag}` | {default} | {text} |")
        lines.append("")
    return "\n".join(lines).rstrip("\n") + "\n"


def _help_of(parser: argparse.ArgumentParser, path: list[str]) -> str:
    help_text = ""
    for word in path:
        help_text = _helps(parser).get(word, "")
        parser = next(a.choices[word] for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return help_text[:1].upper() + help_text[1:] + "." if help_text else ""


# -- the live schema -----------------------------------------------------------
_OBJECTS = """
SELECT name, formatQuery(create_table_query) FROM system.tables
WHERE database = currentDatabase() ORDER BY multiIf(engine = 'View', 2, engine = 'MaterializedView', 1, 0), name
"""
_FUNCTIONS = """
SELECT name, formatQuery(create_query) FROM system.functions
WHERE origin = 'SQLUserDefined' AND name LIKE 'phasemeter\\_%' ORDER BY name
"""


def current_schema(client) -> str:
    """Every table, materialized view, view and function of a migrated store,
    as the store itself states it (tables, then materialized views, then views)."""
    head = ["-- The live schema: what `phasemeter migrate` leaves, read back from a fresh store.",
            f"-- Generated by `{COMMAND}`; never applied. The migrations in schema/NNNN_*.sql are the source.",
            ""]
    body = []
    for _, sql in client.query(_FUNCTIONS).result_rows + client.query(_OBJECTS).result_rows:
        body += [sql.rstrip().rstrip(";") + ";", ""]
    return "\n".join(head + body).rstrip("\n") + "\n"


def migrated_schema() -> str:
    """current_schema of a new embedded store in a temporary folder."""
    import clickhouse_connect

    from phasemeter.store.migrate import migrate

    with tempfile.TemporaryDirectory(prefix="phasemeter-docgen-") as folder:
        client = clickhouse_connect.get_client(dsn=f"chdb://{folder}/store")
        try:
            client.command("CREATE DATABASE IF NOT EXISTS phasemeter")
            client.database = "phasemeter"
            migrate(client)
            return current_schema(client)
        finally:
            client.close()


# -- the shell ---------------------------------------------------------------
def rendered(root: Path = ROOT) -> dict[Path, str]:
    """Each generated file's path and the text it should hold."""
    from phasemeter.cli.main import build_parser
    from phasemeter.settings import Settings

    readme = root / "README.md"
    return {readme: with_config_table(readme.read_text(), config_table(Settings)),
            root / "docs" / "cli.md": cli_reference(build_parser()),
            root / "schema" / "CURRENT.sql": migrated_schema()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="change nothing; exit 1 naming each file that drifted")
    args = ap.parse_args(argv)
    drifted = []
    for path, text in rendered().items():
        if path.exists() and path.read_text() == text:
            continue
        drifted.append(path)
        if not args.check:
            path.write_text(text)
    for path in drifted:
        print(f"{'drifted' if args.check else 'wrote'}: {path.relative_to(ROOT)}")
    return 1 if drifted and args.check else 0


if __name__ == "__main__":
    sys.exit(main())
