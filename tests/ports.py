"""Ports for the listeners the tests start (workers' web and SQL ports,
OTLP receivers, "nobody listens here" addresses).

Not the kernel's ephemeral range (32768-60999 on Linux): a port taken from
it with bind(0) and closed is free again for anybody's next connection or
bind(0) until the worker binds it. Two test processes then handed one port
to two workers, and a reader's /ping reached the other test's worker (its
own could not bind: "Address already in use"). Below that range, each test
process takes ports from a block of its own (pytest-xdist's gw<N>), in turn,
and skips any port something already holds.
"""

from __future__ import annotations

import itertools
import os
import socket

BASE, BLOCK = 20_000, 1_500  # gw0..gw7 end at 32_000, below the ephemeral range
_worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0")
_start = BASE + BLOCK * ((int(_worker[2:]) if _worker[2:].isdigit() else 0) % 8)
_next = itertools.cycle(range(_start, _start + BLOCK))


def free_port() -> int:
    """The next port of this test process's block that binds on 127.0.0.1."""
    for _ in range(BLOCK):
        port = next(_next)
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        return port
    raise RuntimeError(f"no free port in {_worker}'s block from {_start}")
