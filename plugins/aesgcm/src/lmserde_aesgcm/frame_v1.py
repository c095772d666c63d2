"""Frame version 1: LMCache's aesgcm frame, byte for byte.

Layout: ``[0x01][12-byte IV][ciphertext, P bytes][16-byte GCM tag]`` with no associated data.
The frame carries neither the plaintext length nor a key version: the reader takes the length
from its destination and uses the tenant's current key.
"""

from __future__ import annotations

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from lmserde_aesgcm.errors import FrameFormatError

__all__ = [
    "VERSION",
    "IV_LEN",
    "TAG_LEN",
    "HEADER_LEN",
    "OVERHEAD",
    "seal_into",
    "check_frame",
    "open_into",
]

VERSION = 1
IV_LEN = 12
TAG_LEN = 16
HEADER_LEN = 1 + IV_LEN
OVERHEAD = HEADER_LEN + TAG_LEN

_MALFORMED = "aesgcm serde: malformed frame or unknown version"


def seal_into(aead: AESGCM, iv: bytes, plaintext: memoryview, out: memoryview) -> int:
    """Encrypt ``plaintext`` straight into ``out`` as a version-1 frame; return the frame size.

    ``out`` must be a writable byte view with room for ``len(plaintext) + OVERHEAD`` bytes.
    """
    if len(iv) != IV_LEN:
        raise ValueError(f"aesgcm serde: IV must be {IV_LEN} bytes, got {len(iv)}")
    size = len(plaintext) + OVERHEAD
    if len(out) < size:
        raise FrameFormatError(
            f"aesgcm serde: destination holds {len(out)} bytes, a version-1 frame of "
            f"{len(plaintext)} plaintext bytes needs {size}"
        )
    out[0] = VERSION
    out[1:HEADER_LEN] = iv
    aead.encrypt_into(iv, plaintext, None, out[HEADER_LEN:size])
    return size


def check_frame(frame: memoryview, plaintext_len: int) -> None:
    """Raise ``FrameFormatError`` unless ``frame`` starts with a version-1 frame of that length."""
    if len(frame) < HEADER_LEN + plaintext_len + TAG_LEN or frame[0] != VERSION:
        raise FrameFormatError(
            f"{_MALFORMED}: expected a version-1 frame of {plaintext_len + OVERHEAD} bytes "
            f"(plaintext {plaintext_len} + {OVERHEAD}), source holds {len(frame)} bytes"
            + ("" if len(frame) == 0 else f" starting with 0x{frame[0]:02x}")
        )


def open_into(aead: AESGCM, frame: memoryview, out: memoryview) -> None:
    """Authenticate and decrypt a version-1 frame straight into ``out`` (``len(out)`` bytes).

    Bytes after the frame are ignored. On ``InvalidTag`` ``out`` holds unauthenticated bytes: the
    caller must wipe it.
    """
    plaintext_len = len(out)
    check_frame(frame, plaintext_len)
    iv = bytes(frame[1:HEADER_LEN])
    aead.decrypt_into(iv, frame[HEADER_LEN : HEADER_LEN + plaintext_len + TAG_LEN], None, out)
