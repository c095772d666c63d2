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
authentication. ``docs/formats/aesgcm.md`` is the normative description.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from typing import Protocol

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lmserde_aesgcm.errors import FrameFormatError

__all__ = [
    "VERSION",
    "IV_LEN",
    "TAG_LEN",
    "HEADER_LEN",
    "OVERHEAD",
    "SUITE_AES_128_GCM",
    "SUITE_AES_256_GCM",
    "SUITE_KEY_LEN",
    "MAX_KEY_VERSION",
    "MAX_PLAINTEXT_LEN",
    "ObjectKeyLike",
    "FrameV2Header",
    "suite_for_key_len",
    "associated_data",
    "read_header",
    "seal_into",
    "open_into",
]

VERSION = 2
IV_LEN = 12
TAG_LEN = 16
_HEADER = struct.Struct(">BBIQ12s")
HEADER_LEN = _HEADER.size
OVERHEAD = HEADER_LEN + TAG_LEN

SUITE_AES_128_GCM = 0x01
SUITE_AES_256_GCM = 0x02
SUITE_KEY_LEN: dict[int, int] = {SUITE_AES_128_GCM: 16, SUITE_AES_256_GCM: 32}
MAX_KEY_VERSION = 0xFFFF_FFFF
# NIST SP 800-38D: at most 2**39 - 256 bits of plaintext per GCM invocation.
MAX_PLAINTEXT_LEN = (2**39 - 256) // 8

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")


class ObjectKeyLike(Protocol):
    """The fields of an ``ObjectKey`` a version-2 frame is bound to."""

    @property
    def chunk_hash(self) -> bytes: ...
    @property
    def model_name(self) -> str: ...
    @property
    def kv_rank(self) -> int: ...
    @property
    def object_group_id(self) -> int: ...
    @property
    def cache_salt(self) -> str: ...


def suite_for_key_len(key_len: int) -> int:
    """The suite byte for an AES key of ``key_len`` bytes (16 or 32)."""
    for suite, length in SUITE_KEY_LEN.items():
        if length == key_len:
            return suite
    raise ValueError(f"aesgcm serde: AES key length must be 16 or 32 bytes, got {key_len}")


@dataclass(frozen=True)
class FrameV2Header:
    """The fixed 26-byte header of a version-2 frame."""

    suite: int
    key_version: int
    plaintext_length: int
    iv: bytes

    @property
    def key_len(self) -> int:
        return SUITE_KEY_LEN[self.suite]

    @property
    def frame_size(self) -> int:
        return HEADER_LEN + self.plaintext_length + TAG_LEN

    def pack(self) -> bytes:
        """The header bytes; ``ValueError`` for out-of-range fields."""
        if self.suite not in SUITE_KEY_LEN:
            raise FrameFormatError(f"aesgcm serde: unknown suite 0x{self.suite:02x}")
        if not 0 <= self.key_version <= MAX_KEY_VERSION:
            raise ValueError(
                f"aesgcm serde: key version must be in [0, {MAX_KEY_VERSION}], "
                f"got {self.key_version}"
            )
        if not 0 <= self.plaintext_length <= MAX_PLAINTEXT_LEN:
            raise ValueError(
                f"aesgcm serde: plaintext of {self.plaintext_length} bytes exceeds the AES-GCM "
                f"limit of {MAX_PLAINTEXT_LEN} bytes per frame"
            )
        if len(self.iv) != IV_LEN:
            raise ValueError(f"aesgcm serde: IV must be {IV_LEN} bytes, got {len(self.iv)}")
        return _HEADER.pack(VERSION, self.suite, self.key_version, self.plaintext_length, self.iv)

    @classmethod
    def unpack(cls, frame: memoryview) -> FrameV2Header:
        """Parse the header at the start of ``frame``; ``FrameFormatError`` if it is not one."""
        if len(frame) < HEADER_LEN:
            raise FrameFormatError(
                f"aesgcm serde: truncated frame: {len(frame)} bytes cannot hold the "
                f"{HEADER_LEN}-byte version-2 header"
            )
        version, suite, key_version, plaintext_length, iv = _HEADER.unpack_from(frame)
        if version != VERSION:
            raise FrameFormatError(f"aesgcm serde: not a version-2 frame (version {version})")
        if suite not in SUITE_KEY_LEN:
            raise FrameFormatError(
                f"aesgcm serde: unknown suite 0x{suite:02x} in version-2 frame header "
                "(known: 0x01 AES-128-GCM, 0x02 AES-256-GCM)"
            )
        return cls(suite, key_version, plaintext_length, iv)


def _length_prefixed(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def associated_data(header: bytes, key: ObjectKeyLike) -> bytes:
    """The associated data that binds a frame with ``header`` to the object ``key``."""
    try:
        rank = _I64.pack(key.kv_rank)
        group = _U64.pack(key.object_group_id)
    except struct.error:
        raise ValueError(
            f"aesgcm serde: kv_rank {key.kv_rank!r} / object_group_id {key.object_group_id!r} "
            "do not fit the version-2 associated data (i64 / u64)"
        ) from None
    return b"".join(
        (
            header,
            _length_prefixed(key.model_name.encode("utf-8", "surrogatepass")),
            rank,
            group,
            _length_prefixed(bytes(key.chunk_hash)),
            _length_prefixed(key.cache_salt.encode("utf-8", "surrogatepass")),
        )
    )


def seal_into(
    aead: AESGCM,
    header: FrameV2Header,
    plaintext: memoryview,
    out: memoryview,
    key: ObjectKeyLike,
) -> int:
    """Encrypt ``plaintext`` straight into ``out`` as a version-2 frame; return the frame size."""
    if header.plaintext_length != len(plaintext):
        raise ValueError(
            f"aesgcm serde: header says {header.plaintext_length} plaintext bytes, "
            f"got {len(plaintext)}"
        )
    size = header.frame_size
    if len(out) < size:
        raise FrameFormatError(
            f"aesgcm serde: destination holds {len(out)} bytes, a version-2 frame of "
            f"{len(plaintext)} plaintext bytes needs {size}"
        )
    header_bytes = header.pack()
    out[:HEADER_LEN] = header_bytes
    aead.encrypt_into(
        header.iv, plaintext, associated_data(header_bytes, key), out[HEADER_LEN:size]
    )
    return size


def read_header(frame: memoryview, plaintext_len: int) -> FrameV2Header:
    """Parse and check the header of a version-2 frame that must decrypt to ``plaintext_len``
    bytes; ``FrameFormatError`` for a wrong length or a truncated frame."""
    header = FrameV2Header.unpack(frame)
    if header.plaintext_length != plaintext_len:
        raise FrameFormatError(
            f"aesgcm serde: frame holds {header.plaintext_length} plaintext bytes but the "
            f"destination holds {plaintext_len}"
        )
    if len(frame) < header.frame_size:
        raise FrameFormatError(
            f"aesgcm serde: truncated frame: {len(frame)} bytes, the header announces "
            f"{header.frame_size}"
        )
    return header


def open_into(
    aead: AESGCM, header: FrameV2Header, frame: memoryview, out: memoryview, key: ObjectKeyLike
) -> None:
    """Authenticate and decrypt a version-2 frame (header from :func:`read_header`) straight into
    ``out``. On ``InvalidTag`` ``out`` holds unauthenticated bytes: the caller must wipe it."""
    aad = associated_data(bytes(frame[:HEADER_LEN]), key)
    body = frame[HEADER_LEN : header.frame_size]
    aead.decrypt_into(header.iv, body, aad, out)
