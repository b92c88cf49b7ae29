"""The order tests/conftest.py gives the suite's files (`make test` runs them
in that order with --dist loadfile): slow files first, the most items first,
and the files whose tests hold the busy loops first and third, so that one
test process runs them in turn instead of one waiting for the other's."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from conftest import pytest_collection_modifyitems


def item(path: str, slow: bool = False, busy: bool = False):
    return SimpleNamespace(path=Path(path), fixturenames=["tmp_path", *(["busy_loops"] if busy else [])],
                           get_closest_marker=lambda name: slow if name == "slow" else None)


def files_in_order(items) -> list[str]:
    pytest_collection_modifyitems(None, items)
    return list(dict.fromkeys(str(i.path) for i in items))


def test_busy_loop_files_go_first_and_third_the_one_with_fewer_items_first():
    items = [item("unit.py"), item("unit.py"), item("unit.py"),
             *[item("phases.py", slow=True, busy=(k == 3)) for k in range(7)],
             *[item("faults.py", slow=True) for _ in range(10)], *[item("chaos.py", slow=True) for _ in range(5)],
             item("handoff.py", slow=True, busy=True), item("read_paths.py", slow=True)]
    assert files_in_order(items) == ["handoff.py", "faults.py", "phases.py", "chaos.py", "read_paths.py", "unit.py"]


def test_without_busy_loop_tests_slow_files_go_first_the_most_items_first():
    items = [item("a.py"), item("b.py", slow=True), item("c.py", slow=True), item("c.py", slow=True)]
    assert files_in_order(items) == ["c.py", "b.py", "a.py"]
    assert files_in_order([item("a.py"), item("a.py")]) == ["a.py"]
