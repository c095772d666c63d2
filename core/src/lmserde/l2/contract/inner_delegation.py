"""Pass-through of the methods an adapter that wraps another (``self._inner``) does not change."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lmserde.containment import describe_exception, must_propagate
from lmserde.keys import ObjectKey
from lmserde.l2.contract.bitmap import Bitmap
from lmserde.l2.contract.usage import AdapterUsage
from lmserde.layout import MemoryLayoutDesc

if TYPE_CHECKING:
    from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId

__all__ = ["InnerAdapterDelegation", "InnerBackendDelegation", "adapter_reports_sizes",
           "adapter_sizes_are_local", "probe_adapter"]

_log = logging.getLogger(__name__)


def probe_adapter(adapter: Any, probe_name: str) -> bool:
    """Call ``adapter``'s optional capability probe ``probe_name`` (a method returning a bool).

    An adapter without it lacks the capability. Adapter code is plugin code: whatever the probe
    raises (``SystemExit`` included; only Ctrl-C on the main thread propagates) is logged naming
    the adapter and counts as "no".
    """
    probe = getattr(adapter, probe_name, None)
    if not callable(probe):
        return False
    try:
        return bool(probe())
    except BaseException as exc:
        if must_propagate(exc):
            raise
        _log.warning("L2 adapter %s: %s() raised %s; taken as false", type(adapter).__name__,
                     probe_name, describe_exception(exc))
        return False


def adapter_reports_sizes(adapter: Any) -> bool:
    """Whether ``adapter`` reports stored object sizes (adapters without the probe do not)."""
    return probe_adapter(adapter, "reports_object_sizes")


def adapter_sizes_are_local(adapter: Any) -> bool:
    """Whether ``adapter``'s stored sizes come without a network round trip (adapters without
    the probe: no)."""
    return probe_adapter(adapter, "object_sizes_are_local")


class InnerBackendDelegation:
    """Mixin: what describes the storage behind an adapter goes to ``_inner`` — the wrapped
    adapter itself (``inner_adapter``) and its ``adapter_type``, usage, whether it reports
    (local) object sizes, global eviction and the backend identity.

    For a wrapping adapter that maps keys or runs its own lookups (the split tier); one that
    changes neither uses :class:`InnerAdapterDelegation`. Put it before ``L2AdapterInterface``
    (and its subclasses) in the bases.
    """

    _inner: L2AdapterInterface

    @property
    def inner_adapter(self) -> L2AdapterInterface:
        """The adapter this one wraps."""
        return self._inner

    @property
    def adapter_type(self) -> str:
        """The inner adapter's ``type`` name (its class name when it has none)."""
        return getattr(self._inner, "adapter_type", "") or type(self._inner).__name__

    def reports_object_sizes(self) -> bool:
        return adapter_reports_sizes(self._inner)

    def object_sizes_are_local(self) -> bool:
        return adapter_sizes_are_local(self._inner)

    def get_usage(self) -> AdapterUsage:
        return self._inner.get_usage()

    def supports_global_eviction(self) -> bool:
        return self._inner.supports_global_eviction()

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        self._inner.set_backend_identity(name, shared)


class InnerAdapterDelegation(InnerBackendDelegation):
    """Mixin: lookup/lock/unlock (the inner adapter's own lookup fd included), sizes, deletion,
    recency, listing, listeners and, from :class:`InnerBackendDelegation`, usage and identity
    go to ``_inner``.

    Put it before ``L2AdapterInterface`` in the bases of a wrapping adapter.
    """

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._inner.get_lookup_and_lock_event_fd()

    def submit_lookup_and_lock_task(
        self,
        keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        return self._inner.submit_lookup_and_lock_task(keys, group_layout_descs)

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Bitmap | None:
        return self._inner.query_lookup_and_lock_result(task_id)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.submit_unlock(keys)

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        return self._inner.get_object_sizes(keys)

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.delete(keys)

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.touch_keys(keys)

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.list_l2_keys(*args, **kwargs)

    def register_listener(self, listener: Any) -> None:
        self._inner.register_listener(listener)

    def unregister_listener(self, listener: Any) -> None:
        self._inner.unregister_listener(listener)
