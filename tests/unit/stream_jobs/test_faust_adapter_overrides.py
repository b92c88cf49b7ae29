"""stream_jobs/faust_adapter.py, its overrides. The worker's start and stop without Faust's
idle waits: the overrides are held to the code they replace, so an upgrade
that changes it fails here. And a delivery that does not wait runs inline;
one that waits (a full queue) goes on in a task, and is abandoned as mode's
`wait_first` abandons it. Driven over a real mode Service and real asyncio
queues, as Faust's fetch loop calls it."""

from __future__ import annotations

import ast
import asyncio
import gc
import inspect
import textwrap
import warnings

import pytest
import faust
import mode.worker
from faust.tables import TableManager as FaustTableManager
from faust.transport.consumer import Consumer
from mode import Service

from phasemeter.settings import Settings
from phasemeter.stream_jobs import faust_adapter
from phasemeter.stream_jobs.app import create_app
from phasemeter.stream_jobs.faust_adapter import after_drop, inline_first


class Fetcher(Service):
    """What Faust's consumer is to `wait_first`: a Service with a flow flag."""

    def __init__(self):
        super().__init__()
        self.suspend_flow = asyncio.Event()
        self.inline = inline_first(self, self.suspend_flow)  # as install() sets it on the consumer

    def deliver(self, coro):
        return self.inline(coro, self.suspend_flow.wait())  # the fetch loop's call


def delivery(queue, log):
    async def deliver(value):  # as Faust's conductor: put the event on the stream's queue
        log.append(("task", asyncio.current_task()))
        try:
            await queue.put(value)
        except asyncio.CancelledError:
            log.append(("cancelled", value))
            raise
        return value
    return deliver


async def blocked(value):
    """A delivery of `value` that finds its queue full: -> (fetcher, call, queue, log)."""
    f = Fetcher()
    queue, log = asyncio.Queue(maxsize=1), []
    queue.put_nowait("full")
    call = asyncio.ensure_future(f.deliver(delivery(queue, log)(value)))
    await asyncio.sleep(0.05)
    return f, call, queue, log


def run(body):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a coroutine never awaited fails the test
        out = asyncio.run(body())
        gc.collect()
    return out


def test_a_delivery_that_does_not_wait_runs_inline_and_returns_its_result():
    async def body():
        queue, log = asyncio.Queue(maxsize=10), []
        res = await Fetcher().deliver(delivery(queue, log)(7))
        return res, log, asyncio.current_task(), queue.get_nowait()

    res, log, me, queued = run(body)
    assert (res.results, res.stopped, queued) == ([7], False, 7)
    assert log == [("task", me)]  # no task was made for it


def test_a_delivery_that_waits_goes_on_in_a_task_until_the_queue_has_room():
    async def body():
        _, call, queue, log = await blocked(8)
        assert not call.done()  # backpressure: it waits, nothing dropped
        assert queue.get_nowait() == "full"
        res = await asyncio.wait_for(call, 5)
        return res, queue.get_nowait(), log

    res, queued, log = run(body)
    assert (res.results, res.stopped, queued) == ([8], False, 8)


def test_a_waiting_delivery_is_abandoned_when_the_flow_is_suspended():
    async def body():
        f, call, queue, log = await blocked(9)
        f.suspend_flow.set()  # a rebalance: the fetch loop must not stay blocked
        res = await asyncio.wait_for(call, 5)
        await asyncio.sleep(0)
        return res, log, queue.qsize()

    res, log, size = run(body)
    assert res.stopped is False and res.results == [True]  # suspend_flow.wait() won
    assert ("cancelled", 9) in log  # the delivery itself was cancelled, as mode does
    assert size == 1  # and never reached the queue


@pytest.mark.parametrize("flag", ["suspend_flow", "_stopped", "_crashed"])
def test_with_a_flag_already_set_the_call_is_modes_own(flag):
    async def body():
        f = Fetcher()
        getattr(f, flag).set()
        queue, log = asyncio.Queue(maxsize=10), []
        await f.deliver(delivery(queue, log)(1))
        await asyncio.sleep(0)
        return log, asyncio.current_task()

    log, me = run(body)
    assert log and log[0][1] is not me  # it ran in mode's task, not inline


