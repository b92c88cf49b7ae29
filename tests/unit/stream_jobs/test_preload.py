"""The ingest agent's start task warms the offsets client and runs the preload
in the executor, off the event loop, without waiting for it; a batch starts
only once the import has ended, and at once when it never started. A module
that is not installed is no error (pyarrow would not import it either)."""

from __future__ import annotations

import asyncio
import sys
import threading
from types import SimpleNamespace

from phasemeter.settings import Settings
from phasemeter.stream_jobs import batching, ingest_agent
from phasemeter.stream_jobs.preload import preload


class _App:
    """What ingest_agent.install registers with, and what until_ready reads (ready)."""

    def __init__(self):
        self.tasks, self.agents = [], []
        self.unassigned = self.in_recovery = self.rebalancing = False
        self.tables = SimpleNamespace(recovery=SimpleNamespace(completed=threading.Event()))
        self.tables.recovery.completed.set()

    def task(self, fun):
        self.tasks.append(fun)
        return fun

    def agent(self, channel, name):
        return lambda fun: self.agents.append(fun) or fun


class _Handoff:
    """Records, as each batch starts, whether the probe's import had ended; the batch itself is not run."""

    def __init__(self, module):
        self.module, self.started = module, []

    def start(self, work):
        self.started.append(_imported(self.module))
        work.close()
        done = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def stopping(self, task):
        pass


def _ingest_once(monkeypatch, module, start: bool):
    """One batch through the ingest agent, after its start task if `start`. -> (handoff, offsets, whether the
    probe's import had ended when the start task returned)."""
    async def one_batch(stream, *bounds):
        yield ["event"]

    async def crash(name, body):
        await body()

    monkeypatch.setattr(batching, "gather", one_batch)
    monkeypatch.setattr(ingest_agent, "preload", lambda: preload(module))
    app, handoff = _App(), _Handoff(module)
    offsets = SimpleNamespace(warmed=0)
    offsets.warm = lambda: setattr(offsets, "warmed", offsets.warmed + 1)
    ingest_agent.install(app, Settings(), None, None, None, None, handoff, offsets, crash)

    async def run():
        (task,), (agent,) = app.tasks, app.agents
        if start:
            await task()
        imported_at_start = _imported(module)
        await agent(None)
        return imported_at_start

    return handoff, offsets, asyncio.run(run())


def _imported(name) -> bool:
    """The probe's import has ended: its last line has run (it is in sys.modules from its start)."""
    return hasattr(sys.modules.get(name), "THREAD")


def _probe(tmp_path, monkeypatch, name):
    (tmp_path / f"{name}.py").write_text(
        "import threading, time\ntime.sleep(0.2)\nTHREAD = threading.current_thread().name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, name, raising=False)


def test_imports_in_the_executor_and_the_batch_waits_for_it(tmp_path, monkeypatch):
    _probe(tmp_path, monkeypatch, "pm_preload_probe")
    handoff, offsets, imported_at_start = _ingest_once(monkeypatch, "pm_preload_probe", start=True)
    assert not imported_at_start  # the start task does not wait for the import
    assert handoff.started == [True]  # the batch started once it had ended
    assert offsets.warmed == 1
    assert sys.modules["pm_preload_probe"].THREAD != threading.main_thread().name


def test_a_batch_starts_at_once_when_the_preload_never_started(tmp_path, monkeypatch):
    _probe(tmp_path, monkeypatch, "pm_preload_probe")
    handoff, offsets, _ = _ingest_once(monkeypatch, "pm_preload_probe", start=False)
    assert handoff.started == [False] and "pm_preload_probe" not in sys.modules
    assert offsets.warmed == 0


def test_a_module_that_is_not_installed_is_no_error():
    preload("pm_no_such_module_here")
    assert "pm_no_such_module_here" not in sys.modules


def test_a_module_that_fails_to_import_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    """A broken install is said in the log; the batches go on as they would
    without the preload (the first one meets the same error itself)."""
    (tmp_path / "pm_preload_broken.py").write_text("raise RuntimeError('broken install')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        preload("pm_preload_broken")
    assert "importing pm_preload_broken failed" in caplog.text and "broken install" in caplog.text
