"""``L1Manager``: the CPU object cache the L2 path reads from and writes into.

Objects move through two lock states: *write-locked* after :meth:`L1Manager.reserve_write` (the
writer fills the buffer) and *ready* after a ``finish_write*`` call, where any number of read locks
may be held. Temporary objects (serde staging buffers) come from a bounded, size-keyed
:class:`~lmserde.l1.buffer_pool.BufferPool`, fire no write-finished notification and are deleted
automatically when their last read lock is dropped.
"""

from __future__ import annotations

import enum
import logging
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from lmserde.keys import ObjectKey
from lmserde.l1.buffer_pool import BufferPool, BufferPoolStats
from lmserde.l1.errors import L1Error
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj

__all__ = ["L1Manager", "L1Result", "WriteListener", "DeleteListener", "DEFAULT_POOL_BYTES"]

#: Default bound of the temporary-buffer pool (further bounded by the capacity).
DEFAULT_POOL_BYTES = 256 << 20

L1Result = dict[ObjectKey, tuple[L1Error, MemoryObj | None]]
WriteListener = Callable[[list[ObjectKey]], None]
#: ``listener(keys, tag)``: called after :meth:`L1Manager.delete` removed ``keys`` (seen with ``tag``).
DeleteListener = Callable[[list[ObjectKey], str], None]

_WRITE_MODES = ("new", "update", "all")

_log = logging.getLogger(__name__)


class _State(enum.Enum):
    WRITE_LOCKED = "write_locked"
    READY = "ready"


@dataclass(eq=False)
class _Entry:
    obj: TensorMemoryObj
    nbytes: int
    temporary: bool
    tag: str
    fmt: MemoryFormat
    state: _State = _State.WRITE_LOCKED
    readers: int = 0


def _is_write_locked(entry: _Entry) -> bool:
    return entry.state is _State.WRITE_LOCKED


def _is_ready(entry: _Entry) -> bool:
    return entry.state is _State.READY


def _is_read_locked(entry: _Entry) -> bool:
    return entry.state is _State.READY and entry.readers > 0


def _is_unlocked_ready(entry: _Entry) -> bool:
    return entry.state is _State.READY and not entry.readers


def _check_keys(keys: Sequence[ObjectKey]) -> list[ObjectKey]:
    key_list = list(keys)
    if len(set(key_list)) != len(key_list):
        raise ValueError("the same key appears more than once in one L1 call")
    return key_list


