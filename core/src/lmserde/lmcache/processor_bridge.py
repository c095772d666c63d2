"""``LMCacheProcessorBridge``: an lmserde processor as LMCache's serde wrapper expects to drive it.

LMCache's ``SerdeL2AdapterWrapper`` calls the same processor methods lmserde defines
(``submit_serialize``/``query_serialize_result``/... , the two event fds,
``estimate_serialized_size``, ``close``, and in newer releases the group sizes and slot
mappings). The bridge adds what differs between the hosts:

* keys and layouts arrive as LMCache types and are converted to lmserde's;
* a multi serde (``asym_k16_v8``) receives one whole two-group object per item from LMCache
  0.5.6; the bridge splits it into per-slot views using the serde's slot mapping (hosts that
  already pass tuples are left alone);
* ``pad_to_estimate``: LMCache 0.5.6 neither narrows load buffers to the stored size nor checks
  size contracts, and its ``fs`` adapter loads only exact-length files. With padding on, every
  serialized object is zero-filled up to ``estimate_serialized_size`` and reported at that size,
  so an upper-bound serde behaves as an exact one there (on every LMCache adapter). lmserde's
  decoders take lengths from their headers, so the padding is ignored on load.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import torch

from lmserde.base import SerdeProcessor, SerdeTaskId
from lmserde.lmcache.conversion import as_lmserde_key, as_slot_group, as_slot_layouts
from lmserde.spec import SerdeSizeContract

__all__ = ["LMCacheProcessorBridge"]

_ESTIMATE_CACHE_LIMIT = 64


def _layout_signature(obj: Any) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    return (tuple(tuple(s) for s in obj.get_shapes()), tuple(str(d) for d in obj.get_dtypes()))


class _LayoutOnly:
    """The shapes and dtypes of an object, for estimating without keeping the object."""

    def __init__(self, obj: Any) -> None:
        self.shapes = list(obj.get_shapes())
        self.dtypes = list(obj.get_dtypes())


def _pad_to(dst: Any, full: int) -> None:
    """Zero ``dst``'s bytes from its used size up to ``full`` and report ``full`` bytes."""
    used = int(dst.get_size())
    if used >= full:
        return
    raw = getattr(dst, "raw_data", None)
    if not isinstance(raw, torch.Tensor) or raw.dtype != torch.uint8 or raw.numel() < full:
        raise ValueError(
            f"cannot pad a serialized object to {full} bytes: it has no uint8 raw_data of that size"
        )
    raw[used:full].zero_()
    dst.set_used_size(full)


class LMCacheProcessorBridge(SerdeProcessor):
    """Wraps an lmserde :class:`~lmserde.SerdeProcessor` for LMCache's serde wrapper.

    ``serde_type`` and ``size_contract`` describe the wrapped serde; ``pad_to_estimate`` (see the
    module documentation) makes every successful serialize report exactly the estimate.
    """

    def __init__(
        self,
        inner: SerdeProcessor,
        *,
        serde_type: str,
        size_contract: SerdeSizeContract = SerdeSizeContract.UPPER_BOUND,
        pad_to_estimate: bool = False,
    ) -> None:
        self._inner = inner
        self.serde_type = serde_type
        self.pad_to_estimate = bool(pad_to_estimate)
        self.size_contract = SerdeSizeContract.EXACT if self.pad_to_estimate else size_contract
        self._in_map = inner.input_slot_mapping()
        self._out_map = inner.output_slot_mapping()
        self._lock = threading.Lock()
        self._pads: dict[SerdeTaskId, list[tuple[Any, int]]] = {}
        self._estimates: dict[Any, int] = {}

    @property
    def inner(self) -> SerdeProcessor:
        """The wrapped lmserde processor."""
        return self._inner

    # -- fds, sizes, arity ----------------------------------------------------------------------

    def get_serialize_event_fd(self) -> int:
        return self._inner.get_serialize_event_fd()

    def get_deserialize_event_fd(self) -> int:
        return self._inner.get_deserialize_event_fd()

    def estimate_serialized_size(self, layout_desc: Any) -> int:
        """The serde's estimate for an LMCache or lmserde layout (whole object or per-slot tuple)."""
        return self._inner.estimate_serialized_size(as_slot_layouts(layout_desc, self._in_map))

    def serializer_group_size(self) -> int | None:
        return self._inner.serializer_group_size()

    def deserializer_group_size(self) -> int | None:
        return self._inner.deserializer_group_size()

    def input_slot_mapping(self) -> tuple[int | None, ...] | None:
        return self._in_map

    def output_slot_mapping(self) -> tuple[int | None, ...] | None:
        return self._out_map

    def _estimate_of(self, src: Any) -> int:
        if isinstance(src, tuple):
            layouts = tuple(None if s is None else _LayoutOnly(s) for s in src)
            return self.estimate_serialized_size(layouts)
        signature = _layout_signature(src)
        with self._lock:
            cached = self._estimates.get(signature)
        if cached is None:
            cached = self.estimate_serialized_size(_LayoutOnly(src))
            with self._lock:
                if len(self._estimates) >= _ESTIMATE_CACHE_LIMIT:
                    self._estimates.clear()
                self._estimates[signature] = cached
        return cached

    # -- serialize ------------------------------------------------------------------------------

    def submit_serialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[Any], keys: Sequence[Any]
    ) -> SerdeTaskId:
        items = [as_slot_group(src, self._in_map) for src in src_objs]
        converted = [as_lmserde_key(k) for k in keys]
        pads = ([(dst, self._estimate_of(src)) for src, dst in zip(src_objs, dst_objs)]
                if self.pad_to_estimate else None)
        with self._lock:  # registered before any caller can query the returned id
            task_id = self._inner.submit_serialize(items, list(dst_objs), converted)
            if pads:
                self._pads[task_id] = pads
        return task_id

    def query_serialize_result(self, task_id: SerdeTaskId) -> bool | None:
        result = self._inner.query_serialize_result(task_id)
        if result is None:
            return None
        with self._lock:
            pads = self._pads.pop(task_id, None)
        if result and pads:
            try:
                for dst, full in pads:
                    _pad_to(dst, full)
            except Exception:
                return False
        return result

    # -- deserialize ----------------------------------------------------------------------------

    def submit_deserialize(
        self, src_objs: Sequence[Any], dst_objs: Sequence[Any], keys: Sequence[Any]
    ) -> SerdeTaskId:
        items = [as_slot_group(dst, self._out_map) for dst in dst_objs]
        converted = [as_lmserde_key(k) for k in keys]
        return self._inner.submit_deserialize(list(src_objs), items, converted)

    def query_deserialize_result(self, task_id: SerdeTaskId) -> bool | None:
        return self._inner.query_deserialize_result(task_id)

    # -- identity -------------------------------------------------------------------------------

    def get_config(self) -> dict[str, Any]:
        """The wrapped processor's identity config."""
        return self._inner.get_config()

    def authenticates_output(self) -> bool:
        """The wrapped processor's answer."""
        return self._inner.authenticates_output()

    # -- lifecycle ------------------------------------------------------------------------------

    def close(self) -> None:
        """Close the wrapped processor (waits for its in-flight work); idempotent."""
        self._inner.close()
        with self._lock:
            self._pads.clear()
