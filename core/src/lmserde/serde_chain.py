"""Serde chains: several serdes applied in order on store and in reverse on load.

``[fp8, aesgcm]`` quantizes, then encrypts the quantized bytes; a load decrypts, then dequantizes.
Each stage's size estimate is computed on the flat ``uint8`` layout of the previous stage's
output buffer. Between stages the bytes are handed over as they are when the earlier stage is
``EXACT``; after an ``UPPER_BOUND`` stage they are framed as an 8-byte little-endian length
followed by the payload, so a load knows each intermediate length:

* when the next stage is ``EXACT`` with an estimate that grows with its input (a byte transform
  such as ``aesgcm``: input + a constant), the frame is handed over *trimmed* to the bytes
  written, so ``[zstd, aesgcm]`` stores compressed bytes; on load that stage's input length is
  recovered from its stored output by inverting its estimate (and checked against the prefix);
* otherwise the frame is zero-padded to the stage's bound, a fixed-size input.

The chain is ``UPPER_BOUND`` when any stage is, else ``EXACT``. Only the first stage may be a
multi-output serde.

This module is over 400 lines because the chain's plan (bounds, framed and trimmed hand-offs,
estimate inversion), its single- and multi-output adapters and its processor are one mechanism.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from lmserde.base import (
    Deserializer,
    SerdeConfig,
    SerdeProcessor,
    Serializer,
)
from lmserde.data_kind import check_chain_composition
from lmserde.keys import ObjectKey
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryFormat, MemoryObj, TensorMemoryObj, byte_layout
from lmserde.multi import (
    GroupSlotView,
    LayoutDescGroup,
    MemoryObjGroup,
    MultiDeserializer,
    MultiSerializer,
    layout_desc_to_group,
)
from lmserde.options import DEFAULT_CLOSE_TIMEOUT_S
from lmserde.processor import AsyncSerdeProcessor, check_serialized_size
from lmserde.registries import SERDES
from lmserde.serde_build import BuiltPair, ResolvedSerde, as_serde_config
from lmserde.spec import SerdeSizeContract

__all__ = [
    "ChainStage",
    "SerdeChainProcessor",
    "create_serde_chain",
    "build_serde_chain",
    "resolve_chain",
    "check_chain_configs",
    "FRAME_HEADER_BYTES",
]

#: Length prefix written after an upper-bound stage.
FRAME_HEADER_BYTES = 8
_PLAN_CACHE_LIMIT = 256


@dataclass(frozen=True)
class ChainStage:
    """One stage: its type name, synchronous serde pair and declared size contract."""

    name: str
    serializer: Serializer | MultiSerializer
    deserializer: Deserializer | MultiDeserializer
    size_contract: SerdeSizeContract
    config: Mapping[str, Any] | None = None  # the stage's identity (get_config); None: type only


@dataclass(frozen=True)
class _Hop:
    """The buffer between stage ``i`` and ``i + 1`` for one input layout."""

    bound: int  # stage i's estimate
    framed: bool  # stage i is UPPER_BOUND: length-prefixed
    trimmed: bool = False  # framed, and handed to stage i + 1 without the padding

    @property
    def size(self) -> int:
        """The largest hand-off (the padded one)."""
        return self.bound + FRAME_HEADER_BYTES if self.framed else self.bound


def _byte_obj(raw: torch.Tensor) -> TensorMemoryObj:
    return TensorMemoryObj.over(raw, byte_layout(raw.numel()), fmt=MemoryFormat.BINARY_BUFFER)


class _ChainCore:
    """Shared by the chain's serializer and deserializer: stages, size plans, scratch buffers."""

    def __init__(self, stages: Sequence[ChainStage]) -> None:
        self.stages = list(stages)
        self._plans: dict[Any, list[_Hop]] = {}
        self._scratch = threading.local()

    def plan(self, first_layout: Any) -> list[_Hop]:
        hops = self._plans.get(first_layout)
        if hops is None:
            hops = []
            layout = first_layout
            for i, stage in enumerate(self.stages[:-1]):
                bound = int(stage.serializer.estimate_serialized_size(layout))
                framed = stage.size_contract is not SerdeSizeContract.EXACT
                trimmed = framed and self._invertible(i + 1, bound + FRAME_HEADER_BYTES)
                hop = _Hop(bound, framed, trimmed)
                hops.append(hop)
                layout = byte_layout(hop.size)
            if len(self._plans) >= _PLAN_CACHE_LIMIT:
                self._plans.clear()
            self._plans[first_layout] = hops
        return hops

    def _stage_estimate(self, index: int, input_bytes: int) -> int:
        return int(self.stages[index].serializer.estimate_serialized_size(
            byte_layout(input_bytes)))

    def _invertible(self, index: int, largest_input: int) -> bool:
        """Whether stage ``index`` may take a trimmed hand-off: ``EXACT``, and its estimate
        strictly grows with the input length (checked at both ends of the range)."""
        if self.stages[index].size_contract is not SerdeSizeContract.EXACT:
            return False
        low = FRAME_HEADER_BYTES
        return (self._stage_estimate(index, low + 1) > self._stage_estimate(index, low)
                and self._stage_estimate(index, largest_input)
                > self._stage_estimate(index, largest_input - 1))

    def _input_length(self, index: int, output_bytes: int, largest_input: int) -> int:
        """The input length whose estimate is ``output_bytes`` (stage ``index``, trimmed hop)."""
        lo, hi = FRAME_HEADER_BYTES, largest_input
        if not self._stage_estimate(index, lo) <= output_bytes <= self._stage_estimate(index, hi):
            raise ValueError(
                f"serde chain: stage '{self.stages[index].name}' holds {output_bytes} bytes, "
                "which no input it could have been given produces (truncated or corrupt)")
        while lo < hi:  # smallest length whose estimate reaches output_bytes
            mid = (lo + hi) // 2
            if self._stage_estimate(index, mid) < output_bytes:
                lo = mid + 1
            else:
                hi = mid
        if self._stage_estimate(index, lo) != output_bytes:
            raise ValueError(
                f"serde chain: stage '{self.stages[index].name}' holds {output_bytes} bytes, "
                "which no input length produces (truncated or corrupt)")
        return lo

    def estimate(self, first_layout: Any) -> int:
        hops = self.plan(first_layout)
        layout = byte_layout(hops[-1].size) if hops else first_layout
        return int(self.stages[-1].serializer.estimate_serialized_size(layout))

    def scratch(self, index: int, size: int) -> torch.Tensor:
        """A per-thread buffer of ``size`` bytes for hop ``index`` (reused across calls)."""
        buffers: dict[int, torch.Tensor] | None = getattr(self._scratch, "buffers", None)
        if buffers is None:
            buffers = self._scratch.buffers = {}
        buf = buffers.get(index)
        if buf is None or buf.numel() < size:
            buf = buffers[index] = torch.empty(size, dtype=torch.uint8)
        return buf[:size]

    def serialize(self, src: Any, dst: MemoryObj, key: ObjectKey, first_layout: Any) -> int:
        current: Any = src
        for i, (stage, hop) in enumerate(zip(self.stages, self.plan(first_layout))):
            raw = self.scratch(i, hop.size)
            if hop.framed:
                n = stage.serializer.serialize(current, _byte_obj(raw[FRAME_HEADER_BYTES:]), key)
                n = check_serialized_size(stage.name, n, None)
                if not 0 <= n <= hop.bound:
                    raise ValueError(
                        f"serde chain: stage '{stage.name}' wrote {n} bytes, outside its "
                        f"estimate of {hop.bound}"
                    )
                raw[:FRAME_HEADER_BYTES].copy_(torch.frombuffer(
                    bytearray(n.to_bytes(FRAME_HEADER_BYTES, "little")), dtype=torch.uint8))
                if hop.trimmed:
                    current = _byte_obj(raw[:FRAME_HEADER_BYTES + n])
                    continue
                raw[FRAME_HEADER_BYTES + n:].zero_()
            else:
                n = check_serialized_size(stage.name, stage.serializer.serialize(
                    current, _byte_obj(raw), key), None)
                if n != hop.bound:
                    raise ValueError(
                        f"serde chain: stage '{stage.name}' declares an EXACT size contract but "
                        f"wrote {n} bytes, not its estimate of {hop.bound}"
                    )
            current = _byte_obj(raw)
        return self.stages[-1].serializer.serialize(current, dst, key)

    def deserialize(self, src: MemoryObj, dst: Any, key: ObjectKey, first_layout: Any) -> None:
        hops = self.plan(first_layout)
        current: MemoryObj = src
        for i in range(len(self.stages) - 1, 0, -1):
            hop = hops[i - 1]
            size = (self._input_length(i, current.get_size(), hop.size) if hop.trimmed
                    else hop.size)
            raw = self.scratch(i - 1, size)
            self.stages[i].deserializer.deserialize(current, _byte_obj(raw), key)
            if hop.framed:
                n = int.from_bytes(bytes(raw[:FRAME_HEADER_BYTES].tolist()), "little")
                if n > hop.bound or (hop.trimmed and FRAME_HEADER_BYTES + n != size):
                    raise ValueError(
                        f"serde chain: corrupt frame after stage '{self.stages[i - 1].name}': "
                        f"payload length {n} (bound {hop.bound}, hand-off {size} bytes)"
                    )
                current = _byte_obj(raw[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + n])
            else:
                current = _byte_obj(raw)
        self.stages[0].deserializer.deserialize(current, dst, key)


