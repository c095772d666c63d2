"""``Fp8QuantizationSerializer`` / ``Fp8QuantizationDeserializer``: the fp8 serde pair.

``scaling="none"`` writes LMCache's fp8 format: headerless, one byte per element, the object's
groups concatenated in order, allocator padding never serialized. The scaled modes write the
versioned frame of :mod:`lmserde_fp8.frame`. Every estimate is exact for a layout.

Behind the serde wrapper's frame, ``scaling="none"`` computes the frame's payload checksum
itself (:func:`lmserde.payload_hasher`) when lmserde's checksum kernel and this package's native
codec are built: the codec hashes each piece of codes (1 KiB on encode, 4 KiB on decode) right
after writing or reading it, while it is in the L1 cache
(:func:`~lmserde_fp8.codec.encode_hashed`), instead of leaving the wrapper a second pass over the
payload. The scaled modes leave the hashing to the wrapper.
"""

from __future__ import annotations

import math
from typing import Any

import torch
from lmserde import (
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    ObjectKey,
    Serializer,
    as_byte_tensor,
    checksum_kernel,
    payload_hasher,
)

from lmserde_fp8.codec import (
    Backend,
    decode,
    decode_hashed,
    decode_pow2,
    encode,
    encode_hashed,
    encode_pow2,
    fast_path_available,
    row_absmax,
)
from lmserde_fp8.float_buffer import FloatBuffer
from lmserde_fp8.formats import Fp8Format, fp8_format
from lmserde_fp8.frame import HEADER_SIZE, FrameHeader
from lmserde_fp8.groups import object_groups, object_shapes
from lmserde_fp8.scaling import (
    ScalingMode,
    exponent_cap,
    exponent_for,
    exponents_to_scales,
    group_rows,
)

__all__ = ["Fp8QuantizationSerializer", "Fp8QuantizationDeserializer", "scale_count"]



def scale_count(mode: ScalingMode, shapes: list[torch.Size]) -> int:
    """How many scales a frame of ``mode`` holds for an object with group ``shapes``."""
    if mode is ScalingMode.PER_TENSOR:
        return 1
    if mode is ScalingMode.PER_TOKEN:
        return sum(group_rows(s) for s in shapes)
    return 0


def _numel(shapes: list[torch.Size]) -> int:
    return sum(math.prod(s) for s in shapes)


def _group_shapes(obj: Any, buffers: list[FloatBuffer]) -> list[torch.Size]:
    shapes = object_shapes(obj)
    if shapes is None or len(shapes) != len(buffers):
        tensor = getattr(obj, "tensor", None)
        shapes = [tensor.shape] if tensor is not None else [torch.Size([b.numel]) for b in buffers]
    return shapes


class _Fp8Settings:
    def __init__(self, fp8_dtype: torch.dtype, scaling: ScalingMode | str, backend: Backend) -> None:
        self.fmt: Fp8Format = fp8_format(fp8_dtype)
        self.mode = ScalingMode(scaling)
        self.backend: Backend = backend

    def _hashes_payload(self) -> bool:
        """Whether this serde hashes its payload in its codec loop: ``scaling="none"`` on the
        native codec (the torch codec would only add a pass the wrapper overlaps better)."""
        return (self.mode is ScalingMode.NONE and self.backend != "torch"
                and fast_path_available())

    @property
    def fp8_dtype(self) -> torch.dtype:
        return self.fmt.dtype


