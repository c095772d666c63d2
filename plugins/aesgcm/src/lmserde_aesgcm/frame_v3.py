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
(``frame_v2.associated_data``), so the key id is authenticated with the rest of the header and a
frame is bound to its object key. The key id lets a reader tell "written with a key I do not
hold" (a miss, the object kept) from "damaged" (authentication fails although the key ids match)
before it decrypts. ``docs/formats/aesgcm.md`` is the normative description.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lmserde_aesgcm.errors import FrameFormatError
from lmserde_aesgcm.frame_v2 import (
    IV_LEN,
    MAX_KEY_VERSION,
    MAX_PLAINTEXT_LEN,
    SUITE_KEY_LEN,
    TAG_LEN,
    ObjectKeyLike,
    associated_data,
)
from lmserde_aesgcm.key_identity import KEY_ID_LEN

__all__ = ["VERSION", "HEADER_LEN", "OVERHEAD", "FrameV3Header", "read_header", "seal_into",
           "open_into"]

VERSION = 3
_HEADER = struct.Struct(f">BBI{KEY_ID_LEN}sQ{IV_LEN}s")
HEADER_LEN = _HEADER.size
OVERHEAD = HEADER_LEN + TAG_LEN


@dataclass(frozen=True)
class FrameV3Header:
    """The fixed 34-byte header of a version-3 frame."""

    suite: int
    key_version: int
    key_id: bytes
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
        if len(self.key_id) != KEY_ID_LEN:
            raise ValueError(
                f"aesgcm serde: key id must be {KEY_ID_LEN} bytes, got {len(self.key_id)}")
        if not 0 <= self.plaintext_length <= MAX_PLAINTEXT_LEN:
            raise ValueError(
                f"aesgcm serde: plaintext of {self.plaintext_length} bytes exceeds the AES-GCM "
                f"limit of {MAX_PLAINTEXT_LEN} bytes per frame"
            )
        if len(self.iv) != IV_LEN:
            raise ValueError(f"aesgcm serde: IV must be {IV_LEN} bytes, got {len(self.iv)}")
        return _HEADER.pack(VERSION, self.suite, self.key_version, self.key_id,
                            self.plaintext_length, self.iv)

    @classmethod
    def unpack(cls, frame: memoryview) -> FrameV3Header:
        """Parse the header at the start of ``frame``; ``FrameFormatError`` if it is not one."""
        if len(frame) < HEADER_LEN:
            raise FrameFormatError(
                f"aesgcm serde: truncated frame: {len(frame)} bytes cannot hold the "
                f"{HEADER_LEN}-byte version-3 header"
            )
        version, suite, key_version, kid, plaintext_length, iv = _HEADER.unpack_from(frame)
        if version != VERSION:
            raise FrameFormatError(f"aesgcm serde: not a version-3 frame (version {version})")
        if suite not in SUITE_KEY_LEN:
            raise FrameFormatError(
                f"aesgcm serde: unknown suite 0x{suite:02x} in version-3 frame header "
                "(known: 0x01 AES-128-GCM, 0x02 AES-256-GCM)"
            )
        return cls(suite, key_version, kid, plaintext_length, iv)


def seal_into(
    aead: AESGCM,
    header: FrameV3Header,
    plaintext: memoryview,
    out: memoryview,
    key: ObjectKeyLike,
) -> int:
    """Encrypt ``plaintext`` straight into ``out`` as a version-3 frame; return the frame size."""
    if header.plaintext_length != len(plaintext):
        raise ValueError(
            f"aesgcm serde: header says {header.plaintext_length} plaintext bytes, "
            f"got {len(plaintext)}"
        )
    size = header.frame_size
    if len(out) < size:
        raise FrameFormatError(
            f"aesgcm serde: destination holds {len(out)} bytes, a version-3 frame of "
            f"{len(plaintext)} plaintext bytes needs {size}"
        )
    header_bytes = header.pack()
    out[:HEADER_LEN] = header_bytes
    aead.encrypt_into(
        header.iv, plaintext, associated_data(header_bytes, key), out[HEADER_LEN:size]
    )
    return size


def read_header(frame: memoryview, plaintext_len: int) -> FrameV3Header:
    """Parse and check the header of a version-3 frame that must decrypt to ``plaintext_len``
    bytes; ``FrameFormatError`` for a wrong length or a truncated frame."""
    header = FrameV3Header.unpack(frame)
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
    aead: AESGCM, header: FrameV3Header, frame: memoryview, out: memoryview, key: ObjectKeyLike
) -> None:
    """Authenticate and decrypt a version-3 frame (header from :func:`read_header`) straight into
    ``out``. On ``InvalidTag`` ``out`` holds unauthenticated bytes: the caller must wipe it."""
    aad = associated_data(bytes(frame[:HEADER_LEN]), key)
    body = frame[HEADER_LEN : header.frame_size]
    aead.decrypt_into(header.iv, body, aad, out)
