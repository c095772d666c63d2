"""Pass-through of the bookkeeping methods of an adapter that wraps another (``self._inner``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lmserde.keys import ObjectKey
from lmserde.l2.usage import AdapterUsage

if TYPE_CHECKING:
    from lmserde.l2.interface import L2AdapterInterface

__all__ = ["InnerAdapterDelegation"]


class InnerAdapterDelegation:
    """Mixin: sizes, deletion, recency, usage, listing, listeners and identity go to ``_inner``.

    Put it before ``L2AdapterInterface`` in the bases of a wrapping adapter.
    """

    _inner: L2AdapterInterface

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        return self._inner.get_object_sizes(keys)

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.delete(keys)

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.touch_keys(keys)

    def get_usage(self) -> AdapterUsage:
        return self._inner.get_usage()

    def supports_global_eviction(self) -> bool:
        return self._inner.supports_global_eviction()

    def list_l2_keys(self, *args: Any, **kwargs: Any) -> Any:
        return self._inner.list_l2_keys(*args, **kwargs)

    def register_listener(self, listener: Any) -> None:
        self._inner.register_listener(listener)

    def set_backend_identity(self, name: str, shared: bool = False) -> None:
        self._inner.set_backend_identity(name, shared)
