"""`phasemeter sql`'s own input: one source of the query, parameters as
NAME=VALUE; errors name the flag (exit 2 through cli.main.guarded)."""

from __future__ import annotations

import argparse
import io

import pytest

from phasemeter.cli.main import build_parser
from phasemeter.cli.sql import bound_params, sql_text
from phasemeter.timeparse import ArgError


class Stdin(io.StringIO):
    def __init__(self, text: str, tty: bool = False):
        super().__init__(text)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["sql", *argv])


def test_the_query_from_the_argument_a_file_or_stdin(tmp_path):
    (tmp_path / "q.sql").write_text("SELECT 2\n")
    assert sql_text(args("SELECT 1"), Stdin("ignored")) == "SELECT 1"
    assert sql_text(args("--file", str(tmp_path / "q.sql")), Stdin("")) == "SELECT 2\n"
    assert sql_text(args(), Stdin("SELECT 3")) == "SELECT 3"


@pytest.mark.parametrize("argv,stdin,flag", [
    (("SELECT 1", "--file", "q.sql"), Stdin(""), "--file"),
    (("--file", "/no/such/file.sql"), Stdin(""), "--file"),
    ((), Stdin("", tty=True), "no query"),
    (("  ",), Stdin(""), "empty"),
])
def test_query_source_errors_name_the_flag(argv, stdin, flag):
    with pytest.raises(ArgError, match=flag):
        sql_text(args(*argv), stdin)


def test_parameters():
    assert bound_params(["m=qwen3", "n=1=2", "e="]) == {"m": "qwen3", "n": "1=2", "e": ""}
    for bad in ("novalue", "=x", "a b=1"):
        with pytest.raises(ArgError, match="--param"):
            bound_params([bad])
