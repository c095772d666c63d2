"""``CoordinatingAdapter``: the frame of an adapter whose tasks other components carry out.

The serde wrapper (serde, then the inner adapter) and the split tier (the K pool in L1, then the
V side's serde wrapper) are such adapters. What they share lives here, once: the inner adapter
they wrap, the three completion queues and their event fds (:class:`QueuedResults`), one poll
thread handing each component's event fd to its drain, the open/closed state, and a status built
on the inner adapter's. Each keeps its own state machines (paths) and close sequence.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from lmserde.l2.contract.interface import L2AdapterInterface
from lmserde.l2.contract.poll_loop import PollLoop
from lmserde.l2.contract.task_queues import AdapterTaskQueues, QueuedResults

__all__ = ["CoordinatingAdapter"]

_Self = TypeVar("_Self", bound="CoordinatingAdapter")


class CoordinatingAdapter(QueuedResults, L2AdapterInterface):
    """Base of an adapter that runs its tasks through other components and completes them on
    its own queues (see the module docstring).

    ``inner`` is the adapter it wraps (``self._inner``; its capacity is this adapter's; mix in
    :class:`~lmserde.l2.contract.inner_delegation.InnerBackendDelegation` before this base for
    ``inner_adapter``, ``adapter_type`` and the backend's description);
    ``thread_name`` names the poll thread. A subclass builds its components (opening nothing
    before its own checks passed, since this constructor opens the queues' fds), then calls
    :meth:`_watch` once with each component fd and its drain, and in ``close()`` calls
    :meth:`_begin_close` first, stops ``self._loop``, and closes ``self._queues`` last.
    """

    def __init__(self, inner: L2AdapterInterface, thread_name: str) -> None:
        super().__init__(inner.max_capacity_bytes)
        self._inner = inner
        self._lock = threading.Lock()
        self._closed = False
        self._queues = AdapterTaskQueues()
        self._loop = PollLoop(thread_name)

    def _watch(self, drains: Mapping[int, Callable[[], None]]) -> None:
        """Start the poll thread: each fd of ``drains`` runs its drain when readable."""
        for fd, drain in drains.items():
            self._loop.add_fd(fd, drain)
        self._loop.start()

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def _status_over_inner(self, fields: Mapping[str, Any], *, healthy: bool = True
                           ) -> dict[str, Any]:
        """The inner adapter's status with ``fields`` added; ``is_healthy`` is also false once
        closed, or when ``healthy`` is false."""
        status = dict(self._inner.report_status())
        status.update(fields)
        status["is_healthy"] = (bool(status.get("is_healthy", True)) and not self._closed
                                and healthy)
        return status

    # -- lifecycle ------------------------------------------------------------------------------

    def _check_open(self) -> None:
        """``RuntimeError`` naming the adapter's class once it is closed."""
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")

    def _begin_close(self) -> bool:
        """Mark the adapter closed; ``False`` when it already was (``close`` is idempotent)."""
        with self._lock:
            if self._closed:
                return False
            self._closed = True
        return True

    def __enter__(self: _Self) -> _Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
