"""``HiddenNamesAdapter``: the adapter under a hidden-names serde wrapper sees hidden keys only.

Every key the wrapper hands down (stores, head-last stores, lookups, unlocks, loads, sizes,
deletes, recency) is replaced by its hidden key (:class:`~lmserde.l2.serde.hidden_names.NameHider`)
before it reaches the inner adapter, so file names, redis keys and s3 object names are keyed
hashes. What comes back up is translated to real keys: sizes by the keys asked; listings through
the hider's memory or, for names this process never made, by reading the object's key record
(``read_record``: the wrapper's framer; objects whose record does not open under this names key,
and objects over ``DEFAULT_MAX_OBJECT_BYTES``, which are never read, are left out of the
listing); listener events through the hider's memory (events of keys this
process never made or read are not passed on: there is no object left to read a deleted key
from). Capabilities the wrapper probes (sizes, head-last stores, replacing stores) are the inner
adapter's. Usage by tenant is the inner adapter's, which sees no tenant: one ``""`` entry.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import torch

from lmserde.keys import ObjectKey
from lmserde.l2.contract.head_last import DeferredHead, adapter_writes_head_last
from lmserde.l2.contract.inner_delegation import InnerBackendDelegation
from lmserde.l2.contract.interface import L2AdapterInterface, L2TaskId
from lmserde.l2.contract.replacing_store import enable_replacing_stores
from lmserde.l2.contract.sync_driver import load_sync
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.payload_checksum import tensor_bytes
from lmserde.l2.serde.stored_frame import DEFAULT_MAX_OBJECT_BYTES
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj

__all__ = ["HiddenNamesAdapter"]

_log = logging.getLogger(__name__)


class _TranslatingListener:
    """Passes the inner adapter's events on to ``listener`` with the real keys this process
    knows (see the module docstring)."""

    def __init__(self, listener: Any, names: NameHider) -> None:
        self.listener = listener
        self._names = names

    def _known(self, keys: Sequence[ObjectKey]) -> list[tuple[int, ObjectKey]]:
        found = [(i, self._names.real(k)) for i, k in enumerate(keys)]
        return [(i, k) for i, k in found if k is not None]

    def on_l2_keys_stored(self, keys: list[ObjectKey], sizes: list[int]) -> None:
        known = self._known(keys)
        if known and hasattr(self.listener, "on_l2_keys_stored"):
            self.listener.on_l2_keys_stored([k for _, k in known], [sizes[i] for i, _ in known])

    def on_l2_keys_accessed(self, keys: list[ObjectKey]) -> None:
        known = self._known(keys)
        if known and hasattr(self.listener, "on_l2_keys_accessed"):
            self.listener.on_l2_keys_accessed([k for _, k in known])

    def on_l2_keys_deleted(self, keys: list[ObjectKey]) -> None:
        known = self._known(keys)
        if known and hasattr(self.listener, "on_l2_keys_deleted"):
            self.listener.on_l2_keys_deleted([k for _, k in known])


class HiddenNamesAdapter(InnerBackendDelegation, L2AdapterInterface):
    """``inner`` under hidden names (see the module docstring). Owns ``inner`` (closes it).
    ``read_record(head bytes, hidden key)`` returns the real key in a stored object's key
    record (raising ``ValueError`` when it has none under this names key); ``head_bytes`` is
    how many leading bytes it needs."""

    def __init__(self, inner: L2AdapterInterface, names: NameHider,
                 read_record: Callable[[bytes, ObjectKey], ObjectKey], head_bytes: int) -> None:
        super().__init__(inner.max_capacity_bytes)
        self._inner = inner
        self._names = names
        self._read_record = read_record
        self._head_bytes = head_bytes
        self._translators: list[_TranslatingListener] = []

    # -- event fds and tasks --------------------------------------------------------------------

    def get_store_event_fd(self) -> int:
        return self._inner.get_store_event_fd()

    def get_lookup_and_lock_event_fd(self) -> int:
        return self._inner.get_lookup_and_lock_event_fd()

    def get_load_event_fd(self) -> int:
        return self._inner.get_load_event_fd()

    def submit_store_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                          ) -> L2TaskId:
        return self._inner.submit_store_task(self._names.hide(list(keys)), objects)

    def writes_head_last(self) -> bool:
        """The inner adapter's head-last capability."""
        return adapter_writes_head_last(self._inner)

    def submit_store_task_head_last(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj],
                                    heads: Sequence[DeferredHead]) -> L2TaskId:
        return self._inner.submit_store_task_head_last(  # type: ignore[attr-defined]
            self._names.hide(list(keys)), objects, heads)

    def replace_existing_on_store(self) -> bool:
        """Switch the inner adapter to replacing stores, when it can."""
        return enable_replacing_stores(self._inner)

    def pop_completed_store_tasks(self) -> dict[L2TaskId, Any]:
        return self._inner.pop_completed_store_tasks()

    def submit_lookup_and_lock_task(
        self, keys: Sequence[ObjectKey],
        group_layout_descs: dict[int, MemoryLayoutDesc] | None = None,
    ) -> L2TaskId:
        return self._inner.submit_lookup_and_lock_task(self._names.hide(list(keys)),
                                                       group_layout_descs)

    def query_lookup_and_lock_result(self, task_id: L2TaskId) -> Any:
        return self._inner.query_lookup_and_lock_result(task_id)

    def submit_unlock(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.submit_unlock(self._names.hide(list(keys)))

    def submit_load_task(self, keys: Sequence[ObjectKey], objects: Sequence[MemoryObj]
                         ) -> L2TaskId:
        return self._inner.submit_load_task(self._names.hide(list(keys)), objects)

    def query_load_result(self, task_id: L2TaskId) -> Any:
        return self._inner.query_load_result(task_id)

    # -- sizes, deletion, recency, usage ------------------------------------------------------

    def get_object_sizes(self, keys: Sequence[ObjectKey]) -> dict[ObjectKey, int]:
        keys = list(keys)
        hidden = self._names.hide(keys)
        sizes = self._inner.get_object_sizes(hidden)
        return {key: sizes[h] for key, h in zip(keys, hidden) if h in sizes}

    def delete(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.delete(self._names.hide(list(keys)))

    def touch_keys(self, keys: Sequence[ObjectKey]) -> None:
        self._inner.touch_keys(self._names.hide(list(keys)))

    def scrub_entries(self, *, delete: bool = False) -> Any:
        """The inner adapter's entry scrub (its names are hidden keys), ``None`` without one."""
        method = getattr(self._inner, "scrub_entries", None)
        return method(delete=delete) if callable(method) else None

    # -- listing and listeners ----------------------------------------------------------------

    def list_l2_keys(self, model_name: str | None = None, *args: Any, **kwargs: Any
                     ) -> list[ObjectKey]:
        """The real keys of every stored object this names key can read (optionally of one
        model). Names this process does not remember are read back from their key records:
        one load of each such object."""
        listed = self._inner.list_l2_keys()
        keys: list[ObjectKey] = []
        unknown: list[ObjectKey] = []
        for hidden in listed:
            real = self._names.real(hidden)
            if real is None:
                unknown.append(hidden)
            else:
                keys.append(real)
        keys += self._read_records(unknown)
        return [k for k in keys if model_name is None or k.model_name == model_name]

    def _read_records(self, hidden_keys: list[ObjectKey]) -> list[ObjectKey]:
        if not hidden_keys:
            return []
        sizes = self._inner.get_object_sizes(hidden_keys) if self.reports_object_sizes() else {}
        found: list[ObjectKey] = []
        for hidden in hidden_keys:
            size = sizes.get(hidden)
            if size is None or size < self._head_bytes:
                continue
            if size > DEFAULT_MAX_OBJECT_BYTES:  # no KV chunk is this large: never read it
                _log.info("hidden names: %s not listed: %d bytes, over the %d-byte limit",
                          hidden.chunk_hash.hex(), size, DEFAULT_MAX_OBJECT_BYTES)
                continue
            buf = TensorMemoryObj.allocate(MemoryLayoutDesc([[size]], [torch.uint8]),
                                           fmt=MemoryFormat.BINARY_BUFFER)
            if not load_sync(self._inner, [hidden], [buf]).test(0):
                continue
            head = bytes(tensor_bytes(buf.raw_data[:self._head_bytes]))
            try:
                found.append(self._read_record(head, hidden))
            except ValueError as exc:  # not ours to read (another names key), or no record
                _log.info("hidden names: %s not listed: %s", hidden.chunk_hash.hex(), exc)
        return found

    def register_listener(self, listener: Any) -> None:
        translator = _TranslatingListener(listener, self._names)
        self._translators.append(translator)
        self._inner.register_listener(translator)

    def unregister_listener(self, listener: Any) -> None:
        for translator in [t for t in self._translators if t.listener is listener]:
            self._translators.remove(translator)
            self._inner.unregister_listener(translator)

    # -- lifecycle ------------------------------------------------------------------------------

    def report_status(self) -> dict[str, Any]:
        status = dict(self._inner.report_status())
        status["hidden_names"] = True
        return status

    def close(self) -> None:
        self._inner.close()
