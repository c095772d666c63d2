"""Toy serdes for the data-path tests (registered for the session by conftest.py as ``t_*``).

Each exists to exercise one property of the wrapper:

* ``t_int8``: lossy, EXACT. Per group: a float32 scale then one int8 per element.
* ``t_crc``: lossless, EXACT. ``b"TCRC"``, u64 length, payload, u32 CRC over key and payload, so
  corrupt, truncated and foreign (other key's) bytes are rejected.
* ``t_zlib``: lossless, UPPER_BOUND. u64 length then zlib data: output size varies with content.
* ``t_kv3``: multi-output, EXACT. Three slots mapped to parent groups ``(0, None, 1)``: K, an
  absent optional slot, V. Frame: 3 presence bytes, 3 u64 lengths, then the present payloads.

Not registered: :class:`OutageDeserializer`, the identity decoder of a serde whose key service
can fail.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

import torch
from lmserde import (
    AsyncSerdeProcessor,
    Deserializer,
    MemoryLayoutDesc,
    MemoryObj,
    MultiDeserializer,
    MultiSerializer,
    ObjectKey,
    SerdeSizeContract,
    SerdeSpec,
    Serializer,
    as_byte_tensor,
    max_workers_option,
)
from lmserde.identity import IdentityDeserializer


class OutageDeserializer(IdentityDeserializer):
    """Raises ``error`` while ``down`` (a key service, a network decoder...)."""

    def __init__(self) -> None:
        self.down = False
        self.error: BaseException = ConnectionError("key service unreachable")

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        if self.down:
            raise self.error
        super().deserialize(src, dst, key)


def _group_views(obj: MemoryObj) -> list[tuple[torch.Tensor, torch.dtype, torch.Size]]:
    layout = MemoryLayoutDesc(obj.get_shapes(), obj.get_dtypes())
    data = as_byte_tensor(obj)
    offsets = layout.group_offsets()
    return [(data[offsets[g]:offsets[g + 1]], layout.dtypes[g], layout.shapes[g])
            for g in range(layout.num_groups)]


def _u8(raw: bytes) -> torch.Tensor:
    return torch.frombuffer(bytearray(raw), dtype=torch.uint8)


# -- t_int8: lossy ------------------------------------------------------------------------------

class Int8Serializer(Serializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        out = as_byte_tensor(dst)
        pos = 0
        for data, dtype, _shape in _group_views(src):
            values = data.clone().view(dtype).float() if data.numel() else torch.empty(0)
            absmax = float(values.abs().max()) if values.numel() else 0.0
            scale = absmax / 127.0 if absmax > 0 else 1.0
            q = torch.round(values / scale).clamp(-127, 127).to(torch.int8)
            out[pos:pos + 4].copy_(_u8(struct.pack("<f", scale)))
            out[pos + 4:pos + 4 + q.numel()].copy_(q.view(torch.uint8))
            pos += 4 + q.numel()
        return pos

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return sum(4 + s.numel() for s in layout_desc.shapes)


class Int8Deserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        pos = 0
        for region, dtype, shape in _group_views(dst):
            n = shape.numel()
            if data.numel() < pos + 4 + n:
                raise ValueError("t_int8: source too short")
            (scale,) = struct.unpack("<f", bytes(data[pos:pos + 4].tolist()))
            q = data[pos + 4:pos + 4 + n].clone().view(torch.int8)
            region.copy_((q.float() * scale).to(dtype).view(torch.uint8).reshape(-1))
            pos += 4 + n


# -- t_crc: lossless, detects corruption and foreign keys ----------------------------------------

def _crc(key: ObjectKey, payload: torch.Tensor) -> int:
    seed = zlib.crc32(key.chunk_hash + key.model_name.encode() + key.cache_salt.encode())
    return zlib.crc32(payload.numpy().tobytes(), seed)


class CrcSerializer(Serializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        payload = as_byte_tensor(src)
        n = payload.numel()
        out = as_byte_tensor(dst)
        out[:12].copy_(_u8(b"TCRC" + struct.pack("<Q", n)))
        out[12:12 + n].copy_(payload)
        out[12 + n:16 + n].copy_(_u8(struct.pack("<I", _crc(key, payload))))
        return 16 + n

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return 16 + layout_desc.nbytes


class CrcDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        n = dst.get_size()
        if data.numel() < 16 + n:
            raise ValueError("t_crc: truncated frame")
        header = bytes(data[:12].tolist())
        if header[:4] != b"TCRC" or struct.unpack("<Q", header[4:])[0] != n:
            raise ValueError("t_crc: bad header")
        payload = data[12:12 + n]
        (crc,) = struct.unpack("<I", bytes(data[12 + n:16 + n].tolist()))
        if crc != _crc(key, payload):
            raise ValueError("t_crc: checksum mismatch")
        as_byte_tensor(dst).copy_(payload)


# -- t_zlib: variable-size output -----------------------------------------------------------------

class ZlibSerializer(Serializer):
    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        packed = zlib.compress(as_byte_tensor(src).numpy().tobytes(), 1)
        frame = struct.pack("<Q", len(packed)) + packed
        as_byte_tensor(dst)[:len(frame)].copy_(_u8(frame))
        return len(frame)

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        n = layout_desc.nbytes
        return 8 + n + n // 1000 + 64


class ZlibDeserializer(Deserializer):
    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        (length,) = struct.unpack("<Q", bytes(data[:8].tolist()))
        if 8 + length > data.numel():
            raise ValueError("t_zlib: truncated frame")
        raw = zlib.decompress(data[8:8 + length].numpy().tobytes())
        if len(raw) != dst.get_size():
            raise ValueError("t_zlib: wrong length")
        if raw:
            as_byte_tensor(dst).copy_(_u8(raw))


# -- t_kv3: multi-output ----------------------------------------------------------------------------

KV3_MAPPING = (0, None, 1)


def _slot_bytes(view: Any) -> torch.Tensor:
    return view.tensor.reshape(-1).view(torch.uint8)


class Kv3Serializer(MultiSerializer):
    group_size = 3
    input_slot_mapping = KV3_MAPPING

    def serialize(self, src: Any, dst: MemoryObj, key: ObjectKey) -> int:
        if src[0] is None or src[2] is None:
            raise ValueError("t_kv3: slots 0 (K) and 2 (V) are required")
        payloads = [None if v is None else _slot_bytes(v) for v in src]
        header = bytes(0 if p is None else 1 for p in payloads) + b"".join(
            struct.pack("<Q", 0 if p is None else p.numel()) for p in payloads)
        out = as_byte_tensor(dst)
        out[:len(header)].copy_(_u8(header))
        pos = len(header)
        for p in payloads:
            if p is not None:
                out[pos:pos + p.numel()].copy_(p)
                pos += p.numel()
        return pos

    def estimate_serialized_size(self, layout_descs: Any) -> int:
        return 27 + sum(0 if d is None else d.nbytes for d in layout_descs)


class Kv3Deserializer(MultiDeserializer):
    group_size = 3
    output_slot_mapping = KV3_MAPPING

    def deserialize(self, src: MemoryObj, dst: Any, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        header = bytes(data[:27].tolist())
        present = header[:3]
        lengths = [struct.unpack("<Q", header[3 + 8 * j:11 + 8 * j])[0] for j in range(3)]
        pos = 27
        for j in range(3):
            if not present[j]:
                continue
            chunk = data[pos:pos + lengths[j]]
            pos += lengths[j]
            if dst[j] is None:
                continue
            target = _slot_bytes(dst[j])
            if target.numel() != lengths[j] or chunk.numel() != lengths[j]:
                raise ValueError("t_kv3: slot size mismatch")
            target.copy_(chunk)


TEST_SERDES: dict[str, tuple[Any, Any, SerdeSizeContract, bool]] = {
    "t_int8": (Int8Serializer, Int8Deserializer, SerdeSizeContract.EXACT, True),
    "t_crc": (CrcSerializer, CrcDeserializer, SerdeSizeContract.EXACT, False),
    "t_zlib": (ZlibSerializer, ZlibDeserializer, SerdeSizeContract.UPPER_BOUND, False),
    "t_kv3": (Kv3Serializer, Kv3Deserializer, SerdeSizeContract.EXACT, False),
}


def make_processor(name: str, max_workers: int = 1) -> AsyncSerdeProcessor:
    ser, deser, _contract, _lossy = TEST_SERDES[name]
    return AsyncSerdeProcessor(ser(), deser(), max_workers, serde_type=name)


def spec_for(name: str) -> SerdeSpec:
    _ser, _deser, contract, lossy = TEST_SERDES[name]
    return SerdeSpec(factory=lambda kw: make_processor(name, kw["max_workers"]),
                     description=f"test serde {name}", options=(max_workers_option(1),),
                     size_contract=contract, lossy=lossy)
