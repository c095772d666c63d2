"""Waiting for asynchronous completions signalled on a coalescing event fd."""

from __future__ import annotations

import select
import time
from collections.abc import Callable

from lmserde.events import consume_fd

__all__ = ["wait_until", "DEFAULT_TIMEOUT_S"]

#: How long one bench step may wait for a serde or adapter before it is reported as hung.
DEFAULT_TIMEOUT_S = 120.0


def wait_until(fd: int, done: Callable[[], bool], *, timeout: float = DEFAULT_TIMEOUT_S,
               what: str = "task") -> None:
    """Return once ``done()`` is true, sleeping on ``fd`` in between.

    ``done`` must collect every result that is ready (the fd coalesces signals). The fd is
    drained before ``done`` runs again, so a completion signalled meanwhile is never missed.
    ``TimeoutError`` after ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    while not done():
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what} did not complete within {timeout:g} s")
        ready, _, _ = select.select([fd], [], [], min(remaining, 1.0))
        if ready:
            consume_fd(fd)
