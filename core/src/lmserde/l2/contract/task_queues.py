"""The three completion queues of an L2 adapter (store, lookup, load), one id space."""

from __future__ import annotations

from lmserde.completion_queue import CompletionQueue, TaskIdSource
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.interface import L2TaskId
from lmserde.l2.contract.store_result import L2StoreResult

__all__ = ["AdapterTaskQueues", "QueuedResults"]


class AdapterTaskQueues:
    """Store, lookup and load :class:`~lmserde.CompletionQueue` s with three distinct fds.

    Task ids come from one :class:`~lmserde.completion_queue.TaskIdSource`, so an id names one
    task of one kind.
    """

    def __init__(self) -> None:
        self.ids = TaskIdSource()
        self.store: CompletionQueue[L2StoreResult] = CompletionQueue(self.ids)
        self.lookup: CompletionQueue[Bitmap] = CompletionQueue(self.ids)
        self.load: CompletionQueue[Bitmap] = CompletionQueue(self.ids)

    def new_task_id(self) -> int:
        return self.ids.next_id()

    def close(self) -> None:
        """Close the three fds (idempotent)."""
        self.store.close()
        self.lookup.close()
        self.load.close()


class QueuedResults:
    """Mixin: the fd and result methods of an adapter that completes its tasks on ``_queues``.

    Gives ``get_store_event_fd``, ``get_lookup_and_lock_event_fd``, ``get_load_event_fd``,
    ``pop_completed_store_tasks``, ``query_lookup_and_lock_result`` and ``query_load_result`` of
    :class:`~lmserde.l2.L2AdapterInterface`, each reading the :class:`AdapterTaskQueues` in
    ``self._queues``. Put it before ``L2AdapterInterface`` in the bases (after a pass-through mixin
    whose lookups go to an inner adapter).
    """

    _queues: AdapterTaskQueues

    def get_store_event_fd(self) -> int:
        return self._queues.store.fileno()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._queues.lookup.fileno()

    def get_load_event_fd(self) -> int:
        return self._queues.load.fileno()

    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        return self._queues.store.pop_all()

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        return self._queues.lookup.pop(task_id)

    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None:
        return self._queues.load.pop(task_id)
