"""A function run in a forked child process, for tests of what a fork leaves the child (threads
that do not exist there, locks a parent thread held)."""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable
from typing import Any


class ForkedChild:
    """``target(*args, queue)`` running in a child forked now; it answers by putting one value
    on ``queue``."""

    def __init__(self, target: Callable[..., None], *args: Any) -> None:
        context = multiprocessing.get_context("fork")
        self._queue = context.Queue()
        self._process = context.Process(target=target, args=(*args, self._queue))
        self._process.start()

    def answer(self, timeout: float) -> Any:
        """The child's answer within ``timeout`` seconds (``queue.Empty`` otherwise: a child that
        hangs); the child is then joined, and killed if it is still running."""
        try:
            return self._queue.get(timeout=timeout)
        finally:
            self._process.join(timeout=5)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(timeout=5)

    @property
    def exitcode(self) -> int | None:
        """The child's exit status once :meth:`answer` returned."""
        return self._process.exitcode
