"""Waiting for asynchronous completions signalled on a coalescing event fd."""

from __future__ import annotations

from collections.abc import Callable

from lmserde.events import wait_on_fd

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
    wait_on_fd(fd, lambda: True if done() else None, timeout=timeout, what=what)
