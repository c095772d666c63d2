"""``L2AdapterInterface``: the asynchronous, fd-signalled contract of an L2 storage adapter."""

from __future__ import annotations

import logging
import threading
from abc import ABC, abstractmethod
from collections.abc import Sequence
from types import MappingProxyType
from typing import Any, Protocol

from lmserde.keys import ObjectKey
from lmserde.l2.bitmap import Bitmap
from lmserde.l2.store_result import L2StoreResult
from lmserde.l2.usage import AdapterUsage
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj

__all__ = ["L2AdapterInterface", "L2TaskId", "L2Listener"]

L2TaskId = int

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
    def get_store_event_fd(self) -> int: ...

    @abstractmethod
    def get_lookup_and_lock_event_fd(self) -> int: ...

    @abstractmethod
    def get_load_event_fd(self) -> int: ...

    @abstractmethod
    def submit_store_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        """Store ``get_size()`` bytes of each object under its key."""

    @abstractmethod
    def pop_completed_store_tasks(self) -> dict[L2TaskId, L2StoreResult]: ...

    @abstractmethod
    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        """Check which keys exist and lock the hits against eviction and deletion."""

    @abstractmethod
    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None: ...

    @abstractmethod
    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        """Release locks taken by a lookup; fire-and-forget, never fails."""

    @abstractmethod
    def submit_load_task(
        self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
    ) -> L2TaskId:
        """Read each key into its pre-allocated, write-locked object."""

    @abstractmethod
    def query_load_result(self, task_id: L2TaskId) -> Bitmap | None: ...

    @abstractmethod
    def close(self) -> None: ...

    # -- optional capabilities ------------------------------------------------------------------

    def reports_object_sizes(self) -> bool:
        """Whether :meth:`get_object_sizes` reports stored sizes (needed by upper-bound serdes)."""
        return False

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        """Advisory stored sizes in bytes; unknown keys are absent. Default: ``{}``."""
        return {}

    def delete(self, keys: Sequence[ObjectKey]) -> None:  # noqa: B027 - optional capability
        """Delete keys (no-op by default)."""

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError(f"{type(self).__name__} cannot list its keys")

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:  # noqa: B027 - optional hint
        """Recency hint; ignored by default."""

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        self._backend_name = name
        self._backend_shared = shared

    def supports_global_eviction(self) -> bool:
        return self.max_capacity_bytes > 0

    def report_status(self) -> dict[str, Any]:
        return {"is_healthy": True, "type": self.adapter_type or type(self).__name__}

    # -- listeners and accounting ---------------------------------------------------------------

    def register_listener(self, listener: Any) -> None:
        """Add a listener with any of ``on_l2_keys_stored/accessed/deleted``."""
        self._listeners.append(listener)

    def get_usage(self) -> AdapterUsage:
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
            except Exception:
                _log.exception("L2 listener %r.%s raised; ignored", listener, method)
