"""Connections a task's deadline can abort: a worker stuck on a trickling server is freed at once.

A per-reply ``socket_timeout`` never fires against a server that sends one byte every quarter
second, so a worker in such a read would stay there for as long as the reply takes. The worker
therefore runs each round trip in an :class:`AbortScope` (a thread-local, see :func:`scope`),
and the connection class of the adapter's pool (:func:`abortable_class` of redis-py's own class
for the URL: TCP, TLS or a unix socket) records itself in the scope before every send and read.
:meth:`AbortScope.abort` (registered with the task's deadline) marks the scope aborted and shuts
the recorded socket down: the blocked read returns, and every later send or read in the scope,
retries included, raises ``redis.TimeoutError`` at once. The socket is only shut down, never
closed, from the aborting thread; the worker's own error handling closes it.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from typing import Any

import redis

__all__ = ["AbortScope", "abortable_class", "scope"]

_current = threading.local()


class AbortScope:
    """The connection one worker uses for one round trip, and whether its task was aborted."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: Any = None
        self.aborted = False

    def enter(self, connection: Any) -> None:
        """Called by a connection before it sends or reads; raises once aborted."""
        with self._lock:
            if self.aborted:
                raise redis.TimeoutError("the task passed its deadline")
            self._connection = connection

    def abort(self) -> None:
        """Fail this scope's current and later socket calls (see the module docstring)."""
        with self._lock:
            self.aborted = True
            connection = self._connection
        sock = getattr(connection, "_sock", None)  # redis-py's socket of a connected connection
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@contextlib.contextmanager
def scope() -> Iterator[AbortScope]:
    """Run the body's round trips in a fresh :class:`AbortScope` of this thread."""
    previous = getattr(_current, "scope", None)
    current = AbortScope()
    _current.scope = current
    try:
        yield current
    finally:
        _current.scope = previous


def _enter(connection: Any) -> None:
    current = getattr(_current, "scope", None)
    if current is not None:
        current.enter(connection)


class _AbortableMixin:
    """Records the connection in the thread's scope before every send and read."""

    def send_packed_command(self, *args: Any, **kwargs: Any) -> Any:
        _enter(self)
        return super().send_packed_command(*args, **kwargs)  # type: ignore[misc]

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        _enter(self)
        return super().read_response(*args, **kwargs)  # type: ignore[misc]


_classes: dict[type, type] = {}
_classes_lock = threading.Lock()


def abortable_class(base: type) -> type:
    """``base`` (a redis-py connection class) with its sends and reads abortable."""
    with _classes_lock:
        cls = _classes.get(base)
        if cls is None:
            cls = type(f"Abortable{base.__name__}", (_AbortableMixin, base), {})
            _classes[base] = cls
        return cls