def test_an_error_in_the_delivery_propagates_and_leaves_nothing_unawaited():
    async def body():
        async def broken(_):
            raise ValueError("no such stream")

        with pytest.raises(ValueError, match="no such stream"):
            await Fetcher().deliver(broken(1))

    run(body)


class HoldingFetcher(Fetcher):
    """A Fetcher with Faust's per-partition hold for a full stream buffer:
    `_buffered_partitions`, and `on_buffer_drop` as the consumer's."""

    def __init__(self):
        super().__init__()
        self._buffered_partitions = set()
        self.dropped = []

    def on_buffer_full(self, tp):
        self._buffered_partitions.add(tp)

    def on_buffer_drop(self, tp):
        self.dropped.append(tp)
        self._buffered_partitions.discard(tp)


class Record:
    def __init__(self, tp, value):
        self.tp, self.value = tp, value


def held_delivery(poll_s=5.0, max_wait_s=30.0):
    """-> (fetcher, deliver(record) as the fetch loop calls it, queue, log)."""
    f = HoldingFetcher()
    queue, log = asyncio.Queue(maxsize=100), []
    put = delivery(queue, log)
    callback = after_drop(f, lambda record: put(record.value), poll_s=poll_s, max_wait_s=max_wait_s)
    return f, (lambda record: f.inline(callback(record), f.suspend_flow.wait())), queue, log


async def held_call(value, wait_s, **kw):
    """A delivery of `value` whose partition is held, `wait_s` after it began:
    -> (fetcher, call, queue, log)."""
    f, deliver, queue, log = held_delivery(**kw)
    f.on_buffer_full("tp0")  # as the conductor calls it, through the wrapper
    call = asyncio.ensure_future(deliver(Record("tp0", value)))
    await asyncio.sleep(wait_s)
    return f, call, queue, log


def test_a_record_of_a_partition_not_held_is_delivered_inline():
    async def body():
        f, deliver, queue, log = held_delivery()
        f.on_buffer_full("other")
        res = await deliver(Record("tp0", 1))
        return res, log, asyncio.current_task(), queue.get_nowait()

    res, log, me, queued = run(body)
    assert (res.results, queued) == ([1], 1)
    assert log == [("task", me)]


def test_a_record_of_a_held_partition_waits_for_the_drop_then_is_delivered():
    async def body():
        f, call, queue, log = await held_call(2, 0.1)
        waited = (call.done(), queue.qsize(), list(log))
        f.on_buffer_drop("tp0")  # as the conductor calls it, through the wrapper
        res = await asyncio.wait_for(call, 1)  # well before poll_s: woken by the drop
        return waited, res, queue.get_nowait(), f.dropped

    waited, res, queued, dropped = run(body)
    assert waited == (False, 0, [])  # held: nothing reached the buffer
    assert (res.results, queued, dropped) == ([2], 2, ["tp0"])


def test_a_wait_for_the_drop_is_abandoned_when_the_flow_is_suspended():
    async def body():
        f, call, queue, log = await held_call(3, 0.05)
        f.suspend_flow.set()
        res = await asyncio.wait_for(call, 1)
        f.on_buffer_drop("tp0")
        await asyncio.sleep(0.05)
        return res, queue.qsize(), log

    res, size, log = run(body)
    assert res.results == [True]  # suspend_flow.wait() won
    assert (size, log) == (0, [])  # the record never reached the buffer


def test_a_hold_forgotten_without_a_drop_is_seen_by_the_next_look():
    async def body():
        f, call, queue, _ = await held_call(4, 0.1, poll_s=0.05)
        f._buffered_partitions = set()  # as Faust's _reset_state replaces it
        res = await asyncio.wait_for(call, 1)
        return res, queue.get_nowait()

    res, queued = run(body)
    assert (res.results, queued) == ([4], 4)


def test_a_hold_older_than_max_wait_no_longer_stops_a_record():
    async def body():
        f, call, queue, log = await held_call(5, 0.1, max_wait_s=0.3)
        waited = (call.done(), queue.qsize())
        res = await asyncio.wait_for(call, 1)  # no drop came: delivered once the hold is 0.3 s old
        return waited, res, queue.get_nowait(), f._buffered_partitions

    waited, res, queued, held = run(body)
    assert waited == (False, 0)
    assert (res.results, queued, held) == ([5], 5, {"tp0"})  # Faust's hold itself is left alone


