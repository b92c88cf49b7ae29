"""stream_jobs/faust_adapter.py: every Faust, mode and aiokafka internal the
worker relies on is still there in the pinned versions (an upgrade that
renames one fails here, not in production), and no other module of
stream_jobs/ names one."""

from __future__ import annotations

import ast
import functools
from pathlib import Path

import aiokafka
import faust
import mode
import pytest
from faust.streams import Stream
from faust.tables import Table, TableManager
from faust.transport.consumer import Consumer
from faust.transport.drivers import aiokafka as faust_aiokafka

import phasemeter.stream_jobs as stream_jobs
from phasemeter.stream_jobs import faust_adapter

PACKAGE = Path(stream_jobs.__file__).parent
ADAPTER = {"faust_adapter.py"}
# Importable by the rest of the worker: the public names Faust documents.
PUBLIC_MODULES = {"faust", "faust.types", "faust.web"}
# The framework's objects the worker is handed (app, consumer, producer,
# stream, table, their services): a private of theirs is named only by the adapter.
FRAMEWORK = (Consumer, faust_aiokafka.Producer, faust_aiokafka.AIOKafkaConsumerThread, Stream, Table,
             TableManager, mode.Service, faust.Worker, aiokafka.AIOKafkaProducer, aiokafka.AIOKafkaConsumer)


def test_the_pinned_versions_have_everything_the_adapter_relies_on():
    assert len(faust_adapter.REQUIRED) >= 20
    assert faust_adapter.missing() == []
    faust_adapter.check()  # what create_app runs


def test_the_list_names_every_private_the_adapter_uses():
    used = set()
    for name in ADAPTER:
        tree = ast.parse((PACKAGE / name).read_text())
        used |= {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and _private(n.attr)
                 and not (isinstance(n.value, ast.Name) and n.value.id in ("self", "cls"))}
    listed = {name for _, name in faust_adapter.REQUIRED}
    assert len(used) >= 10
    assert used - listed == set()


def test_a_missing_method_fails_the_check_naming_it(monkeypatch):
    monkeypatch.delattr(Consumer, "_commit_offsets")
    assert faust_adapter.missing() == ["faust.transport.consumer.Consumer._commit_offsets"]
    with pytest.raises(RuntimeError, match=r"faust\.transport\.consumer\.Consumer\._commit_offsets"):
        faust_adapter.check()


def test_a_missing_instance_attribute_fails_the_check_naming_it(monkeypatch):
    # An instance attribute is found from the class's annotations and code:
    # an upgrade that no longer declares or assigns it is caught as well.
    monkeypatch.delitem(Consumer.__annotations__, "_committed_offset")
    monkeypatch.setattr(faust_adapter, "_assigns", lambda klass, name: False)  # nor assigned in its code
    gone = faust_adapter.missing()
    assert "faust.transport.consumer.Consumer._committed_offset" in gone
    # The others missing now are those found only in their class's code.
    assert "faust.transport.consumer.Consumer._read_offset" not in gone  # still annotated


def _decorated(func):
    @functools.wraps(func)
    def wrapper(*args):
        return func(*args)
    return wrapper


def test_an_instance_attribute_is_one_a_method_assigns_to_self():
    class Owner:
        def __init__(self, other):
            self.plain = 1
            other.elsewhere = 2  # another object's attribute, not the instance's

            def later():
                self.in_closure = 3  # `self` is a cell here
            self.later = later

        @property
        def lazy(self):
            self.in_property = 4

        @lazy.setter
        def lazy(self, value):
            self.in_setter = value

        @_decorated
        def wrapped(self):
            self.in_wrapped = 6

        @classmethod
        def make(cls):
            cls.on_class = 5

    class Child(Owner):
        pass

    found = {name: faust_adapter._has(Child, name)
             for name in ("plain", "in_closure", "in_property", "in_setter", "in_wrapped", "elsewhere", "on_class",
                          "never")}
    assert found == {"plain": True, "in_closure": True, "in_property": True, "in_setter": True, "in_wrapped": True,
                     "elsewhere": False, "on_class": False, "never": False}
    # The pinned Faust's attributes found only this way (no class attribute or annotation) are found.
    assert faust_adapter._has(Consumer, "callback") and not hasattr(Consumer, "callback")


def test_the_overrides_replace_methods_that_exist():
    for cls in (faust_adapter.TableManager, faust_adapter.Worker):
        overridden = [n for n, v in vars(cls).items() if callable(v) and not n.startswith("__")]
        assert len(overridden) >= 1
        for name in overridden:
            assert (cls.__mro__[1], name) in faust_adapter.REQUIRED or hasattr(cls.__mro__[1], name)


