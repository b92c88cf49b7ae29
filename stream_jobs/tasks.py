"""Where the worker's own coroutines are waiting, for GET /debug/tasks.

A worker that stalls without an error shows only lag in /health. Python's task stacks stop at the outermost
coroutine (Faust's `_execute_actor`), so this follows `cr_await` down to where each task is stuck. Read-only
and cheap: frames are named, never evaluated.
"""

from __future__ import annotations

import asyncio
import gc
import os


_HERE = os.path.dirname(os.path.abspath(__file__)) + os.sep  # this package's folder


def _chain(coro) -> list[str]:
    """file:line function, outermost first, for every coroutine or async generator the task is inside."""
    out = []
    while coro is not None and len(out) < 64:  # each turn appends one step
        frame = _frame(coro)
        code = getattr(coro, "cr_code", None) or getattr(coro, "ag_code", None)
        if frame is not None:
            out.append(f"{_short(frame.f_code.co_filename)}:{frame.f_lineno} {frame.f_code.co_name}")
        elif code is not None:
            out.append(f"{_short(code.co_filename)} {code.co_name} (not started or done)")
        else:
            out.append(repr(coro)[:120])  # a Future, or a C-level awaitable
            break
        coro = _unwrap(getattr(coro, "cr_await", None) or getattr(coro, "ag_await", None))
    return out


def _unwrap(obj):
    """A coroutine's `__await__()` wrapper (how Faust's actor awaits the agent) and an async generator's
    pending `asend` expose no frame; the coroutine or generator they drive is among their referents. Anything
    else (None, a coroutine, a Future) is returned as it is."""
    if type(obj).__name__ in ("coroutine_wrapper", "async_generator_asend", "async_generator_athrow"):
        inner = [o for o in gc.get_referents(obj) if _frame(o)]
        if len(inner) == 1:
            return inner[0]
    return obj


def _frame(obj):
    return getattr(obj, "cr_frame", None) or getattr(obj, "ag_frame", None)


def _short(path: str) -> str:
    if path.startswith(_HERE):  # marked: what `ours` looks for
        return "phasemeter/stream_jobs/" + path[len(_HERE):]
    parts = path.split(os.sep)
    if "site-packages" in parts:
        return os.sep.join(parts[parts.index("site-packages") + 1:])
    return os.sep.join(parts[-3:])


def ours(chain: list[str]) -> bool:
    return any(step.startswith("phasemeter/stream_jobs/") for step in chain)


def dump(only_ours: bool = True) -> list[dict]:
    """Every pending task of the running loop with its await chain; by default only those in the worker's code."""
    chains = ((task, _chain(task.get_coro())) for task in asyncio.all_tasks() if not task.done())
    tasks = [{"name": task.get_name(), "awaiting": chain} for task, chain in chains if not only_ours or ours(chain)]
    return sorted(tasks, key=lambda t: t["awaiting"])
