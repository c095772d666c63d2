"""Wire format of the scaled modes: a 20-byte versioned header, the scale exponents, the codes.

```
offset  size  field
0       4     magic b"LF8S"
4       1     version (1)
5       1     scaling mode: 1 = per_tensor, 2 = per_token
6       1     fp8 dtype: 1 = float8_e4m3fn, 2 = float8_e5m2
7       1     reserved, 0
8       8     element count N, uint64 little-endian
16      4     scale count S, uint32 little-endian
20      S     scale exponents k, int8 (scale = 2**k)
20+S    N     fp8 codes: the object's groups in order, row-major, one byte per element
```
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from lmserde_fp8.formats import Fp8Format, fp8_format_from_wire
from lmserde_fp8.scaling import ScalingMode

__all__ = ["MAGIC", "VERSION", "HEADER_SIZE", "FrameHeader"]

MAGIC = b"LF8S"
VERSION = 1
_LAYOUT = struct.Struct("<4sBBBBQI")
HEADER_SIZE = _LAYOUT.size  # 20


@dataclass(frozen=True)
class FrameHeader:
    """The fixed part of a scaled frame."""

    mode: ScalingMode
    fmt: Fp8Format
    num_elements: int
    num_scales: int

    @property
    def frame_size(self) -> int:
        """Header, exponents and codes: the whole frame in bytes."""
        return HEADER_SIZE + self.num_scales + self.num_elements

    def pack(self) -> bytes:
        return _LAYOUT.pack(MAGIC, VERSION, self.mode.wire_id, self.fmt.wire_id, 0,
                            self.num_elements, self.num_scales)

    @classmethod
    def parse(cls, data: bytes) -> FrameHeader:
        """Decode and check a header; ``ValueError`` says what is wrong."""
        if len(data) < HEADER_SIZE:
            raise ValueError(
                f"fp8 serde: source buffer too small for a scaled frame header "
                f"({len(data)} < {HEADER_SIZE} bytes)"
            )
        magic, version, mode, dtype, reserved, n, s = _LAYOUT.unpack(bytes(data[:HEADER_SIZE]))
        if magic != MAGIC:
            raise ValueError(
                f"fp8 serde: not a scaled fp8 frame (magic {magic!r}, expected {MAGIC!r}); was it "
                "written with scaling='none'?"
            )
        if version != VERSION:
            raise ValueError(f"fp8 serde: unsupported scaled frame version {version} (reads {VERSION})")
        if reserved != 0:
            raise ValueError(f"fp8 serde: reserved header byte is {reserved}, expected 0")
        return cls(ScalingMode.from_wire(mode), fp8_format_from_wire(dtype), n, s)
