"""The worker's start and stop without Faust's idle waits (lifecycle.py).

The overrides replace private steps of pinned Faust and mode versions, so
these tests hold those steps to the code they replace: an upgrade that
changes it fails here, and the override gets looked at again."""

import inspect

import faust
import mode.worker
from faust.tables import TableManager as FaustTableManager

from phasemeter.settings import Settings
from phasemeter.stream_jobs import lifecycle
from phasemeter.stream_jobs.app import create_app


def _code(fn) -> list[str]:
    """A function's statements, without its def line, docstring and comments."""
    lines = [ln.strip() for ln in inspect.getsource(fn).splitlines()[1:]]
    return [ln for ln in lines if ln and not ln.startswith(("#", '"""'))]


def test_table_start_is_fausts_without_its_one_second_sleep():
    theirs = _code(FaustTableManager.on_start)
    assert theirs[0] == "await self.sleep(1.0)", theirs
    assert _code(lifecycle.TableManager.on_start) == theirs[1:]


def test_worker_stop_grace_replaces_modes_sentinel_second():
    assert _code(mode.worker.Worker._sentinel_task) == ["await asyncio.sleep(1.0)"]
    shutdown = "\n".join(_code(mode.worker.Worker._shutdown_loop))
    assert "self._sentinel_task()" in shutdown and "self._gather_all()" in shutdown
    # mode still cancels whatever is left after its wait, so a task of ours
    # that outlives the shutdown would cost up to 1 s, never hang the exit.
    assert "task.cancel()" in _code(mode.worker.Worker._gather_all)
    assert issubclass(lifecycle.Worker, faust.Worker) and 0 < lifecycle.STOP_GRACE_S < 1.0


def test_the_app_uses_the_table_manager_and_the_cli_the_worker(tmp_path):
    app = create_app(Settings.from_env({"PHASEMETER_DATA_DIR": str(tmp_path),
                                         "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}))  # never contacted
    assert type(app.tables) is lifecycle.TableManager
    assert "phasemeter-join" in app.tables  # declared by create_app, before any start
    from phasemeter.cli import commands

    assert "from phasemeter.stream_jobs.lifecycle import Worker" in inspect.getsource(commands.cmd_worker)
