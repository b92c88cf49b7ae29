"""The preload imports its module in the executor, off the event loop, once;
a batch's wait returns when it has ended, and a module that is not installed
is no error (pyarrow would not import it either)."""

from __future__ import annotations

import asyncio
import sys
import threading

from phasemeter.stream_jobs.preload import Preload


def test_imports_in_the_executor_once_and_the_wait_follows_it(tmp_path, monkeypatch):
    (tmp_path / "pm_preload_probe.py").write_text(
        "import threading, time\ntime.sleep(0.2)\nTHREAD = threading.current_thread().name\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "pm_preload_probe", raising=False)

    async def run():
        preload = Preload("pm_preload_probe")
        await preload.wait()  # never started: returns at once
        assert "pm_preload_probe" not in sys.modules
        preload.start()
        preload.start()  # once
        await preload.wait()
        return sys.modules["pm_preload_probe"].THREAD

    thread = asyncio.run(run())
    assert thread != threading.main_thread().name


def test_a_module_that_is_not_installed_is_no_error():
    async def run():
        preload = Preload("pm_no_such_module_here")
        preload.start()
        await preload.wait()

    asyncio.run(run())
    assert "pm_no_such_module_here" not in sys.modules


def test_a_module_that_fails_to_import_is_logged_not_raised(tmp_path, monkeypatch, caplog):
    """A broken install is said in the log; the batches go on as they would
    without the preload (the first one meets the same error itself)."""
    (tmp_path / "pm_preload_broken.py").write_text("raise RuntimeError('broken install')\n")
    monkeypatch.syspath_prepend(str(tmp_path))

    async def run():
        preload = Preload("pm_preload_broken")
        preload.start()
        await preload.wait()

    with caplog.at_level("WARNING", logger="phasemeter.worker"):
        asyncio.run(run())
    assert "importing pm_preload_broken failed" in caplog.text and "broken install" in caplog.text