def _object_layout(obj: Any) -> MemoryLayoutDesc:
    layout = getattr(obj, "layout", None)
    if isinstance(layout, MemoryLayoutDesc):
        return layout
    return MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())


def _group_layout(items: MemoryObjGroup, mapping: Sequence[int | None]) -> LayoutDescGroup:
    """The first stage's input layouts for a group of slot views (input or output side)."""
    parent = next((v.parent for v in items if isinstance(v, GroupSlotView)), None)
    if parent is not None:
        return layout_desc_to_group(_object_layout(parent), mapping)
    return tuple(None if v is None else _object_layout(v) for v in items)


class _ChainSerializer(Serializer):
    def __init__(self, core: _ChainCore) -> None:
        self._core = core

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        return self._core.serialize(src, dst, key, _object_layout(src))

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return self._core.estimate(layout_desc)


class _ChainDeserializer(Deserializer):
    def __init__(self, core: _ChainCore) -> None:
        self._core = core

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        self._core.deserialize(src, dst, key, _object_layout(dst))


class _MultiChainSerializer(MultiSerializer):
    def __init__(self, core: _ChainCore, first: MultiSerializer) -> None:
        self._core = core
        self._first = first

    @property
    def group_size(self) -> int:
        return self._first.group_size

    @property
    def input_slot_mapping(self) -> tuple[int | None, ...]:
        return tuple(self._first.input_slot_mapping)

    def serialize(self, src: MemoryObjGroup, dst: MemoryObj, key: ObjectKey) -> int:
        return self._core.serialize(src, dst, key, _group_layout(src, self.input_slot_mapping))

    def estimate_serialized_size(self, layout_descs: LayoutDescGroup) -> int:
        return self._core.estimate(tuple(layout_descs))


