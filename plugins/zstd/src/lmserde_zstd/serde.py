"""``ZstdSerializer`` / ``ZstdDeserializer``: lossless compression of an object's bytes.

The serializer compresses the source object's logical bytes (``get_size()``, every group and any
padding, exactly what ``identity`` copies) into one frame (:mod:`lmserde_zstd.frame`). When
compression saves less than ``min_saving`` of the input (encrypted or already-quantized data) the
frame stores the input unchanged with the STORED flag: a few header bytes instead of a decode on
every load. ``estimate_serialized_size`` is the header plus the raw length, so the serializer
never needs a destination larger than that (UPPER_BOUND size contract).

The deserializer restores exactly ``dst.get_size()`` bytes: lengths come from the destination and
the checked header, never from ``len(src)`` beyond the frame, and nothing is allocated from a
length the frame claims.
"""

from __future__ import annotations

import ctypes
from typing import Any

import torch
from lmserde import Deserializer, MemoryLayoutDesc, MemoryObj, ObjectKey, Serializer, as_byte_tensor

from lmserde_zstd.codec import MAX_CHUNK_BYTES, compress, decompress_into
from lmserde_zstd.frame import HEADER_SIZE, Codec, FrameError, FrameHeader, Shuffle

__all__ = ["ZstdSerializer", "ZstdDeserializer", "element_size_of", "DEFAULT_MIN_SAVING"]

#: Compression must save at least this share of the input, or the input is stored raw.
DEFAULT_MIN_SAVING = 1 / 64


def element_size_of(obj: Any) -> int:
    """The element size the shuffle uses: the itemsize shared by every group's dtype, else 1.

    A chain hands a later stage plain bytes (``uint8``: element size 1); a bf16 KV object gives 2.
    """
    get_dtypes = getattr(obj, "get_dtypes", None)
    dtypes = list(get_dtypes()) if callable(get_dtypes) else []
    sizes = {d.itemsize for d in dtypes}
    size = sizes.pop() if len(sizes) == 1 else 1
    return size if 1 <= size <= 255 else 1


def _copy(dst: torch.Tensor, src: torch.Tensor) -> None:
    """Byte copy between same-sized contiguous tensors (CPU: without waking torch's pool)."""
    if not src.numel():
        return
    if dst.device.type == "cpu" and src.device.type == "cpu":
        ctypes.memmove(dst.data_ptr(), src.data_ptr(), src.numel())
    else:
        dst.copy_(src)


class ZstdSerializer(Serializer):
    """Compresses an object's bytes into a frame (see the module docstring).

    ``level``: blosc2 compression level 1-9 (1 is fastest; blosc2 maps it onto zstd levels).
    ``shuffle``: ``"byte"`` (group byte ``i`` of every element: the sign/exponent bytes of bf16
    compress, the mantissa bytes mostly do not), ``"bit"`` or ``"none"``. ``min_saving``: the
    least share of the input compression must save, else the input is stored raw (0 <= x < 1).
    ``nthreads``: blosc2 threads compressing the blocks of one object.
    """

    def __init__(self, *, level: int = 1, shuffle: Shuffle | str = Shuffle.BYTE,
                 min_saving: float = DEFAULT_MIN_SAVING, nthreads: int = 1) -> None:
        if not 1 <= level <= 9:
            raise ValueError(f"zstd serde: level must be 1..9, got {level}")
        if not 0 <= min_saving < 1:
            raise ValueError(f"zstd serde: min_saving must be in [0, 1), got {min_saving}")
        if nthreads < 1:
            raise ValueError(f"zstd serde: nthreads must be >= 1, got {nthreads}")
        self.level = level
        self.shuffle = Shuffle(shuffle)
        self.min_saving = min_saving
        self.nthreads = nthreads

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        """Header plus the raw bytes: what a stored (incompressible) frame takes."""
        return HEADER_SIZE + int(layout_desc.nbytes)

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        data = as_byte_tensor(src)
        n = data.numel()
        out = as_byte_tensor(dst)
        if out.numel() < HEADER_SIZE + n:
            raise ValueError(
                f"zstd serde: destination buffer too small ({out.numel()} < {HEADER_SIZE + n} "
                "bytes)"
            )
        element_size = element_size_of(src)
        packed = self._compress(data, element_size)
        stored = packed is None
        payload_length = n if packed is None else len(packed)
        header = FrameHeader(Codec.BLOSC2_ZSTD, self.shuffle, element_size, stored, n,
                             payload_length)
        out[:HEADER_SIZE].copy_(torch.frombuffer(bytearray(header.pack()), dtype=torch.uint8))
        body = out[HEADER_SIZE:HEADER_SIZE + payload_length]
        if packed is None:
            _copy(body, data)
        elif body.device.type == "cpu":
            ctypes.memmove(body.data_ptr(), packed, payload_length)
        else:
            body.copy_(torch.frombuffer(bytearray(packed), dtype=torch.uint8))
        return header.frame_size

    def _compress(self, data: torch.Tensor, element_size: int) -> bytes | None:
        """The compressed payload, or ``None`` when the input is to be stored raw."""
        n = data.numel()
        if n == 0 or n > MAX_CHUNK_BYTES:
            return None
        if data.device.type != "cpu":
            data = data.cpu()
        packed = compress(data.numpy(), level=self.level, shuffle=self.shuffle,
                          element_size=element_size, nthreads=self.nthreads)
        if len(packed) >= n or n - len(packed) < self.min_saving * n:
            return None
        return packed


class ZstdDeserializer(Deserializer):
    """Restores ``dst.get_size()`` bytes from a frame; raises ``ValueError`` on any bad frame.

    ``nthreads``: blosc2 threads decoding the blocks of one object.
    """

    def __init__(self, *, nthreads: int = 1) -> None:
        if nthreads < 1:
            raise ValueError(f"zstd serde: nthreads must be >= 1, got {nthreads}")
        self.nthreads = nthreads

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        data = as_byte_tensor(src)
        out = as_byte_tensor(dst)
        header = FrameHeader.parse(data[:HEADER_SIZE].numpy().tobytes(),
                                   expected_raw_length=out.numel(), available=data.numel())
        payload = data[HEADER_SIZE:header.frame_size]
        if header.stored:
            _copy(out, payload)
            return
        if out.device.type != "cpu" or payload.device.type != "cpu":
            raise FrameError("zstd serde: decoding needs CPU source and destination buffers")
        decompress_into(memoryview(payload.numpy()), out.numpy(),
                        element_size=header.element_size, nthreads=self.nthreads)
