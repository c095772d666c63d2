"""Event notifiers: coalescing, pollable wake-up signals (eventfd on Linux, a pipe elsewhere)."""

from __future__ import annotations

import os
import select
import time
from collections.abc import Callable
from typing import Protocol, TypeVar

__all__ = [
    "EventNotifier",
    "EventfdNotifier",
    "PipeNotifier",
    "create_event_notifier",
    "consume_fd",
    "wait_on_fd",
]

T = TypeVar("T")


class EventNotifier(Protocol):
    """A binary, coalescing signal: many ``notify()`` then one ``consume()`` clears it."""

    def fileno(self) -> int: ...
    def notify(self) -> None: ...
    def consume(self) -> None: ...
    def close(self) -> None: ...


class EventfdNotifier:
    """Notifier over ``os.eventfd`` (non-blocking, close-on-exec)."""

    def __init__(self) -> None:
        self._fd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)

    def fileno(self) -> int:
        return self._fd

    def notify(self) -> None:
        try:
            os.eventfd_write(self._fd, 1)
        except BlockingIOError:  # counter saturated: the fd is readable already
            pass

    def consume(self) -> None:
        consume_fd(self._fd)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1


class PipeNotifier:
    """Fallback notifier over a non-blocking pipe, for platforms without eventfd."""

    def __init__(self) -> None:
        self._read, self._write = os.pipe()
        for fd in (self._read, self._write):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)

    def fileno(self) -> int:
        return self._read

    def notify(self) -> None:
        try:
            os.write(self._write, b"\x01")
        except BlockingIOError:  # pipe full: it is readable already
            pass

    def consume(self) -> None:
        consume_fd(self._read)

    def close(self) -> None:
        for fd in (self._read, self._write):
            if fd >= 0:
                os.close(fd)
        self._read = self._write = -1


def create_event_notifier() -> EventNotifier:
    """An eventfd notifier where the platform has one, else a pipe notifier."""
    if hasattr(os, "eventfd"):
        return EventfdNotifier()
    return PipeNotifier()


def consume_fd(fd: int) -> None:
    """Drain a notifier fd; a fd with nothing to read is fine."""
    try:
        while os.read(fd, 4096):
            pass
    except BlockingIOError:
        pass


def wait_on_fd(fd: int, poll: Callable[[], T | None], *, timeout: float, what: str = "task") -> T:
    """Return the first non-``None`` value of ``poll()``, sleeping on the notifier ``fd`` between tries.

    ``poll`` must collect every result that is ready (the signal coalesces). The fd is drained
    before ``poll`` runs again, so a completion signalled meanwhile is never missed. Raises
    ``TimeoutError`` naming ``what`` after ``timeout`` seconds.
    """
    poller = select.poll()
    poller.register(fd, select.POLLIN)
    deadline = time.monotonic() + timeout
    while True:
        result = poll()
        if result is not None:
            return result
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(f"{what} did not complete within {timeout:g} s")
        if poller.poll(min(remaining, 0.2) * 1000.0):
            consume_fd(fd)
