"""Helpers of the zstd tests: objects, one-call serialize/deserialize, frame surgery."""

from __future__ import annotations

import struct
import zlib

import torch
from lmserde import MemoryLayoutDesc, ObjectKey, TensorMemoryObj, as_byte_tensor
from lmserde_zstd import HEADER_SIZE, ZstdDeserializer, ZstdSerializer

KEY = ObjectKey(b"\x07" * 32, "test/model", 0x01010101, 0, "tenant")


def gaussian(shape: list[int], dtype: torch.dtype, seed: int = 0) -> TensorMemoryObj:
    gen = torch.Generator().manual_seed(seed)
    return TensorMemoryObj.from_tensor(torch.randn(shape, generator=gen).to(dtype))


def byte_object(data: bytes | torch.Tensor) -> TensorMemoryObj:
    if isinstance(data, torch.Tensor):
        raw = data
    elif data:
        raw = torch.frombuffer(bytearray(data), dtype=torch.uint8)
    else:
        raw = torch.empty(0, dtype=torch.uint8)
    return TensorMemoryObj.from_tensor(raw)


def encode(src: TensorMemoryObj, serializer: ZstdSerializer | None = None) -> bytes:
    ser = serializer or ZstdSerializer()
    dst = TensorMemoryObj.from_tensor(
        torch.zeros(ser.estimate_serialized_size(src.get_layout()), dtype=torch.uint8))
    n = ser.serialize(src, dst, KEY)
    return bytes(as_byte_tensor(dst)[:n].numpy().tobytes())


def decode(frame: bytes, layout: MemoryLayoutDesc, *, extra: bytes = b"") -> TensorMemoryObj:
    """Decode ``frame`` (followed by ``extra`` bytes in the same source) into a new object."""
    out = TensorMemoryObj.allocate(layout, zero=True)
    out.raw_data.fill_(0x5A)
    ZstdDeserializer().deserialize(byte_object(frame + extra), out, KEY)
    return out


def same_bytes(a: TensorMemoryObj, b: TensorMemoryObj) -> bool:
    return bytes(a.byte_array) == bytes(b.byte_array)


def rewrite_header(frame: bytes, **fields: int) -> bytes:
    """``frame`` with header fields replaced and the header checksum recomputed (a forged header).

    Fields: codec, shuffle, element_size, flags, raw_length, payload_length.
    """
    layout = struct.Struct("<4sBBBBB3sIQQ")
    magic, version, codec, shuffle, esize, flags, res, _crc, raw, payload = layout.unpack(
        frame[:HEADER_SIZE])
    values = {"codec": codec, "shuffle": shuffle, "element_size": esize, "flags": flags,
              "raw_length": raw, "payload_length": payload, "version": version}
    values.update(fields)
    args = [magic, values["version"], values["codec"], values["shuffle"], values["element_size"],
            values["flags"], res, 0, values["raw_length"], values["payload_length"]]
    header = layout.pack(*args)
    args[7] = zlib.crc32(header)
    return layout.pack(*args) + frame[HEADER_SIZE:]
