"""``L2AdapterInterface``: the asynchronous, fd-signalled contract of an L2 storage adapter."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Protocol

from lmserde.containment import must_propagate
from lmserde.keys import ObjectKey
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.store_result import L2StoreResult
from lmserde.l2.contract.usage import AdapterUsage
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["L2AdapterInterface", "L2TaskId", "L2Listener", "check_keys_and_objects"]

L2TaskId = int


def check_keys_and_objects(keys: Sequence[Any], objects: Sequence[Any], call: str) -> None:
    """``ValueError`` naming ``call`` (``"submit_store_task"``, ``"submit_load_task"``) unless
    there is exactly one object per key: what every adapter checks before it queues a task."""
    if len(keys) != len(objects):
        raise ValueError(f"{call} got {len(keys)} keys but {len(objects)} objects")

_log = logging.getLogger(__name__)


class L2Listener(Protocol):
    """Receives key events of an adapter; each method is optional (missing ones are skipped)."""

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None: ...
    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None: ...
    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None: ...


class L2AdapterInterface(ABC):
    """An L2 tier: store, lookup-and-lock, unlock and load, each completing asynchronously.

    The store, lookup and load event fds are distinct and coalescing: a consumer woken by one
    drains every ready result. Results are taken once (``pop_completed_store_tasks`` returns every
    finished store; ``query_*_result(id)`` returns a :class:`Bitmap` once, ``None`` while pending
    or unknown). Store results are per task; lookup and load results are per key. Implementations
    are thread-safe. Stored objects stay read-locked, and load destinations write-locked, by the
    caller until the task completes.

    Thread safety: every method may be called from any thread, concurrently (at least the store
    and the prefetch controller threads of LMCache). Ownership: an adapter keeps no reference to
    a submitted object after its task completes (it copies what it stores); the event fds belong
    to the adapter (consumers wait on them, never read or close them). Listeners are called on
    the adapter's own threads and must not block.
    """

    #: The ``type`` name this adapter is configured by (for messages and status).
    adapter_type: str = ""

    def __init__(self, max_capacity_bytes: int = 0) -> None:
        self.max_capacity_bytes = int(max_capacity_bytes)
        self._accounting_lock = threading.Lock()
        self._sizes: dict[ObjectKey, int] = {}
        self._bytes_used = 0
        self._bytes_by_salt: dict[str, int] = {}
        self._listeners: list[Any] = []
        self._backend_name: str | None = None
        self._backend_shared = False

    # -- abstract contract ----------------------------------------------------------------------

    @abstractmethod
    def get_store_event_fd(self) -> int:
        """The fd that becomes readable when a store task completes.

        The three event fds are distinct and coalescing; each stays valid until :meth:`close`.
        """

    @abstractmethod
    def get_lookup_and_lock_event_fd(self) -> int:
        """The fd that becomes readable when a lookup-and-lock task completes."""

    @abstractmethod
    def get_load_event_fd(self) -> int:
        """The fd that becomes readable when a load task completes."""

    @abstractmethod
    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        """Store ``get_size()`` bytes of each object under its key; return a task id at once.

        Pre: as many keys as objects (``ValueError`` otherwise); the caller keeps each object
        read-locked and unmodified until the task completes. Post: completion signals
        :meth:`get_store_event_fd` and the task's :class:`L2StoreResult` waits in
        :meth:`pop_completed_store_tasks`; a key stored again replaces its old bytes. Calling it
        after :meth:`close` is an error (the built-in adapters raise ``RuntimeError``).
        """

    @abstractmethod
    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]:
        """Every store task finished since the last call, with its result; each is returned
        once. Results are per task, never per key. Never raises for a failed store."""

    @abstractmethod
    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        """Check which keys exist and lock the hits against eviction and deletion.

        Returns a task id at once; completion signals :meth:`get_lookup_and_lock_event_fd` and
        :meth:`query_lookup_and_lock_result` gives the hits. ``group_layout_descs`` (optional,
        object group index to layout) tells adapters that need it what a hit would load into.
        Locks nest: a key looked up twice needs two unlocks (an adapter that never evicts or
        deletes behind the caller's back, like ``fs``, may take no locks at all).
        """

    @abstractmethod
    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        """The per-key hit :class:`Bitmap` of a lookup, returned once; ``None`` while pending,
        for an unknown id and after it was taken. Every hit stays locked (safe from eviction and
        deletion) until the caller passes it to :meth:`submit_unlock`."""

    @abstractmethod
    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Release locks taken by a lookup (one per key listed); fire-and-forget, never fails.

        Keys that are not locked are ignored. It must eventually take effect: callers never
        retry. An adapter that defers deleting or evicting a locked key does it once the key's
        last lock is released.
        """

    @abstractmethod
    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        """Read each key into its pre-allocated, write-locked object; return a task id at once.

        Pre: as many keys as objects; each object is allocated with the stored layout (the
        caller's locks from a lookup keep the keys from vanishing) and is written by nobody else
        until the task completes. Post: completion signals :meth:`get_load_event_fd` and
        :meth:`query_load_result` gives a per-key bitmap; a key that is missing, unreadable or
        of another size is a miss for that key only.
        """

    @abstractmethod
    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None:
        """The per-key success :class:`Bitmap` of a load, returned once; ``None`` while
        pending, for an unknown id and after it was taken. A key whose bit is clear is a miss:
        its destination's content is unspecified and must not be used."""

    @abstractmethod
    def close(self) -> None:
        """Release threads, connections and fds. Idempotent; results not yet taken are
        dropped and no other method may be called afterwards."""

    # -- optional capabilities ------------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        """Whether :meth:`get_object_sizes` reports stored sizes (needed by upper-bound serdes)."""
        return False

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Advisory stored sizes in bytes; unknown keys are absent. Default: ``{}``."""
        return {}

    def object_sizes_are_local(self) -> bool:
        """Whether :meth:`get_object_sizes` answers from local state (a ``stat``, a dict) and
        never waits on the network; the serde wrapper then asks it on its caller's thread,
        otherwise on a background worker. Default: ``False``."""
        return False

    def delete(self, keys: Sequence[ObjectKey]) -> None:  # noqa: B027 - optional capability
        """Delete keys (no-op by default)."""

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> Any:
        """Every stored key (adapters that can list them); ``NotImplementedError`` by default."""
        raise NotImplementedError(f"{type(self).__name__} cannot list its keys")

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:  # noqa: B027 - optional hint
        """Recency hint; ignored by default."""

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        """Name the storage backend (``shared``: other processes use it too); informational."""
        self._backend_name = name
        self._backend_shared = shared

    def supports_global_eviction(self) -> bool:
        """Whether the adapter has a capacity to evict against (``max_capacity_bytes > 0``)."""
        return self.max_capacity_bytes > 0

    def report_status(self) -> dict[str, Any]:
        """A JSON-able status dict with at least ``is_healthy`` and ``type``; never raises."""
        return {"is_healthy": True, "type": self.adapter_type or type(self).__name__}

    # -- listeners and accounting ---------------------------------------------------------------

    def register_listener(self, listener: Any) -> None:
        """Add a listener with any of ``on_l2_keys_stored/accessed/deleted``.

        Called on the adapter's threads after keys are stored, read or deleted; whatever a
        listener raises (``BaseException`` included; only Ctrl-C on the main thread propagates)
        is logged, the others still run and the adapter's task completes as if it had not.
        """
        self._listeners.append(listener)

    def unregister_listener(self, listener: Any) -> None:
        """Remove ``listener`` (the same object :meth:`register_listener` got); no-op if absent."""
        for i, known in enumerate(self._listeners):
            if known is listener:
                del self._listeners[i]
                return

    def get_usage(self) -> AdapterUsage:
        """Bytes stored (in total and per cache salt) and the capacity; a consistent snapshot."""
        with self._accounting_lock:
            return AdapterUsage(self._bytes_used, self.max_capacity_bytes,
                                MappingProxyType(dict(self._bytes_by_salt)))

    def _notify_keys_stored(self, keys: Sequence[ObjectKey], sizes: Sequence[int]) -> None:
        """Account stored keys (a key stored again replaces its old size) and tell listeners."""
        with self._accounting_lock:
            for key, size in zip(keys, sizes):
                old = self._sizes.get(key)
                if old is not None:
                    self._account(key, -old)
                self._sizes[key] = int(size)
                self._account(key, int(size))
        self._call_listeners("on_l2_keys_stored", list(keys), list(sizes))

    def _notify_keys_accessed(self, keys: Sequence[ObjectKey]) -> None:
        self._call_listeners("on_l2_keys_accessed", list(keys))

    def _notify_keys_deleted(self, keys: Sequence[ObjectKey]) -> None:
        with self._accounting_lock:
            for key in keys:
                old = self._sizes.pop(key, None)
                if old is not None:
                    self._account(key, -old)
        self._call_listeners("on_l2_keys_deleted", list(keys))

    def _account(self, key: ObjectKey, delta: int) -> None:
        self._bytes_used = max(self._bytes_used + delta, 0)
        salt_bytes = max(self._bytes_by_salt.get(key.cache_salt, 0) + delta, 0)
        if salt_bytes:
            self._bytes_by_salt[key.cache_salt] = salt_bytes
        else:
            self._bytes_by_salt.pop(key.cache_salt, None)

    def _call_listeners(self, method: str, *args: Any) -> None:
        for listener in list(self._listeners):
            fn = getattr(listener, method, None)
            if fn is None:
                continue
            try:
                fn(*args)
            except BaseException as exc:  # a listener never fails or stalls the adapter's task
                if must_propagate(exc):
                    raise
                _log.exception("L2 listener %r.%s raised; ignored", listener, method)
