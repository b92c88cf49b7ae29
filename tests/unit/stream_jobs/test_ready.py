"""ready.is_ready: no batch starts while a rebalance is under way."""

import asyncio
from types import SimpleNamespace

from phasemeter.stream_jobs.ready import is_ready


def _app(**kw):
    done = asyncio.Event()
    done.set()
    app = SimpleNamespace(unassigned=False, in_recovery=False, rebalancing=False,
                          tables=SimpleNamespace(recovery=SimpleNamespace(completed=done)))
    for k, v in kw.items():
        setattr(app, k, v)
    return app


def test_ready_when_assigned_recovered_and_not_rebalancing():
    assert is_ready(_app())


def test_not_ready_between_revoke_and_the_new_assignment():
    # Recovery of the old assignment is still complete and partitions still
    # assigned: only the rebalancing flag tells the window apart.
    assert not is_ready(_app(rebalancing=True))


def test_not_ready_unassigned_or_recovering():
    assert not is_ready(_app(unassigned=True))
    assert not is_ready(_app(in_recovery=True))