class L1Manager:
    """Thread-safe object cache of ``capacity_bytes`` with per-key results.

    Every call takes a key list and returns ``{key: (L1Error, MemoryObj | None)}``; a call never
    fails as a whole because of one key (list-length mismatches and duplicate keys raise
    ``ValueError``). A key that does not fit gets ``OUT_OF_MEMORY`` and nothing else is disturbed.

    Objects reserved with a ``tag`` are staging objects of that tag's owner: calls with another
    tag (readers included) see ``KEY_NOT_EXIST``. Bytes are accounted per ``cache_salt``.
    """

    def __init__(self, capacity_bytes: int, *, temp_pool_bytes: int | None = None) -> None:
        if not isinstance(capacity_bytes, int) or isinstance(capacity_bytes, bool) \
                or capacity_bytes < 0:
            raise ValueError(f"L1Manager capacity_bytes must be an int >= 0, got {capacity_bytes!r}")
        if temp_pool_bytes is None:
            temp_pool_bytes = min(capacity_bytes, DEFAULT_POOL_BYTES)
        self._capacity = capacity_bytes
        # pooled free temporaries keep their object: same layout again -> no new object either
        self._pool: BufferPool[tuple[TensorMemoryObj, MemoryFormat]] = BufferPool(
            min(temp_pool_bytes, capacity_bytes))
        self._lock = threading.Lock()
        self._entries: dict[ObjectKey, _Entry] = {}
        self._used = 0
        self._by_salt: dict[str, int] = {}
        self._listeners: list[WriteListener] = []
        self._delete_listeners: list[DeleteListener] = []

    # -- accounting -----------------------------------------------------------------------------

    @property
    def capacity_bytes(self) -> int:
        return self._capacity

    def memory_used_bytes(self, cache_salt: str | None = None) -> int:
        """Bytes held by live objects, in total or for one ``cache_salt``."""
        with self._lock:
            if cache_salt is None:
                return self._used
            return self._by_salt.get(cache_salt, 0)

    def memory_used_bytes_by_salt(self) -> dict[str, int]:
        """Bytes held per ``cache_salt`` (salts holding nothing are absent)."""
        with self._lock:
            return dict(self._by_salt)

    def num_objects(self) -> int:
        with self._lock:
            return len(self._entries)

    def __contains__(self, key: object) -> bool:
        with self._lock:
            return key in self._entries

    def pool_stats(self) -> BufferPoolStats:
        """Counters of the temporary-buffer pool."""
        return self._pool.stats()

    def add_write_listener(self, listener: WriteListener) -> None:
        """Call ``listener(keys)`` after non-temporary, untagged objects finish being written."""
        with self._lock:
            self._listeners.append(listener)

    def add_delete_listener(self, listener: DeleteListener) -> None:
        """Call ``listener(keys, tag)`` after :meth:`delete` removed ``keys`` (an eviction).

        Only objects removed by :meth:`delete` are reported (not failed writes, not temporaries
        freed by their last reader, not objects replaced by ``reserve_write``). The listener runs
        in the deleting thread after the manager's lock is released, so it may call the manager;
        an exception it raises is logged and does not affect the deletion.
        """
        with self._lock:
            self._delete_listeners.append(listener)

    def remove_delete_listener(self, listener: DeleteListener) -> None:
        """Stop calling ``listener`` (a listener that was never added is ignored)."""
        with self._lock:
            if listener in self._delete_listeners:
                self._delete_listeners.remove(listener)

    # -- write path -----------------------------------------------------------------------------

    def reserve_write(
        self,
        keys: Sequence[ObjectKey],
        is_temporary: Sequence[bool] | bool,
        layout_desc: MemoryLayoutDesc | Sequence[MemoryLayoutDesc],
        tag: str = "",
        mode: str = "new",
    ) -> L1Result:
        """Reserve write-locked objects.

        ``layout_desc`` is one layout for every key or one per key. ``mode="new"`` only creates
        (an existing key is ``KEY_NOT_WRITABLE``); ``"update"`` only replaces unlocked, ready
        objects; ``"all"`` does either.
        """
        key_list = _check_keys(keys)
        n = len(key_list)
        temps = [bool(is_temporary)] * n if isinstance(is_temporary, bool) else list(is_temporary)
        if isinstance(layout_desc, MemoryLayoutDesc):
            layouts = [layout_desc] * n
        else:
            layouts = list(layout_desc)
        if len(temps) != n or len(layouts) != n:
            raise ValueError(
                f"reserve_write got {n} keys, {len(temps)} is_temporary flags and {len(layouts)} "
                "layouts; pass one flag and one layout per key (or a single layout)"
            )
        if mode not in _WRITE_MODES:
            raise ValueError(f"reserve_write mode must be one of {_WRITE_MODES}, got {mode!r}")
        result: L1Result = {}
        with self._lock:
            for key, temp, layout in zip(key_list, temps, layouts):
                result[key] = self._reserve_one(key, temp, layout, tag, mode)
        return result

    def _reserve_one(
        self, key: ObjectKey, temporary: bool, layout: MemoryLayoutDesc, tag: str, mode: str
    ) -> tuple[L1Error, MemoryObj | None]:
        existing = self._entries.get(key)
        if existing is not None:
            replaceable = (existing.state is _State.READY and existing.readers == 0
                           and existing.tag == tag)
            if mode == "new" or not replaceable:
                return L1Error.KEY_NOT_WRITABLE, None
        elif mode == "update":
            return L1Error.KEY_NOT_WRITABLE, None
        nbytes = layout.nbytes
        freed = existing.nbytes if existing is not None else 0
        if self._used - freed + nbytes > self._capacity:
            return L1Error.OUT_OF_MEMORY, None
        if existing is not None:
            self._remove_locked(key, existing)
        pooled = self._pool.take(nbytes) if temporary else None
        if pooled is None:
            # keep the footprint (live objects + pooled free buffers) within the capacity
            self._pool.trim(self._capacity - self._used - nbytes)
            obj = TensorMemoryObj.over(torch.empty(nbytes, dtype=torch.uint8), layout)
            fmt = obj.metadata.fmt
        else:
            obj, fmt = pooled
            if obj.layout == layout:
                obj.reset_used_size()
                obj.metadata.fmt = fmt
            else:
                obj = TensorMemoryObj.over(obj.raw_data, layout)
                fmt = obj.metadata.fmt
        self._entries[key] = _Entry(obj, nbytes, temporary, tag, fmt)
        self._used += nbytes
        self._by_salt[key.cache_salt] = self._by_salt.get(key.cache_salt, 0) + nbytes
        return L1Error.SUCCESS, obj

    def finish_write(self, keys: Sequence[ObjectKey], tag: str = "") -> L1Result:
        """Write-locked -> ready (no read lock). Notifies write listeners for regular objects."""
        return self._finish_write(keys, tag, read_locks=0)

    def finish_write_and_reserve_read(
        self, keys: Sequence[ObjectKey], read_locks: int = 1, tag: str = ""
    ) -> L1Result:
        """Write-locked -> ready with ``read_locks`` read locks, atomically."""
        if read_locks < 0:
            raise ValueError(f"read_locks must be >= 0, got {read_locks}")
        return self._finish_write(keys, tag, read_locks=read_locks)

    def _finish_write(self, keys: Sequence[ObjectKey], tag: str, read_locks: int) -> L1Result:
        key_list = _check_keys(keys)
        result: L1Result = {}
        notify: list[ObjectKey] = []
        with self._lock:
            for key, entry in self._entries_in_state(key_list, tag, result, _is_write_locked,
                                                     show_wrong=True):
                entry.state = _State.READY
                entry.readers = read_locks
                result[key] = (L1Error.SUCCESS, entry.obj)
                if not entry.temporary and not entry.tag:
                    notify.append(key)
            listeners = list(self._listeners) if notify else []
        for listener in listeners:
            listener(notify)
        return result

    def finish_write_and_delete(self, keys: Sequence[ObjectKey], tag: str = "") -> L1Result:
        """Discard write-locked objects atomically (a failed write)."""
        key_list = _check_keys(keys)
        result: L1Result = {}
        with self._lock:
            for key, entry in self._entries_in_state(key_list, tag, result, _is_write_locked,
                                                     show_wrong=True):
                self._remove_locked(key, entry)
                result[key] = (L1Error.SUCCESS, None)
        return result

    # -- read path ------------------------------------------------------------------------------

    def reserve_read(self, keys: Sequence[ObjectKey], tag: str = "") -> L1Result:
        """Take one read lock on each ready object."""
        key_list = _check_keys(keys)
        result: L1Result = {}
        with self._lock:
            for key, entry in self._entries_in_state(key_list, tag, result, _is_ready,
                                                     show_wrong=False):
                entry.readers += 1
                result[key] = (L1Error.SUCCESS, entry.obj)
        return result

    def finish_read(self, keys: Sequence[ObjectKey]) -> L1Result:
        """Drop one read lock; a temporary object is deleted when its last reader finishes.

        The object is returned while it stays alive, ``None`` once deleted.
        """
        key_list = _check_keys(keys)
        result: L1Result = {}
        with self._lock:
            for key, entry in self._entries_in_state(key_list, None, result, _is_read_locked,
                                                     show_wrong=False):
                entry.readers -= 1
                if entry.temporary and entry.readers == 0:
                    self._remove_locked(key, entry)
                    result[key] = (L1Error.SUCCESS, None)
                else:
                    result[key] = (L1Error.SUCCESS, entry.obj)
        return result

    def delete(self, keys: Sequence[ObjectKey], tag: str = "") -> L1Result:
        """Delete ready, unlocked objects; locked ones are refused with ``KEY_IN_WRONG_STATE``.

        Delete listeners (:meth:`add_delete_listener`) are told which keys were removed.
        """
        key_list = _check_keys(keys)
        result: L1Result = {}
        removed: list[ObjectKey] = []
        with self._lock:
            for key, entry in self._entries_in_state(key_list, tag, result, _is_unlocked_ready,
                                                     show_wrong=True):
                self._remove_locked(key, entry)
                result[key] = (L1Error.SUCCESS, None)
                removed.append(key)
            listeners = list(self._delete_listeners) if removed else []
        for listener in listeners:
            try:
                listener(list(removed), tag)
            except Exception:  # a listener never undoes or fails a deletion
                _log.exception("L1 delete listener %r raised; ignored", listener)
        return result

    # -- internals ------------------------------------------------------------------------------

    def _entries_in_state(
        self, key_list: list[ObjectKey], tag: str | None, result: L1Result,
        wanted: Callable[[_Entry], bool], *, show_wrong: bool,
    ) -> Iterator[tuple[ObjectKey, _Entry]]:
        """Under the lock: yield ``(key, entry)`` for each key whose entry exists (seen with
        ``tag``; ``None``: whatever its tag) and is ``wanted``; record ``KEY_NOT_EXIST`` or
        ``KEY_IN_WRONG_STATE`` (with the object when ``show_wrong``) in ``result`` for the rest."""
        for key in key_list:
            entry = self._entries.get(key) if tag is None else self._visible(key, tag)
            if entry is None:
                result[key] = (L1Error.KEY_NOT_EXIST, None)
            elif not wanted(entry):
                result[key] = (L1Error.KEY_IN_WRONG_STATE, entry.obj if show_wrong else None)
            else:
                yield key, entry

    def _visible(self, key: ObjectKey, tag: str) -> _Entry | None:
        entry = self._entries.get(key)
        if entry is None or entry.tag != tag:
            return None
        return entry

    def _remove_locked(self, key: ObjectKey, entry: _Entry) -> None:
        del self._entries[key]
        self._used -= entry.nbytes
        salt_bytes = self._by_salt.get(key.cache_salt, 0) - entry.nbytes
        if salt_bytes > 0:
            self._by_salt[key.cache_salt] = salt_bytes
        else:
            self._by_salt.pop(key.cache_salt, None)
        if entry.temporary:
            self._pool.release((entry.obj, entry.fmt), entry.nbytes)
            self._pool.trim(self._capacity - self._used)

    def __repr__(self) -> str:
        return (f"L1Manager(capacity={self._capacity}, used={self._used}, "
                f"objects={len(self._entries)})")
