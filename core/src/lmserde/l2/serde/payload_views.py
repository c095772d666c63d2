"""Byte views of a stored object's payload, reused for as long as their pooled buffer lives.

The serde wrapper frames every object inside a temporary from the L1 manager's pool and hands
the serde a byte object over the payload part of it (:class:`~lmserde.frame_checksum.FramedPayload`
when the serde may hash the payload in its own pass). Building that view — a torch slice plus a
memory object — runs right after a pass over a 32 MiB payload has flushed the CPU caches, where
it costs about 0.1 ms on the 2-core VM this project is measured on (against about 10 us in a
microbenchmark). A pooled temporary comes back with the same storage, so its views can be kept:
:meth:`PayloadViews.view` returns the one made for the same buffer and range before, reset as
if new (its used size undone; a hashing view's next ``payload_hasher()`` is a fresh hasher).

Only :class:`~lmserde.memory.TensorMemoryObj` buffers (whose storage never changes) are cached;
any other buffer gets a new view each time. A buffer keeps at most :data:`VIEWS_PER_BUFFER`
views (a serde whose output size varies reads payloads of many lengths into one temporary).
"""

from __future__ import annotations

import threading
import weakref

import torch

from lmserde.frame_checksum import FramedPayload
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj, byte_layout

__all__ = ["PayloadViews", "VIEWS_PER_BUFFER", "byte_view"]

#: Views kept per buffer (the most recently made; older ones are dropped).
VIEWS_PER_BUFFER = 4


def byte_view(raw: torch.Tensor, *, hashing: bool = False) -> TensorMemoryObj:
    """A new byte object over all of ``raw`` (a 1-D uint8 tensor); ``hashing``: a
    :class:`~lmserde.frame_checksum.FramedPayload`, whose bound hasher the serde may use."""
    cls = FramedPayload if hashing else TensorMemoryObj
    return cls.over(raw, byte_layout(raw.numel()), fmt=MemoryFormat.BINARY_BUFFER)


class PayloadViews:
    """Byte views of ``buffer.raw_data[start:stop]``, one per buffer, range and kind, reused
    while the buffer lives. Thread-safe; a view must not be used by two tasks at once (the
    wrapper's temporaries are each held by one task)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._views: weakref.WeakKeyDictionary[
            TensorMemoryObj, dict[tuple[int, int, bool], TensorMemoryObj]
        ] = weakref.WeakKeyDictionary()

    def view(self, buffer: MemoryObj, start: int, stop: int, *,
             hashing: bool = False) -> TensorMemoryObj:
        """A byte object over ``buffer.raw_data[start:stop]`` (``hashing``: a
        :class:`~lmserde.frame_checksum.FramedPayload`), reset as if new."""
        if not isinstance(buffer, TensorMemoryObj):
            return byte_view(buffer.raw_data[start:stop], hashing=hashing)
        key = (start, stop, hashing)
        with self._lock:
            views = self._views.get(buffer)
            view = None if views is None else views.pop(key, None)
            if view is not None:
                views[key] = view  # most recently used last
        if view is None:
            view = byte_view(buffer.raw_data[start:stop], hashing=hashing)
            with self._lock:
                views = self._views.setdefault(buffer, {})
                views[key] = view
                while len(views) > VIEWS_PER_BUFFER:
                    del views[next(iter(views))]
            return view
        view.reset_used_size()
        if isinstance(view, FramedPayload):
            view.forget_hasher()
        return view