class Fp8QuantizationSerializer(_Fp8Settings, Serializer):
    """Casts every group of a KV object to fp8 (optionally scaled) into a byte buffer.

    ``fp8_dtype``: ``torch.float8_e4m3fn`` (default) or ``torch.float8_e5m2``. ``scaling``:
    ``"none"`` (LMCache-compatible), ``"per_tensor"`` or ``"per_token"``. ``backend``: codec
    backend (``"auto"``; tests pin the others).
    """

    def __init__(self, fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                 scaling: ScalingMode | str = ScalingMode.NONE, *, backend: Backend = "auto") -> None:
        super().__init__(fp8_dtype, scaling, backend)

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        """Exactly what :meth:`serialize` writes for an object of ``layout_desc``."""
        shapes = [torch.Size(s) for s in layout_desc.shapes]
        n = _numel(shapes)
        if self.mode is ScalingMode.NONE:
            return n
        return HEADER_SIZE + scale_count(self.mode, shapes) + n

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        groups = object_groups(src, role="src")
        if getattr(dst, "tensor", None) is None and getattr(dst, "raw_data", None) is None:
            raise ValueError("Fp8 serde requires src and dst to have tensors (dst has none)")
        shapes = _group_shapes(src, groups)
        n = sum(g.numel for g in groups)
        num_scales = scale_count(self.mode, shapes)
        header_size = 0 if self.mode is ScalingMode.NONE else HEADER_SIZE + num_scales
        size = header_size + n
        out = as_byte_tensor(dst)
        if out.numel() < size:
            raise ValueError(
                f"Fp8 serde: destination buffer too small ({out.numel()} < {size} bytes)"
            )
        if self.mode is ScalingMode.NONE:
            hasher = payload_hasher(dst) if self._hashes_payload() else None
            offset = 0
            for group in groups:
                codes = out[offset : offset + group.numel]
                if hasher is None:
                    encode(group, codes, self.fmt, backend=self.backend)
                else:
                    encode_hashed(group, codes, self.fmt, hasher, backend=self.backend)
                offset += group.numel
            return size
        header = FrameHeader(self.mode, self.fmt, n, num_scales)
        out[:HEADER_SIZE].copy_(torch.frombuffer(bytearray(header.pack()), dtype=torch.uint8))
        exponents = out[HEADER_SIZE:header_size].view(torch.int8)
        if self.mode is ScalingMode.PER_TENSOR:
            self._encode_per_tensor(groups, exponents, out[header_size:])
        else:
            self._encode_per_token(groups, shapes, exponents, out[header_size:])
        return size

    def _encode_per_tensor(self, groups: list[FloatBuffer], exponent: torch.Tensor,
                           codes: torch.Tensor) -> None:
        amax = max((float(row_absmax(g, 1, backend=self.backend)[0]) for g in groups if g.numel),
                   default=0.0)
        cap = exponent_cap(self.fmt, tuple(g.dtype for g in groups))
        exponent[0] = exponent_for(amax, self.fmt, cap)
        offset = 0
        for group in groups:
            if group.numel:
                encode_pow2(group, codes[offset : offset + group.numel], self.fmt, exponent,
                            backend=self.backend)
            offset += group.numel

    def _encode_per_token(self, groups: list[FloatBuffer], shapes: list[torch.Size],
                          exponents: torch.Tensor, codes: torch.Tensor) -> None:
        offset = row = 0
        for group, shape in zip(groups, shapes, strict=True):
            rows = group_rows(shape)
            encode_pow2(group, codes[offset : offset + group.numel], self.fmt,
                        exponents[row : row + rows], cap=exponent_cap(self.fmt, (group.dtype,)),
                        backend=self.backend)
            offset += group.numel
            row += rows


class Fp8QuantizationDeserializer(_Fp8Settings, Deserializer):
    """Restores a KV object from what :class:`Fp8QuantizationSerializer` wrote.

    Lengths come from the destination layout (and, scaled, from the frame header, which must
    agree with it); a source shorter than needed raises ``ValueError`` ("source buffer too small").
    A scaled reader accepts both scaled modes and both fp8 dtypes (the header says which); a
    ``scaling="none"`` reader decodes headerless bytes with its configured ``fp8_dtype``.
    """

    def __init__(self, fp8_dtype: torch.dtype = torch.float8_e4m3fn,
                 scaling: ScalingMode | str = ScalingMode.NONE, *, backend: Backend = "auto") -> None:
        super().__init__(fp8_dtype, scaling, backend)
        #: ``scaling="none"`` hashes what it decodes (see the module docstring)
        self.reports_payload_checksum = self._hashes_payload() and checksum_kernel() is not None

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        groups = object_groups(dst, role="dst")
        shapes = _group_shapes(dst, groups)
        n = sum(g.numel for g in groups)
        data = as_byte_tensor(src)
        if self.mode is ScalingMode.NONE:
            if data.numel() < n:
                raise ValueError(f"Fp8 serde: source buffer too small ({data.numel()} < {n} bytes)")
            hasher = payload_hasher(src) if self._hashes_payload() else None
            offset = 0
            for group in groups:
                codes = data[offset : offset + group.numel]
                if hasher is None:
                    decode(codes, group, self.fmt, backend=self.backend)
                else:
                    decode_hashed(codes, group, self.fmt, hasher, backend=self.backend)
                offset += group.numel
            return
        header = FrameHeader.parse(bytes(data[:HEADER_SIZE].tolist()))  # no numpy needed
        if header.num_elements != n:
            raise ValueError(
                f"Fp8 serde: frame holds {header.num_elements} elements, destination layout has {n}"
            )
        expected_scales = scale_count(header.mode, shapes)
        if header.num_scales != expected_scales:
            raise ValueError(
                f"Fp8 serde: frame holds {header.num_scales} scales, a {header.mode.value} frame "
                f"for this layout has {expected_scales}"
            )
        if data.numel() < header.frame_size:
            raise ValueError(
                f"Fp8 serde: source buffer too small ({data.numel()} < {header.frame_size} bytes)"
            )
        exponents = data[HEADER_SIZE : HEADER_SIZE + header.num_scales].view(torch.int8)
        if n == 0:
            exponents_to_scales(exponents.cpu())  # nothing to decode: still check the exponents
        offset, row = HEADER_SIZE + header.num_scales, 0
        for group, shape in zip(groups, shapes, strict=True):
            if header.mode is ScalingMode.PER_TENSOR:
                group_exponents = exponents
            else:
                group_exponents = exponents[row : row + group_rows(shape)]
                row += group_rows(shape)
            if group.numel:
                decode_pow2(data[offset : offset + group.numel], group, header.fmt, group_exponents,
                            backend=self.backend)
            offset += group.numel
