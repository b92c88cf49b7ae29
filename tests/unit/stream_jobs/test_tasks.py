import asyncio

from phasemeter.stream_jobs import tasks


async def _innermost(gate):
    await gate.wait()


async def _middle(gate):
    await _innermost(gate)


def test_the_chain_reaches_the_innermost_await_and_only_our_tasks_by_default():
    async def main():
        gate = asyncio.Event()
        ours = asyncio.ensure_future(_middle(gate))
        theirs = asyncio.ensure_future(asyncio.sleep(30))
        await asyncio.sleep(0)
        mine = tasks.dump()
        everything = tasks.dump(only_ours=False)
        gate.set()
        theirs.cancel()
        await ours
        return mine, everything

    mine, everything = asyncio.run(main())
    [entry] = [t for t in everything if any("_middle" in s for s in t["awaiting"])]
    steps = entry["awaiting"]
    assert [s.split()[-1] for s in steps[:2]] == ["_middle", "_innermost"], steps
    assert "wait" in steps[2] and "locks.py" in steps[2], steps  # asyncio.Event.wait, where it waits
    # A test's own coroutines are not the worker's: only with only_ours=False.
    assert not mine and entry in everything and not tasks.ours(steps)
    assert tasks.ours(["phasemeter/stream_jobs/ingest_agent.py:70 _ingest"])