def _code(fn) -> list[str]:
    """A function's statements, without its def line, docstring and comments."""
    lines = [ln.strip() for ln in inspect.getsource(fn).splitlines()[1:]]
    return [ln for ln in lines if ln and not ln.startswith(("#", '"""'))]


def test_table_start_is_fausts_without_its_one_second_sleep():
    theirs = _code(FaustTableManager.on_start)
    assert theirs[0] == "await self.sleep(1.0)", theirs
    assert _code(faust_adapter.TableManager.on_start) == theirs[1:]


def test_worker_stop_grace_replaces_modes_sentinel_second():
    assert _code(mode.worker.Worker._sentinel_task) == ["await asyncio.sleep(1.0)"]
    shutdown = "\n".join(_code(mode.worker.Worker._shutdown_loop))
    assert "self._sentinel_task()" in shutdown and "self._gather_all()" in shutdown
    # mode still cancels whatever is left after its wait, so a task of ours
    # that outlives the shutdown would cost up to 1 s, never hang the exit.
    assert "task.cancel()" in _code(mode.worker.Worker._gather_all)
    assert issubclass(faust_adapter.Worker, faust.Worker) and 0 < faust_adapter.STOP_GRACE_S < 1.0


def test_the_app_uses_the_table_manager_and_the_cli_the_worker(tmp_path):
    app = create_app(Settings.from_env({"PHASEMETER_DATA_DIR": str(tmp_path),
                                         "KAFKA_BOOTSTRAP_SERVERS": "127.0.0.1:9"}))  # never contacted
    assert type(app.tables) is faust_adapter.TableManager
    assert "phasemeter-join" in app.tables  # declared by create_app, before any start
    from phasemeter.cli import commands

    assert "from phasemeter.stream_jobs.faust_adapter import Worker" in inspect.getsource(commands.cmd_worker)


def _statements(fn) -> list[str]:
    """A function's statements as source, without its docstring."""
    body = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0].body
    if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
        body = body[1:]
    return [ast.unparse(s) for s in body]


def test_a_stopping_app_leaves_the_group_on_a_revoke_without_its_signal():
    """What settle_before_leaving answers: once a stop has begun, Faust's
    revoke callback sends no revoke signal (where the worker settles) and
    closes the consumer, which leaves the group at once. The consumer calls
    the callback it was made with, which the adapter replaces."""
    assert _statements(faust.App._on_partitions_revoked)[0] == \
        "if self.should_stop:\n    return self._on_rebalance_when_stopped()"
    assert _statements(faust.App._on_rebalance_when_stopped) == ["self.consumer.close()"]
    assert "await T(self._on_partitions_revoked, partitions=revoked)(revoked)" in \
        _statements(Consumer.on_partitions_revoked)[-1]


def _revoke_in_order(stopping: bool, monkeypatch) -> list[str]:
    """A rebalance's revoke reaching an app built by Faust, its consumer not started; -> what happened, in order."""
    app = faust.App("pm-revoke-test", broker="kafka://127.0.0.1:9")  # never contacted
    order: list[str] = []

    async def settle():
        order.append("settle")
        await asyncio.sleep(0.05)  # a batch in hand, then its commit
        order.append("settled")

    async def running_revoke(revoked):  # Faust's own, past its stop test, needs a started consumer
        order.append("faust's revoke, with its signal")

    if not stopping:
        monkeypatch.setattr(app, "_on_partitions_revoked", running_revoke)  # before the consumer is made
    faust_adapter.settle_before_leaving(app, settle)
    monkeypatch.setattr(app.consumer, "close", lambda: order.append("consumer closed: the group is left"))
    if stopping:
        app._stopped.set()  # mode's flag behind should_stop, as a SIGTERM sets it
    asyncio.run(app.consumer._on_partitions_revoked(set()))
    return order


def test_a_rebalance_while_stopping_settles_the_work_in_hand_before_the_group_is_left(monkeypatch):
    assert _revoke_in_order(True, monkeypatch) == ["settle", "settled", "consumer closed: the group is left"]


def test_a_rebalance_while_running_is_fausts_own_and_its_signal_settles(monkeypatch):
    assert _revoke_in_order(False, monkeypatch) == ["faust's revoke, with its signal"]
