"""The three completion queues of an L2 adapter (store, lookup, load), one id space."""

from __future__ import annotations

from lmserde.completion_queue import CompletionQueue, TaskIdSource
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.store_result import L2StoreResult

__all__ = ["AdapterTaskQueues"]


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
