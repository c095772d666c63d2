"""Frame version 3: version 2 plus the key id of the key that encrypted it (the default).

Layout (big-endian)::

    offset size field
    0      1    version            0x03
    1      1    suite              0x01 AES-128-GCM, 0x02 AES-256-GCM
    2      4    key_version        u32, the key version that encrypted the frame
    6      8    key_id             key_identity.key_id(root secret, tenant, key_version)
    14     8    plaintext_length   u64, P
    22     12   IV                 random per frame
    34     P    ciphertext
    34+P   16   GCM tag

Associated data: the 34-byte header followed by the object key's fields, exactly as version 2
(``bound_frame.associated_data``), so the key id is authenticated with the rest of the header and a
frame is bound to its object key. The key id lets a reader tell "written with a key I do not
hold" (a miss, the object kept) from "damaged" (authentication fails although the key ids match)
before it decrypts. ``docs/formats/aesgcm.md`` is the normative description.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from lmserde_aesgcm import bound_frame
from lmserde_aesgcm.bound_frame import IV_LEN, TAG_LEN, open_into, seal_into
from lmserde_aesgcm.key_identity import KEY_ID_LEN

__all__ = ["VERSION", "HEADER_LEN", "OVERHEAD", "FrameV3Header", "read_header", "seal_into",
           "open_into"]

VERSION = 3
_HEADER = struct.Struct(f">BBI{KEY_ID_LEN}sQ{IV_LEN}s")
HEADER_LEN = _HEADER.size
OVERHEAD = HEADER_LEN + TAG_LEN


@dataclass(frozen=True)
class FrameV3Header(bound_frame.BoundHeaderBase):
    """The fixed 34-byte header of a version-3 frame."""

    version: ClassVar[int] = VERSION
    header_len: ClassVar[int] = HEADER_LEN
    layout: ClassVar[struct.Struct] = _HEADER

    suite: int
    key_version: int
    key_id: bytes
    plaintext_length: int
    iv: bytes

    def check_own_fields(self) -> None:
        """``ValueError`` unless the key id has its fixed length."""
        if len(self.key_id) != KEY_ID_LEN:
            raise ValueError(
                f"aesgcm serde: key id must be {KEY_ID_LEN} bytes, got {len(self.key_id)}")


def read_header(frame: memoryview, plaintext_len: int) -> FrameV3Header:
    """Parse and check the header of a version-3 frame that must decrypt to ``plaintext_len``
    bytes; ``FrameFormatError`` for a wrong length or a truncated frame."""
    return FrameV3Header.read(frame, plaintext_len)