# -- nothing else names an internal -----------------------------------------------------------

def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _framework_privates() -> set[str]:
    return {n for cls in FRAMEWORK for klass in cls.__mro__ for n in vars(klass) if _private(n)} \
        | {n for cls in FRAMEWORK for klass in cls.__mro__ for n in getattr(klass, "__annotations__", {})
           if _private(n)}


def _framework_methods() -> set[str]:
    return {n for cls in FRAMEWORK for n in dir(cls) if not n.startswith("_") and callable(getattr(cls, n, None))}


def internals_named(source: str, own: set[str]) -> list[str]:
    """What a module's source reaches of the framework: an import of a
    module that is not public, a private attribute (`x._y`, getattr with
    "_y") that is not one of the worker's own (`own`) or is one of the
    framework's, a framework method replaced on an instance, and a private
    method of the framework overridden in a subclass."""
    privates, methods = _framework_privates(), _framework_methods()
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            mods = [node.module]
        elif isinstance(node, ast.Import):
            mods = [a.name for a in node.names]
        else:
            mods = []
        found += [f"import {m}" for m in mods
                  if m.split(".")[0] in ("faust", "mode", "aiokafka") and m not in PUBLIC_MODULES]
        if isinstance(node, ast.Attribute) and _private(node.attr):
            mine = isinstance(node.value, ast.Name) and node.value.id in ("self", "cls")
            if not mine and (node.attr not in own or node.attr in privates):
                found.append(f"line {node.lineno}: .{node.attr}")
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                and node.func.id in ("getattr", "setattr", "hasattr", "delattr") and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)
                and _private(node.args[1].value)):
            found.append(f"line {node.lineno}: {node.func.id}(..., {node.args[1].value!r})")
        if isinstance(node, ast.ClassDef) and node.bases:
            found += [f"line {f.lineno}: def {f.name} overridden" for f in node.body
                      if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name in privates]
        if isinstance(node, (ast.Assign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            found += [f"line {node.lineno}: .{t.attr} replaced" for t in targets
                      if isinstance(t, ast.Attribute) and t.attr in methods
                      and not (isinstance(t.value, ast.Name) and t.value.id in ("self", "cls"))]
    return found


def _own_privates(sources: list[str]) -> set[str]:
    """Private names the worker's own modules define (`self._x = `, `def _x`, `_X = `)."""
    own = {"_exit"}  # os._exit
    for source in sources:
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
                own.add(node.attr)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Name):
                own.add(node.id)
    return {n for n in own if _private(n)}


def _worker_sources() -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(PACKAGE.glob("*.py")) if p.name not in ADAPTER}


def test_no_module_but_the_adapter_names_a_framework_internal():
    sources = _worker_sources()
    assert len(sources) >= 30
    own = _own_privates(list(sources.values()))
    found = {name: hits for name, source in sources.items() if (hits := internals_named(source, own))}
    assert found == {}


@pytest.mark.parametrize("planted", [
    "app.consumer._read_offset = {}",
    "committed = app.consumer._committed_offset",
    "await app.consumer._commit_offsets(offsets)",
    "producer = app.producer._ensure_producer()",
    "stream._processors.remove(add)",
    "flags = getattr(service, '_stopped')",
    "app.consumer.on_buffer_full = lambda tp: None",
    "consumer.wait_first = fast",
    "from mode.services import WaitResults",
    "from faust.transport.consumer import Consumer",
    "class W(faust.Worker):\n        async def _sentinel_task(self): pass",
])
def test_the_scan_finds_a_planted_internal(planted):
    sources = _worker_sources()
    own = _own_privates(list(sources.values()))
    source = sources["resume.py"] + "\n\ndef planted(app, stream, service, consumer, add, offsets, fast):\n    " + planted + "\n"
    assert internals_named(sources["resume.py"], own) == []
    assert len(internals_named(source, own)) == 1


def test_the_read_offset_stand_in_drops_every_write_and_stays_empty():
    # Faust's calls on it (faust/transport/consumer.py, drivers/aiokafka.py):
    # each write is dropped, so its pop and its guarded `del` find nothing.
    offsets = faust_adapter._NoReadOffset()
    tp = faust.types.TP("t", 0)
    offsets[tp] = 5
    offsets.update({tp: 7})
    assert offsets[tp] is None and len(offsets) == 0
    assert offsets.pop(tp, None) is None
    assert tp not in offsets.keys()
