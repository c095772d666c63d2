"""Frame version 2: AES-GCM with associated data binding the frame to its object key.

Header (26 bytes, integers big-endian)::

    offset size field
    0      1    version            0x02
    1      1    suite              0x01 AES-128-GCM, 0x02 AES-256-GCM
    2      4    key_version        u32, the key version that encrypted the frame
    6      8    plaintext_length   u64, P
    14     12   IV                 random per frame
    26     P    ciphertext
    26+P   16   GCM tag

Associated data (authenticated, not stored)::

    header (26 bytes)
    || u32 len(model_name UTF-8) || model_name UTF-8
    || i64 kv_rank
    || u64 object_group_id
    || u32 len(chunk_hash) || chunk_hash
    || u32 len(cache_salt UTF-8) || cache_salt UTF-8

A frame copied to any other key (another chunk, rank, group, model or tenant) therefore fails
authentication. Sealing, checking and opening are shared with version 3 in ``bound_frame``;
``docs/formats/aesgcm.md`` is the normative description.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import ClassVar

from lmserde_aesgcm import bound_frame
from lmserde_aesgcm.bound_frame import (
    IV_LEN,
    MAX_KEY_VERSION,
    MAX_PLAINTEXT_LEN,
    SUITE_AES_128_GCM,
    SUITE_AES_256_GCM,
    SUITE_KEY_LEN,
    TAG_LEN,
    ObjectKeyLike,
    associated_data,
    open_into,
    seal_into,
    suite_for_key_len,
)

__all__ = ["VERSION", "IV_LEN", "TAG_LEN", "HEADER_LEN", "OVERHEAD", "SUITE_AES_128_GCM",
           "SUITE_AES_256_GCM", "SUITE_KEY_LEN", "MAX_KEY_VERSION", "MAX_PLAINTEXT_LEN", "ObjectKeyLike",
           "FrameV2Header", "suite_for_key_len", "associated_data", "read_header", "seal_into", "open_into"]

VERSION = 2
_HEADER = struct.Struct(f">BBIQ{IV_LEN}s")
HEADER_LEN = _HEADER.size
OVERHEAD = HEADER_LEN + TAG_LEN


@dataclass(frozen=True)
class FrameV2Header(bound_frame.BoundHeaderBase):
    """The fixed 26-byte header of a version-2 frame."""

    version: ClassVar[int] = VERSION
    header_len: ClassVar[int] = HEADER_LEN
    layout: ClassVar[struct.Struct] = _HEADER

    suite: int
    key_version: int
    plaintext_length: int
    iv: bytes


def read_header(frame: memoryview, plaintext_len: int) -> FrameV2Header:
    """Parse and check the header of a version-2 frame that must decrypt to ``plaintext_len``
    bytes; ``FrameFormatError`` for a wrong length or a truncated frame."""
    return FrameV2Header.read(frame, plaintext_len)