class _MultiChainDeserializer(MultiDeserializer):
    def __init__(self, core: _ChainCore, first: MultiDeserializer,
                 in_map: Sequence[int | None]) -> None:
        self._core = core
        self._first = first
        self._in_map = tuple(in_map)

    @property
    def group_size(self) -> int:
        return self._first.group_size

    @property
    def output_slot_mapping(self) -> tuple[int | None, ...]:
        return tuple(self._first.output_slot_mapping)

    def deserialize(self, src: MemoryObj, dst: MemoryObjGroup, key: ObjectKey) -> None:
        self._core.deserialize(src, dst, key, _group_layout(dst, self._in_map))


class SerdeChainProcessor(AsyncSerdeProcessor):
    """An :class:`~lmserde.AsyncSerdeProcessor` running ``stages`` as one serde.

    ``serde_type`` is the stage names joined by ``+``; ``size_contract`` is ``UPPER_BOUND`` when
    any stage's is (what an upper-bound stage saves reaches the stored object), else ``EXACT``.
    Per-item outcomes work as for any processor: one object failing any stage fails that item.
    ``owned`` processors (the stage processors the pairs came from) are closed with the chain.
    """

    def __init__(
        self,
        stages: Sequence[ChainStage],
        max_workers: int = 1,
        *,
        owned: Sequence[SerdeProcessor] = (),
        close_timeout_s: float = DEFAULT_CLOSE_TIMEOUT_S,
    ) -> None:
        if not stages:
            raise ValueError("a serde chain needs at least one stage")
        for i, stage in enumerate(stages[1:], start=1):
            if isinstance(stage.serializer, MultiSerializer) or isinstance(
                    stage.deserializer, MultiDeserializer):
                raise ValueError(
                    f"serde chain: only the first serde may be multi-output; '{stage.name}' is "
                    f"at position {i}"
                )
        core = _ChainCore(stages)
        first = stages[0]
        serializer: Serializer | MultiSerializer
        deserializer: Deserializer | MultiDeserializer
        if isinstance(first.serializer, MultiSerializer):
            serializer = _MultiChainSerializer(core, first.serializer)
        else:
            serializer = _ChainSerializer(core)
        if isinstance(first.deserializer, MultiDeserializer):
            in_map = (first.serializer.input_slot_mapping
                      if isinstance(first.serializer, MultiSerializer)
                      else tuple(range(first.deserializer.group_size)))
            deserializer = _MultiChainDeserializer(core, first.deserializer, in_map)
        else:
            deserializer = _ChainDeserializer(core)
        self.stages = tuple(stages)
        self.size_contract = (
            SerdeSizeContract.UPPER_BOUND
            if any(s.size_contract is not SerdeSizeContract.EXACT for s in stages)
            else SerdeSizeContract.EXACT)
        self._owned = list(owned)
        super().__init__(serializer, deserializer, max_workers,
                         serde_type="+".join(s.name for s in stages),
                         close_timeout_s=close_timeout_s)

    @property
    def stage_types(self) -> tuple[str, ...]:
        return tuple(s.name for s in self.stages)

    def get_config(self) -> dict[str, Any]:
        """``{"type": "chain", "stages": [each stage's config, in store order]}``."""
        return {"type": "chain",
                "stages": [dict(copy.deepcopy(s.config)) if s.config is not None
                           else {"type": s.name} for s in self.stages]}

    def authenticates_output(self) -> bool:
        """The last stage's: its bytes are what the chain writes."""
        return bool(self.stages[-1].serializer.authenticates_output)

    def close(self, timeout_s: float | None = None) -> None:
        """Close the chain (bounded like any processor's), then the ``owned`` processors."""
        super().close(timeout_s)
        owned, self._owned = self._owned, []
        for proc in owned:
            proc.close()


