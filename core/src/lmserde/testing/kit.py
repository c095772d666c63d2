"""The conformance kit: the checks every serde in this repository passes, for third-party serdes too.

Subclass :class:`SerdeConformance` (single-tensor serdes) or :class:`MultiSerdeConformance`
(multi-output serdes) in a test module, name the class ``Test...`` and set the class attributes;
pytest collects the inherited ``test_*`` methods. Everything goes through the installed entry point
and the processor the registry builds, exactly as an L2 wrapper would use it.

This module is over 400 lines because it is one conformance suite: every check is a method of
the one class plugin authors subclass.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from importlib.metadata import entry_points
from typing import Any, ClassVar

import torch

from lmserde.base import SerdeProcessor
from lmserde.events import wait_on_fd
from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import TensorMemoryObj, as_byte_tensor
from lmserde.multi import GroupSlotView, layout_desc_to_group
from lmserde.registry import SERDE_GROUP, create_serde_processor, get_serde_spec
from lmserde.spec import SerdeSizeContract

__all__ = [
    "SerdeConformance",
    "MultiSerdeConformance",
    "DEFAULT_LAYOUTS",
    "DEFAULT_KV_LAYOUTS",
    "random_object",
    "wait_for_result",
    "TIMEOUT_SECONDS",
]

#: How long any single processor task may take in the kit before the test fails (no hangs).
TIMEOUT_SECONDS = 30.0

#: Layouts a byte- or element-wise serde must handle: several dtypes, odd sizes, multi-group
#: objects with a misaligned group and an empty group.
DEFAULT_LAYOUTS: tuple[MemoryLayoutDesc, ...] = (
    MemoryLayoutDesc([[2, 4, 16, 64]], [torch.bfloat16]),
    MemoryLayoutDesc([[3, 5, 7]], [torch.float16]),
    MemoryLayoutDesc([[2, 2, 8, 32]], [torch.float32]),
    MemoryLayoutDesc([[3], [4, 8]], [torch.float16, torch.float32]),
    MemoryLayoutDesc([[4, 4], [0], [8]], [torch.bfloat16, torch.bfloat16, torch.float16]),
)

#: Two-group K/V layouts for multi-output serdes (slot 0 = K, slot 1 = V).
DEFAULT_KV_LAYOUTS: tuple[MemoryLayoutDesc, ...] = (
    MemoryLayoutDesc([[4, 16, 2, 64], [4, 16, 2, 64]], [torch.bfloat16, torch.bfloat16]),
    MemoryLayoutDesc([[2, 8, 4, 32], [2, 8, 4, 32]], [torch.float16, torch.float16]),
    MemoryLayoutDesc([[3, 7, 1, 16], [3, 7, 1, 16]], [torch.float32, torch.float32]),
)


def random_object(layout: MemoryLayoutDesc, seed: int, *, padding: int = 0) -> TensorMemoryObj:
    """An object of ``layout`` filled with seeded random data (normal for floats, any byte else)."""
    gen = torch.Generator().manual_seed(seed)
    obj = TensorMemoryObj.allocate(layout, padding=padding)
    raw = obj.raw_data
    raw.copy_(torch.randint(0, 256, (raw.numel(),), generator=gen, dtype=torch.uint8))
    offsets = layout.group_offsets()
    for i, (shape, dtype) in enumerate(zip(layout.shapes, layout.dtypes)):
        if not dtype.is_floating_point or math.prod(shape) == 0:
            continue
        values = torch.randn(shape, generator=gen, dtype=torch.float32).to(dtype)
        raw[offsets[i] : offsets[i + 1]].copy_(values.reshape(-1).view(torch.uint8))
    return obj


def wait_for_result(proc: SerdeProcessor, task_id: int, *, serialize: bool) -> bool:
    """Block on the processor's fd until ``task_id`` finishes; fail after ``TIMEOUT_SECONDS``."""
    fd = proc.get_serialize_event_fd() if serialize else proc.get_deserialize_event_fd()
    query = proc.query_serialize_result if serialize else proc.query_deserialize_result
    try:
        return wait_on_fd(fd, lambda: query(task_id), timeout=TIMEOUT_SECONDS,
                          what=f"task {task_id}")
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def _as_float(group: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A group's bytes as float32 values (copied first: a misaligned group has no typed view)."""
    if group.numel() == 0:
        return torch.empty(0)
    return group.clone().view(dtype).float()


def _key(i: int) -> ObjectKey:
    return ObjectKey(ObjectKey.IntHash2Bytes(1000 + i) * 4, "conformance/model", 0x01010101,
                     0, "tenant-a")


def _copy_into(buffer_size: int, data: torch.Tensor, *, fill: int = 0x5A) -> TensorMemoryObj:
    """A byte buffer of ``buffer_size`` holding ``data`` then ``fill`` bytes (not narrowed)."""
    raw = torch.full((buffer_size,), fill, dtype=torch.uint8)
    raw[: data.numel()].copy_(data)
    return TensorMemoryObj.from_tensor(raw)


class _ConformanceBase:
    """Shared machinery; the concrete kits define how items are made and compared."""

    serde_type: ClassVar[str]
    serde_kwargs: ClassVar[dict[str, Any]] = {}
    #: ``None``: lossless unless the spec declares ``lossy=True``.
    lossless: ClassVar[bool | None] = None
    #: For lossy serdes: bound on ||x - y|| / ||x|| per group (or slot).
    max_relative_error: ClassVar[float] = 0.0
    #: Whether serializing the same object twice must give the same bytes.
    deterministic: ClassVar[bool] = True
    #: Whether random garbage of the right length must be rejected (formats with integrity checks).
    detects_corruption: ClassVar[bool] = False
    #: Whether the serde accepts ``max_workers``.
    supports_max_workers: ClassVar[bool] = True

    # -- subclass interface ---------------------------------------------------------------------

    def kit_layouts(self) -> Sequence[MemoryLayoutDesc]:
        raise NotImplementedError

    def make_source(self, layout: MemoryLayoutDesc, seed: int) -> TensorMemoryObj:
        """The object serialized for ``layout``; override to shape data for your serde."""
        return random_object(layout, seed)

    def _src_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        raise NotImplementedError

    def _dst_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        raise NotImplementedError

    def _estimate(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> int:
        raise NotImplementedError

    def _compared_groups(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> list[int]:
        raise NotImplementedError

    # -- helpers --------------------------------------------------------------------------------

    def processor(self, **extra: Any) -> SerdeProcessor:
        return create_serde_processor({"type": self.serde_type, **self.serde_kwargs, **extra})

    def is_lossless(self) -> bool:
        if self.lossless is not None:
            return self.lossless
        return not get_serde_spec(self.serde_type).lossy

    def serialize(
        self, proc: SerdeProcessor, objs: Sequence[TensorMemoryObj], *, padding: int = 0
    ) -> list[TensorMemoryObj]:
        """Serialize through the processor; returns narrowed byte buffers."""
        layout = objs[0].get_layout()
        size = self._estimate(proc, layout)
        dsts = [TensorMemoryObj.allocate(MemoryLayoutDesc([[size + padding]], [torch.uint8]),
                                         zero=True) for _ in objs]
        task = proc.submit_serialize([self._src_item(proc, o) for o in objs], dsts,
                                     [_key(i) for i in range(len(objs))])
        assert wait_for_result(proc, task, serialize=True), "serialize failed"
        return dsts

    def deserialize(
        self, proc: SerdeProcessor, blobs: Sequence[TensorMemoryObj], layout: MemoryLayoutDesc,
        *, key_offset: int = 0,
    ) -> tuple[bool, list[TensorMemoryObj]]:
        outs = [TensorMemoryObj.allocate(layout, zero=True) for _ in blobs]
        task = proc.submit_deserialize(list(blobs), [self._dst_item(proc, o) for o in outs],
                                       [_key(i + key_offset) for i in range(len(blobs))])
        return wait_for_result(proc, task, serialize=False), outs

    def assert_close(
        self, proc: SerdeProcessor, original: TensorMemoryObj, restored: TensorMemoryObj
    ) -> None:
        layout = original.get_layout()
        for g in self._compared_groups(proc, layout):
            a = original.group_bytes(g)
            b = restored.group_bytes(g)
            if self.is_lossless():
                assert torch.equal(a, b), f"group {g} of {layout} did not round-trip exactly"
                continue
            dtype = layout.dtypes[g]
            x = _as_float(a, dtype)
            y = _as_float(b, dtype)
            if x.numel() == 0:
                continue
            denom = torch.linalg.vector_norm(x).item()
            err = torch.linalg.vector_norm(x - y).item() / (denom if denom > 0 else 1.0)
            assert err <= self.max_relative_error, (
                f"group {g} of {layout}: relative error {err:.4g} > {self.max_relative_error:.4g}"
            )

    # -- the checks -----------------------------------------------------------------------------

    def test_discovered_through_entry_point(self) -> None:
        names = [ep.name for ep in entry_points(group=SERDE_GROUP)]
        assert self.serde_type in names, (
            f"'{self.serde_type}' is not declared in entry-point group '{SERDE_GROUP}' by any "
            f"installed distribution (found: {sorted(set(names))})"
        )

    def test_factory_builds_processor(self) -> None:
        proc = self.processor()
        try:
            assert isinstance(proc, SerdeProcessor)
            assert proc.get_serialize_event_fd() != proc.get_deserialize_event_fd()
        finally:
            proc.close()

    def test_config_identity_is_canonical(self) -> None:
        """``get_config()`` is JSON, names the type and format version, and is the same for two
        processors of one config (and, with ``max_workers``, for any worker count)."""
        spec = get_serde_spec(self.serde_type)
        first, second = self.processor(), self.processor()
        try:
            config = first.get_config()
            assert json.loads(json.dumps(config, allow_nan=False)) == config
            assert config["type"] == self.serde_type
            assert config["format_version"] == spec.format_version
            assert second.get_config() == config
        finally:
            first.close()
            second.close()
        if self.supports_max_workers:
            wider = self.processor(max_workers=3)
            try:
                assert wider.get_config() == config, "max_workers must not change get_config()"
            finally:
                wider.close()

    def test_estimate_bounds_output(self) -> None:
        exact = get_serde_spec(self.serde_type).size_contract is SerdeSizeContract.EXACT
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                estimate = self._estimate(proc, layout)
                assert estimate == self._estimate(proc, layout), "estimate is not stable"
                (blob,) = self.serialize(proc, [self.make_source(layout, i)])
                assert blob.get_size() <= estimate, f"{layout}: wrote {blob.get_size()} > {estimate}"
                if exact:
                    assert blob.get_size() == estimate, (
                        f"{layout}: EXACT serde wrote {blob.get_size()} bytes, estimate {estimate}"
                    )
        finally:
            proc.close()

    def test_round_trip(self) -> None:
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                srcs = [self.make_source(layout, 10 * i + j) for j in range(2)]
                blobs = self.serialize(proc, srcs)
                ok, outs = self.deserialize(proc, blobs, layout)
                assert ok, f"{layout}: deserialize failed"
                for src, out in zip(srcs, outs):
                    self.assert_close(proc, src, out)
        finally:
            proc.close()

    def test_serialize_narrows_destination(self) -> None:
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                estimate = self._estimate(proc, layout)
                (blob,) = self.serialize(proc, [self.make_source(layout, i)], padding=64)
                assert blob.get_size() <= estimate, "destination was not narrowed to the output"
                assert len(blob.byte_array) == blob.get_size()
        finally:
            proc.close()

    def test_deserialize_accepts_overallocated_source(self) -> None:
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                src = self.make_source(layout, i)
                (blob,) = self.serialize(proc, [src])
                big = _copy_into(blob.get_size() + 97, as_byte_tensor(blob))
                ok, (out,) = self.deserialize(proc, [big], layout)
                assert ok, f"{layout}: an over-allocated source was rejected"
                self.assert_close(proc, src, out)
        finally:
            proc.close()

    def test_keys_are_aligned_with_items(self) -> None:
        proc = self.processor()
        try:
            layout = self.kit_layouts()[0]
            srcs = [self.make_source(layout, 50 + j) for j in range(3)]
            blobs = self.serialize(proc, srcs)
            ok, outs = self.deserialize(proc, blobs, layout)
            assert ok
            for src, out in zip(srcs, outs):
                self.assert_close(proc, src, out)
        finally:
            proc.close()

    def test_deterministic_bytes(self) -> None:
        if not self.deterministic:
            return
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                src = self.make_source(layout, i)
                (a,) = self.serialize(proc, [src])
                (b,) = self.serialize(proc, [src])
                assert torch.equal(as_byte_tensor(a), as_byte_tensor(b)), f"{layout}: not deterministic"
        finally:
            proc.close()

    def test_truncated_and_empty_input_rejected(self) -> None:
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                if layout.nbytes == 0:
                    continue
                (blob,) = self.serialize(proc, [self.make_source(layout, i)])
                data = as_byte_tensor(blob)
                for cut in sorted({0, data.numel() // 2, max(data.numel() - 1, 0)}):
                    short = TensorMemoryObj.from_tensor(data[:cut].clone())
                    ok, _ = self.deserialize(proc, [short], layout)
                    assert not ok, f"{layout}: a source truncated to {cut} bytes was accepted"
        finally:
            proc.close()

    def test_garbage_input_never_hangs(self) -> None:
        proc = self.processor()
        try:
            for i, layout in enumerate(self.kit_layouts()):
                (blob,) = self.serialize(proc, [self.make_source(layout, i)])
                gen = torch.Generator().manual_seed(1234 + i)
                garbage = torch.randint(0, 256, (blob.get_size(),), generator=gen,
                                        dtype=torch.uint8)
                ok, _ = self.deserialize(proc, [TensorMemoryObj.from_tensor(garbage)], layout)
                if self.detects_corruption and blob.get_size() > 0:
                    assert not ok, f"{layout}: random garbage was accepted"
        finally:
            proc.close()

    def test_multiple_workers_give_same_results(self) -> None:
        if not self.supports_max_workers:
            return
        one, two = self.processor(max_workers=1), self.processor(max_workers=2)
        try:
            layout = self.kit_layouts()[0]
            srcs = [self.make_source(layout, 70 + j) for j in range(4)]
            blobs_one = self.serialize(one, srcs)
            # two tasks in flight at once on the two-worker processor
            sizes = self._estimate(two, layout)
            dsts = [TensorMemoryObj.allocate(MemoryLayoutDesc([[sizes]], [torch.uint8]), zero=True)
                    for _ in srcs]
            t1 = two.submit_serialize([self._src_item(two, s) for s in srcs[:2]], dsts[:2],
                                      [_key(0), _key(1)])
            t2 = two.submit_serialize([self._src_item(two, s) for s in srcs[2:]], dsts[2:],
                                      [_key(2), _key(3)])
            assert wait_for_result(two, t1, serialize=True)
            assert wait_for_result(two, t2, serialize=True)
            for a, b in zip(blobs_one, dsts):
                assert a.get_size() == b.get_size()
                if self.deterministic:
                    assert torch.equal(as_byte_tensor(a), as_byte_tensor(b))
            ok, outs = self.deserialize(two, [dsts[0], dsts[1]], layout)
            assert ok
            for src, out in zip(srcs, outs):
                self.assert_close(two, src, out)
        finally:
            one.close()
            two.close()


class SerdeConformance(_ConformanceBase):
    """Kit for single-tensor serdes. Set ``serde_type`` and optionally ``layouts`` and the rest."""

    layouts: ClassVar[Sequence[MemoryLayoutDesc]] = DEFAULT_LAYOUTS

    def kit_layouts(self) -> Sequence[MemoryLayoutDesc]:
        return self.layouts

    def _src_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        return obj

    def _dst_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        return obj

    def _estimate(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> int:
        return proc.estimate_serialized_size(layout)

    def _compared_groups(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> list[int]:
        return list(range(layout.num_groups))


class MultiSerdeConformance(_ConformanceBase):
    """Kit for multi-output serdes: two-group (or n-group) objects feed the serde's slots.

    Slots follow the processor's ``input_slot_mapping``/``output_slot_mapping``; groups mapped to
    no slot are neither read nor written (checked). Set ``exact_slots`` to the slot indices that
    must round-trip bit-exactly; the others are checked against ``max_relative_error``.
    """

    layouts: ClassVar[Sequence[MemoryLayoutDesc]] = DEFAULT_KV_LAYOUTS
    exact_slots: ClassVar[tuple[int, ...]] = ()

    def kit_layouts(self) -> Sequence[MemoryLayoutDesc]:
        return self.layouts

    def _src_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        mapping = proc.input_slot_mapping()
        assert mapping is not None, "a multi-output serde must expose input_slot_mapping()"
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)

    def _dst_item(self, proc: SerdeProcessor, obj: TensorMemoryObj) -> Any:
        mapping = proc.output_slot_mapping()
        assert mapping is not None, "a multi-output serde must expose output_slot_mapping()"
        return tuple(None if g is None else GroupSlotView(obj, g) for g in mapping)

    def _estimate(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> int:
        mapping = proc.input_slot_mapping()
        assert mapping is not None
        return proc.estimate_serialized_size(layout_desc_to_group(layout, mapping))

    def _compared_groups(self, proc: SerdeProcessor, layout: MemoryLayoutDesc) -> list[int]:
        out_map = proc.output_slot_mapping() or ()
        in_map = proc.input_slot_mapping() or ()
        return [g for g in out_map if g is not None and g in in_map]

    def assert_close(
        self, proc: SerdeProcessor, original: TensorMemoryObj, restored: TensorMemoryObj
    ) -> None:
        out_map = proc.output_slot_mapping() or ()
        layout = original.get_layout()
        for slot, g in enumerate(out_map):
            if g is None or g not in (proc.input_slot_mapping() or ()):
                continue
            a, b = original.group_bytes(g), restored.group_bytes(g)
            if slot in self.exact_slots or self.is_lossless():
                assert torch.equal(a, b), f"slot {slot} (group {g}) did not round-trip exactly"
                continue
            dtype = layout.dtypes[g]
            x, y = _as_float(a, dtype), _as_float(b, dtype)
            denom = torch.linalg.vector_norm(x).item()
            err = torch.linalg.vector_norm(x - y).item() / (denom if denom > 0 else 1.0)
            assert err <= self.max_relative_error, (
                f"slot {slot}: relative error {err:.4g} > {self.max_relative_error:.4g}"
            )
        untouched = set(range(layout.num_groups)) - {g for g in out_map if g is not None}
        for g in untouched:
            assert int(restored.group_bytes(g).count_nonzero()) == 0, (
                f"group {g} has no output slot but was written"
            )
