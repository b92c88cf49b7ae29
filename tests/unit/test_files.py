"""phasemeter.files: an operator's file, from disk or as the CLI sent it."""

from __future__ import annotations

import pytest

from phasemeter.files import read_text, sent, snapshot


def test_reads_from_disk_outside_a_served_command(tmp_path):
    (tmp_path / "r.toml").write_text("a = 1\n")
    assert read_text(tmp_path / "r.toml") == "a = 1\n"


def test_a_served_command_reads_the_cli_copy_under_the_name_given(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "slos.toml").write_text("here = 1\n")
    copy = snapshot(["slos.toml", "missing.toml"])
    (tmp_path / "slos.toml").write_text("changed on disk\n")  # the worker's disk is not the CLI's
    with sent(copy):
        assert read_text("slos.toml") == "here = 1\n"
        with pytest.raises(OSError) as exc:
            read_text("missing.toml")
        assert exc.value.strerror == "No such file or directory"  # the CLI's own failure, same words
    assert read_text("slos.toml") == "changed on disk\n"  # only inside the command


def test_the_rules_loader_names_the_file_as_the_cli_was_given_it(tmp_path):
    from phasemeter.alerts.rules import RulesError, load_rules

    with sent(snapshot(["nope.toml"])), pytest.raises(RulesError, match=r"--rules nope.toml: cannot read \(No such"):
        load_rules("nope.toml")


def test_a_served_command_never_reads_the_worker_disk(tmp_path):
    (tmp_path / "secret.toml").write_text("token = 'x'\n")
    with sent({}), pytest.raises(OSError, match="not sent with the command"):
        read_text(tmp_path / "secret.toml")
