"""Every `phasemeter …` line in a code block of README.md or docs/*.md parses
with the real parser (no execution): a renamed command or flag fails here."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from phasemeter.cli.main import _glue_relative_times, build_parser

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")
_ENV = re.compile(r"^[A-Z_][A-Z0-9_]*=\S*$")


def code_lines(text: str):
    """(line number, logical line) of each fenced code block, continuations joined."""
    inside, held, start = False, "", 0
    for n, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            inside, held = not inside, ""
            continue
        if not inside:
            continue
        if not held:
            start = n
        if line.rstrip().endswith("\\"):
            held += line.rstrip()[:-1] + " "
            continue
        yield start, held + line
        held = ""


def commands(text: str) -> list[tuple[int, list[str]]]:
    """The argv after `phasemeter` of every command line: env prefixes, `$ `,
    a venv path, comments and what follows a pipe or `&&` are left out."""
    out = []
    for n, line in code_lines(text):
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        while words and (_ENV.match(words[0]) or words[0] == "$"):
            words = words[1:]
        if not words or Path(words[0]).name != "phasemeter":
            continue
        argv = []
        for w in words[1:]:
            if w in ("|", "&&", ";", ">", "&", "||") or w.startswith((">", "|")):
                break
            argv.append(w)
        out.append((n, argv))
    return out


def all_commands():
    return [(f"{p.relative_to(ROOT)}:{n}", argv) for p in DOCS for n, argv in commands(p.read_text())]


def is_synopsis(argv: list[str]) -> bool:
    """A usage line (`[--at TIME]`, `table|json`, `...`) or a line of output (`phasemeter emit: 12 lines`)."""
    return any(w.startswith("[") or w in ("...", "…") or w.endswith(("...", "…")) or "|" in w for w in argv) \
        or bool(argv and argv[0].endswith(":"))


def leaf(argv: list[str]):
    """The parser of the command the leading words name, or None."""
    parser = build_parser()
    for word in argv:
        subs = [a for a in parser._actions if a.__class__.__name__ == "_SubParsersAction"]
        if not subs or word not in subs[0].choices:
            break
        parser = subs[0].choices[word]
    return parser


def test_the_reader_finds_the_commands():
    found = all_commands()
    assert len(found) >= 30
    assert sum(is_synopsis(argv) for _, argv in found) < len(found) / 3
    assert commands("```\nPHASEMETER_X=1 .venv/bin/phasemeter query bands \\\n  --from -2h  # c\n```") == \
        [(2, ["query", "bands", "--from", "-2h"])]


@pytest.mark.parametrize("where,argv", all_commands(), ids=lambda v: v if isinstance(v, str) else None)
def test_every_documented_command_parses(where, argv, capsys):
    if is_synopsis(argv):
        if argv[0].endswith(":"):
            assert argv[0][:-1] in {n.split()[1] for n, _ in _names()}, where
            return
        flags = set(leaf(argv)._option_string_actions)
        named = [w.strip("[]") for w in argv if w.strip("[]").startswith("--")]
        named = [w.split("=")[0] for w in named]
        assert leaf(argv).prog != "phasemeter" and set(named) <= flags, (where, sorted(set(named) - flags))
        return
    try:
        build_parser().parse_args(_glue_relative_times(argv))
    except SystemExit as exc:
        if argv and argv[-1] in ("-h", "--help") and exc.code == 0:
            return
        pytest.fail(f"{where}: `phasemeter {' '.join(argv)}` does not parse: {capsys.readouterr().err.strip()}")


def _names():
    from phasemeter.docgen import commands as leaves

    return list(leaves(build_parser()))
