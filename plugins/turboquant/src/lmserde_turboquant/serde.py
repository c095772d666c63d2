"""The TurboQuant Serializer and Deserializer (single- and multi-group KV objects)."""

from __future__ import annotations

import torch
from lmserde import Deserializer, MemoryLayoutDesc, MemoryObj, ObjectKey, Serializer, as_byte_tensor

from lmserde_turboquant import codec_native, codec_torch
from lmserde_turboquant.codebook import lloyd_max_codebook
from lmserde_turboquant.config import TurboQuantConfig
from lmserde_turboquant.kv_layout import KVPlan
from lmserde_turboquant.layer_tables import layer_tables, stacked_signs
from lmserde_turboquant.object_groups import GroupAccess, kv_groups

__all__ = ["TurboQuantDeserializer", "TurboQuantSerializer"]


def _quantized_rows(t: torch.Tensor, plan: KVPlan) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V rows ``[Lq, T*H, D]`` of the quantized layers (views; token-major, then head)."""
    d = plan.head_dim
    rows = plan.num_tokens * plan.num_heads
    layers = slice(plan.quant_start, plan.quant_end)
    if plan.fused:
        kv = t[0, layers].view(plan.quant_layers, rows, 2 * d)
        return kv[..., :d], kv[..., d:]
    return (t[0, layers].view(plan.quant_layers, rows, d),
            t[1, layers].view(plan.quant_layers, rows, d))


def _planned_groups(obj: MemoryObj, config: TurboQuantConfig, *, load: bool,
                    buffer: torch.Tensor, role: str) -> tuple[list[GroupAccess], list[KVPlan]]:
    """The KV groups of ``obj`` (see :func:`kv_groups` for ``load``) and each one's plan;
    ``ValueError`` when ``buffer`` (the ``role`` side's bytes) cannot hold all of them."""
    groups = kv_groups(obj, load=load)
    plans = [config.plan(g.tensor.shape, g.tensor.dtype) for g in groups]
    total = sum(p.nbytes for p in plans)
    if buffer.numel() < total:
        raise ValueError(f"{role} buffer too small: got {buffer.numel()} bytes, need {total}")
    return groups, plans


def _byte_view(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t`` (last dimension contiguous) as a uint8 view of the same shape family."""
    return t.view(torch.uint8)


class _Codec:
    """Codes the quantized layers of one tensor with the native or the torch codec."""

    def __init__(self, config: TurboQuantConfig) -> None:
        self.config = config
        self.preset = config.preset_spec
        for bits, codec in ((self.preset.key_bits, self.preset.key_codec),
                            (self.preset.value_bits, self.preset.value_codec)):
            if codec == "mse":  # solve (and cache) the codebooks now, not on the first object
                lloyd_max_codebook(config.head_dim, bits, self.preset.codebook_solver)

    def _native(self, k: torch.Tensor, v: torch.Tensor, slots: torch.Tensor) -> bool:
        return (self.config.backend != "torch" and codec_native.supports(k, slots)
                and codec_native.supports(v, slots))

    def encode(self, t: torch.Tensor, plan: KVPlan, slots: torch.Tensor) -> int:
        """Fill ``slots`` ``[Lq, padded_rows, stride]``; -1 or ``layer_offset * rows + row``."""
        k, v = _quantized_rows(t, plan)
        d, device = plan.head_dim, t.device
        if self._native(k, v, slots):
            tables = layer_tables(self.preset, d, plan.quant_start, device)
            signs = stacked_signs(d, plan.quant_start, plan.quant_end, device)
            return codec_native.encode_layers(k, v, slots, self.preset, tables, signs)
        rows = k.shape[1]
        for i, layer in enumerate(range(plan.quant_start, plan.quant_end)):
            tables = layer_tables(self.preset, d, layer, device)
            bad = codec_torch.encode_rows(k[i], v[i], slots[i, :rows], self.preset, tables)
            slots[i, rows:] = 0
            if bad >= 0:
                return i * rows + bad
        return -1

    def decode(self, slots: torch.Tensor, t: torch.Tensor, plan: KVPlan) -> None:
        """Restore the quantized layers of ``t`` from ``slots`` ``[Lq, padded_rows, stride]``."""
        k, v = _quantized_rows(t, plan)
        d, device = plan.head_dim, t.device
        if self._native(k, v, slots):
            tables = layer_tables(self.preset, d, plan.quant_start, device)
            signs = stacked_signs(d, plan.quant_start, plan.quant_end, device)
            codec_native.decode_layers(slots, k, v, self.preset, tables, signs)
            return
        rows = k.shape[1]
        for i, layer in enumerate(range(plan.quant_start, plan.quant_end)):
            tables = layer_tables(self.preset, d, layer, device)
            codec_torch.decode_rows(slots[i, :rows], k[i], v[i], self.preset, tables)


class TurboQuantSerializer(Serializer):
    """Compresses KV objects (every group a split or fused KV tensor) into TurboQuant streams.

    The output is the concatenation of each group's stream (see :mod:`kv_layout`); its size is
    exactly :meth:`estimate_serialized_size` and its bytes depend only on the input (padding is
    zero). CPU tensors use the native codec when built; tensors on other devices use torch ops on
    that device (identical bytes).
    """

    def __init__(self, config: TurboQuantConfig) -> None:
        self.config = config
        self._codec = _Codec(config)

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        """Exact stream size for ``layout_desc``; ``ValueError`` for a layout TurboQuant rejects."""
        return sum(
            self.config.plan(shape, dtype).nbytes
            for shape, dtype in zip(layout_desc.shapes, layout_desc.dtypes)
        )

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        del key  # content-independent
        out = as_byte_tensor(dst)
        groups, plans = _planned_groups(src, self.config, load=True, buffer=out,
                                        role="Destination")
        offset = 0
        for group, plan in zip(groups, plans):
            self._serialize_tensor(group.tensor, plan, out[offset : offset + plan.nbytes])
            offset += plan.nbytes
        return offset

    def _serialize_tensor(self, t: torch.Tensor, plan: KVPlan, out: torch.Tensor) -> None:
        if plan.nbytes == 0:
            return
        t = t if t.is_contiguous() else t.contiguous()
        work = out if out.device == t.device else torch.empty(
            plan.nbytes, dtype=torch.uint8, device=t.device
        )
        kv, _, tokens, hidden = plan.shape
        row_bytes = hidden * plan.dtype.itemsize
        pos = 0
        if plan.first_raw_bytes:
            chunk = work[: plan.first_raw_bytes].view(kv, plan.quant_start, tokens, row_bytes)
            chunk.copy_(_byte_view(t[:, : plan.quant_start]))
            pos = plan.first_raw_bytes
        if plan.compressed_bytes:
            area = work[pos : pos + plan.compressed_bytes].view(
                plan.quant_layers, plan.padded_tokens * plan.num_heads, plan.slot_stride
            )
            bad = self._codec.encode(t, plan, area)
            if bad >= 0:
                layer_offset, row = divmod(bad, tokens * plan.num_heads)
                token, head = divmod(row, plan.num_heads)
                raise ValueError(
                    f"TurboQuant cannot encode layer {plan.quant_start + layer_offset}, token "
                    f"{token}, head {head}: the K or V vector has a non-finite value, or a norm, "
                    "scale or minimum outside the fp16 range (|x| > 65504)"
                )
            pos += plan.compressed_bytes
        if plan.last_raw_bytes:
            n_last = plan.num_layers - plan.quant_end
            chunk = work[pos : pos + plan.last_raw_bytes].view(kv, n_last, tokens, row_bytes)
            chunk.copy_(_byte_view(t[:, plan.quant_end :]))
        if work is not out:
            out.copy_(work)


class TurboQuantDeserializer(Deserializer):
    """Restores KV objects from TurboQuant streams; lengths come from the destination layout."""

    def __init__(self, config: TurboQuantConfig) -> None:
        self.config = config
        self._codec = _Codec(config)

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        del key
        data = as_byte_tensor(src)
        groups, plans = _planned_groups(dst, self.config, load=False, buffer=data, role="Source")
        offset = 0
        for group, plan in zip(groups, plans):
            self._deserialize_tensor(data[offset : offset + plan.nbytes], plan, group.tensor)
            if group.write_back is not None:
                group.write_back()
            offset += plan.nbytes

    def _deserialize_tensor(self, data: torch.Tensor, plan: KVPlan, t: torch.Tensor) -> None:
        if plan.nbytes == 0:
            return
        target = t if t.is_contiguous() else torch.empty_like(t, memory_format=torch.contiguous_format)
        if data.device != t.device:
            data = data.to(t.device)
        kv, _, tokens, hidden = plan.shape
        row_bytes = hidden * plan.dtype.itemsize
        pos = 0
        if plan.first_raw_bytes:
            chunk = data[: plan.first_raw_bytes].view(kv, plan.quant_start, tokens, row_bytes)
            _byte_view(target[:, : plan.quant_start]).copy_(chunk)
            pos = plan.first_raw_bytes
        if plan.compressed_bytes:
            area = data[pos : pos + plan.compressed_bytes].view(
                plan.quant_layers, plan.padded_tokens * plan.num_heads, plan.slot_stride
            )
            self._codec.decode(area, target, plan)
            pos += plan.compressed_bytes
        if plan.last_raw_bytes:
            n_last = plan.num_layers - plan.quant_end
            chunk = data[pos : pos + plan.last_raw_bytes].view(kv, n_last, tokens, row_bytes)
            _byte_view(target[:, plan.quant_end :]).copy_(chunk)
        if target is not t:
            t.copy_(target)