def resolve_chain(configs: Sequence[SerdeConfig | Mapping[str, Any]]) -> list[ResolvedSerde]:
    """Parse, look up and validate every stage once, and check that the stages compose.

    ``ValueError`` if the chain cannot work: every stage's type must be known and its options
    valid (the error names the stage's position); consecutive stages must compose: the first
    stage receives ``KV_TENSORS`` and each later one what the stage before it ``produces``, which
    it must list in its ``consumes`` (see :class:`~lmserde.DataKind`). So ``[fp8, fp8]``,
    ``[fp8, turboquant]`` and ``[aesgcm, fp8]`` are refused, naming the stage. Nothing is built.
    """
    if not configs:
        raise ValueError("a serde chain needs at least one serde")
    resolved: list[ResolvedSerde] = []
    for position, config in enumerate(configs, start=1):
        parsed = as_serde_config(config)
        spec = SERDES.get(parsed.type)
        try:
            options = spec.validate(parsed.type, parsed.kwargs)
        except ValueError as exc:
            raise ValueError(f"serde chain stage {position}: {exc}") from None
        resolved.append(ResolvedSerde(parsed.type, spec, options))
    check_chain_composition([(r.serde_type, r.spec) for r in resolved])
    return resolved


def check_chain_configs(configs: Sequence[SerdeConfig | Mapping[str, Any]]) -> None:
    """Check a chain at config time, building nothing (:func:`resolve_chain`)."""
    resolve_chain(configs)


def build_serde_chain(stages: Sequence[ResolvedSerde]) -> SerdeChainProcessor:
    """One processor running resolved ``stages`` in order.

    Each stage contributes its synchronous pair (:meth:`~lmserde.serde_build.ResolvedSerde.build_pair`):
    a spec with a ``pair_factory`` builds only the pair; a factory-only spec's processor is built
    for its pair and closed with the chain. The chain runs with the largest ``max_workers`` and
    the largest ``close_timeout_s`` of its stages; its
    :meth:`~SerdeChainProcessor.get_config` lists the stages' identity configs.
    Nothing is leaked when a stage fails to build.
    """
    built: list[BuiltPair] = []
    try:
        chain_stages: list[ChainStage] = []
        workers = 1
        close_timeout = max(stage.close_timeout_s for stage in stages)
        for stage in stages:
            part = stage.build_pair()
            built.append(part)
            owner = part.owner
            config = owner.get_config() if owner is not None else stage.identity_config()
            chain_stages.append(ChainStage(stage.serde_type, part.pair.serializer,
                                           part.pair.deserializer, stage.size_contract, config))
            workers = max(workers, owner.max_workers if isinstance(owner, AsyncSerdeProcessor)
                          else stage.max_workers)
        return SerdeChainProcessor(chain_stages, workers,
                                   owned=[p.owner for p in built if p.owner is not None],
                                   close_timeout_s=close_timeout)
    except BaseException:
        for part in built:
            if part.owner is not None:
                part.owner.close()
        raise


def create_serde_chain(
    configs: Sequence[SerdeConfig | Mapping[str, Any]],
) -> SerdeChainProcessor:
    """Resolve the chain (:func:`resolve_chain`: known types, valid options, stages that
    compose, so nothing is built for a chain that cannot work), then build it as one processor
    (:func:`build_serde_chain`)."""
    return build_serde_chain(resolve_chain(configs))
