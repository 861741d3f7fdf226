"""Helpers of the engine tests that join the engines in a process group: a collective waits
for every rank, so each cell is sent to all engines before any reply is awaited."""

from __future__ import annotations

import socket
from typing import Any

#: seconds a cell on every rank may take (a collective, a group's start)
TIMEOUT = 90


def free_port() -> int:
    """A TCP port nothing listens on now, for the group's rendezvous."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def on_every_rank(cluster: Any, code: str) -> list[Any]:
    """Run ``code`` on every engine at once (a collective waits for all ranks), in rank order;
    the AsyncResults, after each finished."""
    pending = [cluster[engine].execute(code, block=False) for engine in cluster.ids]
    for result in pending:
        result.get(timeout=TIMEOUT)
    return pending
