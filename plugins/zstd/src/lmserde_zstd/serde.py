"""``ZstdSerializer`` / ``ZstdDeserializer``: lossless compression of an object's bytes.

The serializer compresses the source object's logical bytes (``get_size()``, every group and any
padding, exactly what ``identity`` copies) into one frame (:mod:`lmserde_zstd.frame`) with one of
two codecs: ``planes`` (the default, codec 2: byte planes, zstd on the planes that pay,
:mod:`lmserde_zstd.plane_codec`) or ``blosc2`` (codec 1: shuffle + zstd over every byte,
:mod:`lmserde_zstd.codec`). The deserializer reads frames of either codec. When
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

from lmserde_zstd import plane_codec
from lmserde_zstd.codec import MAX_CHUNK_BYTES, compress, decompress_into
from lmserde_zstd.frame import HEADER_SIZE, Codec, FrameError, FrameHeader, Shuffle

__all__ = ["CODECS", "DEFAULT_CODEC", "DEFAULT_MIN_SAVING", "ZstdDeserializer", "ZstdSerializer",
           "element_size_of"]

#: Codec names (option ``codec``) and their wire ids.
CODECS: dict[str, Codec] = {"planes": Codec.PLANES_ZSTD, "blosc2": Codec.BLOSC2_ZSTD}
DEFAULT_CODEC = "planes"

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

    ``codec``: ``"planes"`` (default) or ``"blosc2"``. ``level`` 1-9: for ``planes``, 1 is a fast
    zstd setting tuned for exponent planes and 2-9 are zstd's levels; for ``blosc2``, blosc2's
    scale (mapped onto zstd levels). ``shuffle``: ``"byte"`` (group byte ``i`` of every element:
    the sign/exponent bytes of bf16 compress, the mantissa bytes mostly do not), ``"none"``, or
    (``blosc2`` only) ``"bit"``. ``min_saving``: the least share of the input compression must
    save, else the input is stored raw (0 <= x < 1). ``nthreads``: blosc2 threads compressing the
    blocks of one object (``blosc2`` only; ``planes`` codes an object on the calling thread).
    """

    def __init__(self, *, codec: str = DEFAULT_CODEC, level: int = 1,
                 shuffle: Shuffle | str = Shuffle.BYTE, min_saving: float = DEFAULT_MIN_SAVING,
                 nthreads: int = 1) -> None:
        if codec not in CODECS:
            raise ValueError(f"zstd serde: codec must be one of {sorted(CODECS)}, got {codec!r}")
        if not 1 <= level <= 9:
            raise ValueError(f"zstd serde: level must be 1..9, got {level}")
        if CODECS[codec] is Codec.PLANES_ZSTD and Shuffle(shuffle) is Shuffle.BIT:
            raise ValueError("zstd serde: shuffle 'bit' needs codec 'blosc2' (the planes codec "
                             "splits bytes: shuffle 'byte' or 'none')")
        if not 0 <= min_saving < 1:
            raise ValueError(f"zstd serde: min_saving must be in [0, 1), got {min_saving}")
        if nthreads < 1:
            raise ValueError(f"zstd serde: nthreads must be >= 1, got {nthreads}")
        self.codec = CODECS[codec]
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
        if self.codec is Codec.PLANES_ZSTD:
            header = self._serialize_planes(data, out, element_size)
            out[:HEADER_SIZE].copy_(torch.frombuffer(bytearray(header.pack()), dtype=torch.uint8))
            return header.frame_size
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

    def _worth_it(self, n: int, payload_length: int | None) -> bool:
        return (payload_length is not None and payload_length < n
                and n - payload_length >= self.min_saving * n)

    def _serialize_planes(self, data: torch.Tensor, out: torch.Tensor,
                          element_size: int) -> FrameHeader:
        """Write the codec-2 payload (or the raw input) after the header; return the header."""
        n = data.numel()
        split = plane_codec.plane_element_size(element_size) if self.shuffle is Shuffle.BYTE else 1
        body = out[HEADER_SIZE:HEADER_SIZE + n]
        on_cpu = body.device.type == "cpu"
        payload_length = None
        if n:
            source = (data if data.device.type == "cpu" else data.cpu()).numpy()
            target = body.numpy() if on_cpu else torch.empty(n, dtype=torch.uint8).numpy()
            payload_length = plane_codec.compress_into(source, target, element_size=split,
                                                       level=self.level)
            if self._worth_it(n, payload_length) and not on_cpu:
                assert payload_length is not None
                body[:payload_length].copy_(torch.from_numpy(target[:payload_length]))
        if not self._worth_it(n, payload_length):
            _copy(body, data)
            return FrameHeader(Codec.PLANES_ZSTD, Shuffle.BYTE, split, True, n, n)
        assert payload_length is not None
        return FrameHeader(Codec.PLANES_ZSTD, Shuffle.BYTE, split, False, n, payload_length)

    def _compress(self, data: torch.Tensor, element_size: int) -> bytes | None:
        """The compressed payload, or ``None`` when the input is to be stored raw."""
        n = data.numel()
        if n == 0 or n > MAX_CHUNK_BYTES:
            return None
        if data.device.type != "cpu":
            data = data.cpu()
        packed = compress(data.numpy(), level=self.level, shuffle=self.shuffle,
                          element_size=element_size, nthreads=self.nthreads)
        return packed if self._worth_it(n, len(packed)) else None


class ZstdDeserializer(Deserializer):
    """Restores ``dst.get_size()`` bytes from a frame of either codec; raises ``ValueError`` on
    any bad frame.

    ``nthreads``: blosc2 threads decoding the blocks of one object (codec 1 frames).
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
        if header.codec is Codec.PLANES_ZSTD:
            plane_codec.decompress_into(memoryview(payload.numpy()), out.numpy(),
                                        element_size=header.element_size)
            return
        decompress_into(memoryview(payload.numpy()), out.numpy(),
                        element_size=header.element_size, nthreads=self.nthreads)
