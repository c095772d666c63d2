"""The ``zstd`` serde's frame: a 32-byte self-describing header, then the payload.

```
offset  size  field
0       4     magic b"LZST"
4       1     version: 1 for codec 1 frames, 2 for codec 2 frames
5       1     codec: 1 = a blosc2 chunk compressed with zstd; 2 = byte planes, zstd per plane
6       1     shuffle: 0 = none, 1 = byte, 2 = bit (codec 2: always 1)
7       1     element size the shuffle used (1..255; codec 2: 1, 2, 4 or 8)
8       1     flags: bit 0 = STORED (the payload is the input, unchanged); other bits 0
9       3     reserved, 0
12      4     CRC-32 of the header with this field zeroed, uint32 little-endian
16      8     raw length: bytes of the input (and of a load's destination), uint64 little-endian
24      8     payload length, uint64 little-endian
32      P     payload
```

Version 2 added codec 2; a reader of version 2 reads both versions, a version-1 reader refuses
codec-2 frames by their version. Every field is checked on read (see :meth:`FrameHeader.parse`);
the header CRC makes any flipped header bit an error instead of a misread length or codec.
"""

from __future__ import annotations

import enum
import struct
import zlib
from dataclasses import dataclass

__all__ = ["MAGIC", "VERSION", "VERSION_OF_CODEC", "HEADER_SIZE", "FLAG_STORED", "Codec",
           "Shuffle", "FrameHeader", "FrameError"]

MAGIC = b"LZST"
VERSION = 2
#: The version a frame of each codec carries (codec-1 frames stay readable by version-1 readers).
VERSION_OF_CODEC: dict[int, int] = {1: 1, 2: 2}
FLAG_STORED = 0x01
_KNOWN_FLAGS = FLAG_STORED
_LAYOUT = struct.Struct("<4sBBBBB3sIQQ")
HEADER_SIZE = _LAYOUT.size  # 32
_CRC_OFFSET = 12


class FrameError(ValueError):
    """A ``zstd`` frame is truncated, damaged, foreign or does not fit the destination."""


class Codec(enum.IntEnum):
    """How a compressed payload was written (wire ids)."""

    BLOSC2_ZSTD = 1
    PLANES_ZSTD = 2

    @property
    def version(self) -> int:
        """The frame version written with this codec."""
        return VERSION_OF_CODEC[int(self)]


class Shuffle(enum.Enum):
    """The byte-reordering filter applied before the codec (option ``shuffle``)."""

    NONE = "none"
    BYTE = "byte"
    BIT = "bit"

    @property
    def wire_id(self) -> int:
        return _SHUFFLE_IDS[self]

    @classmethod
    def from_wire(cls, wire_id: int) -> Shuffle:
        for shuffle, known in _SHUFFLE_IDS.items():
            if known == wire_id:
                return shuffle
        raise FrameError(f"zstd frame: unknown shuffle id {wire_id} (known: 0 none, 1 byte, 2 bit)")


_SHUFFLE_IDS = {Shuffle.NONE: 0, Shuffle.BYTE: 1, Shuffle.BIT: 2}


def _crc(header: bytes) -> int:
    return zlib.crc32(header[:_CRC_OFFSET] + b"\0\0\0\0" + header[_CRC_OFFSET + 4:])


@dataclass(frozen=True)
class FrameHeader:
    """The fixed part of a frame: what a reader needs before touching the payload."""

    codec: Codec
    shuffle: Shuffle
    element_size: int
    stored: bool
    raw_length: int
    payload_length: int

    def __post_init__(self) -> None:
        if not 1 <= self.element_size <= 255:
            raise ValueError(f"zstd frame: element size must be 1..255, got {self.element_size}")
        if self.raw_length < 0 or self.payload_length < 0:
            raise ValueError("zstd frame: lengths must be non-negative")

    @property
    def frame_size(self) -> int:
        """Header plus payload: the bytes a serialize wrote."""
        return HEADER_SIZE + self.payload_length

    def pack(self) -> bytes:
        flags = FLAG_STORED if self.stored else 0
        fields = (MAGIC, self.codec.version, int(self.codec), self.shuffle.wire_id, self.element_size, flags,
                  b"\0\0\0", 0, self.raw_length, self.payload_length)
        header = _LAYOUT.pack(*fields)
        return _LAYOUT.pack(*fields[:7], _crc(header), *fields[8:])

    @classmethod
    def parse(cls, data: bytes, *, expected_raw_length: int, available: int) -> FrameHeader:
        """Decode and check the header at the start of ``data``.

        ``expected_raw_length`` is the destination's size (the frame must restore exactly that
        many bytes); ``available`` is how many source bytes there are (header included): a frame
        claiming more is truncated. Raises :class:`FrameError` saying what is wrong.
        """
        if len(data) < HEADER_SIZE or available < HEADER_SIZE:
            raise FrameError(
                f"zstd frame: source too small for a frame header ({min(len(data), available)} < "
                f"{HEADER_SIZE} bytes)"
            )
        header = bytes(data[:HEADER_SIZE])
        magic, version, codec, shuffle, element_size, flags, reserved, crc, raw, payload = (
            _LAYOUT.unpack(header))
        if magic != MAGIC:
            raise FrameError(
                f"zstd frame: bad magic {magic!r} (expected {MAGIC!r}); not written by the zstd "
                "serde, or damaged"
            )
        if crc != _crc(header):
            raise FrameError("zstd frame: header checksum mismatch (the header is damaged)")
        if version not in VERSION_OF_CODEC.values():
            raise FrameError(
                f"zstd frame: unsupported version {version} (this reader reads 1 to {VERSION})")
        if codec not in Codec._value2member_map_:
            raise FrameError(
                f"zstd frame: unknown codec id {codec} (known: 1 blosc2-zstd, 2 planes-zstd)")
        if VERSION_OF_CODEC[codec] != version:
            raise FrameError(f"zstd frame: codec {codec} is not written with version {version}")
        if codec == Codec.PLANES_ZSTD and (shuffle != Shuffle.BYTE.wire_id
                                           or element_size not in (1, 2, 4, 8)):
            raise FrameError(
                f"zstd frame: codec 2 needs shuffle 1 and element size 1, 2, 4 or 8 (got shuffle "
                f"{shuffle}, element size {element_size})")
        if flags & ~_KNOWN_FLAGS:
            raise FrameError(f"zstd frame: unknown flag bits 0x{flags & ~_KNOWN_FLAGS:02x}")
        if reserved != b"\0\0\0":
            raise FrameError("zstd frame: reserved header bytes are not zero")
        if element_size == 0:
            raise FrameError("zstd frame: element size 0")
        if raw != expected_raw_length:
            raise FrameError(
                f"zstd frame: holds {raw} bytes, the destination has {expected_raw_length}"
            )
        stored = bool(flags & FLAG_STORED)
        if stored and payload != raw:
            raise FrameError(
                f"zstd frame: a stored frame's payload ({payload} bytes) must equal its raw length "
                f"({raw} bytes)"
            )
        if not stored and payload >= raw:
            raise FrameError(
                f"zstd frame: compressed payload ({payload} bytes) not smaller than the raw length "
                f"({raw} bytes); a writer stores such input raw"
            )
        if payload > available - HEADER_SIZE:
            raise FrameError(
                f"zstd frame: truncated (payload of {payload} bytes, {available - HEADER_SIZE} "
                "available after the header)"
            )
        return cls(Codec(codec), Shuffle.from_wire(shuffle), element_size, stored, raw, payload)
