"""phasemeter.files: an operator's files, read and written on this machine."""

from __future__ import annotations

import pytest

from phasemeter.files import read_text, write_file
from phasemeter.timeparse import ArgError


def test_reads_from_disk(tmp_path):
    (tmp_path / "r.toml").write_text("a = 1\n")
    assert read_text(tmp_path / "r.toml") == "a = 1\n"


def test_the_rules_loader_names_the_file_as_it_was_given(tmp_path, monkeypatch):
    from phasemeter.alerts.rules import RulesError, load_rules

    monkeypatch.chdir(tmp_path)
    with pytest.raises(RulesError, match=r"--rules nope.toml: cannot read \(No such"):
        load_rules("nope.toml")


def test_files_go_to_disk_and_a_bad_path_names_the_flag(tmp_path):
    assert write_file(tmp_path / "a" / "b.html", b"<!DOCTYPE html>").read_bytes() == b"<!DOCTYPE html>"
    (tmp_path / "f").write_text("a file, not a folder")
    with pytest.raises(ArgError, match=r"^--out .*f/x.png: cannot write it"):
        write_file(tmp_path / "f" / "x.png", b"")
