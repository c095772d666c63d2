"""AES-GCM frames bound to their object key: a header that is authenticated as associated data
together with the object key's fields.

Frame versions 2 and 3 share this shape and differ only in their header layout (version 3 adds a
key id). This module holds everything they share: the constants, the associated data, the
validation of the header fields, and sealing, checking and opening a frame given its header.
``frame_v2`` and ``frame_v3`` define each version's header; ``docs/formats/aesgcm.md`` is the
normative description.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import Any, ClassVar, Protocol, TypeVar

from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde.tenant_keys import MAX_KEY_VERSION

from lmserde_aesgcm.errors import FrameFormatError

__all__ = [
    "IV_LEN",
    "TAG_LEN",
    "SUITE_AES_128_GCM",
    "SUITE_AES_256_GCM",
    "SUITE_KEY_LEN",
    "MAX_KEY_VERSION",
    "MAX_PLAINTEXT_LEN",
    "ObjectKeyLike",
    "BoundHeader",
    "BoundHeaderBase",
    "suite_for_key_len",
    "check_fields",
    "unpack_fields",
    "associated_data",
    "seal_into",
    "check_read",
    "open_into",
]

IV_LEN = 12
TAG_LEN = 16

SUITE_AES_128_GCM = 0x01
SUITE_AES_256_GCM = 0x02
SUITE_KEY_LEN: dict[int, int] = {SUITE_AES_128_GCM: 16, SUITE_AES_256_GCM: 32}
# NIST SP 800-38D: at most 2**39 - 256 bits of plaintext per GCM invocation.
MAX_PLAINTEXT_LEN = (2**39 - 256) // 8

_U32 = struct.Struct(">I")
_I64 = struct.Struct(">q")
_U64 = struct.Struct(">Q")


class ObjectKeyLike(Protocol):
    """The fields of an ``ObjectKey`` a bound frame is bound to."""

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


class BoundHeader(Protocol):
    """The header of a bound frame, as sealing and opening need it.

    ``version`` and ``header_len`` are the frame version (named in messages) and the size of
    the packed header; the frame is ``header || ciphertext || tag``, ``frame_size`` bytes.
    """

    @property
    def version(self) -> int: ...
    @property
    def header_len(self) -> int: ...
    @property
    def plaintext_length(self) -> int: ...
    @property
    def iv(self) -> bytes: ...
    @property
    def frame_size(self) -> int: ...

    def pack(self) -> bytes: ...


class BoundHeaderBase:
    """Base of the header classes (frozen dataclasses): what every bound header derives from
    its fields, and its packing.

    A subclass sets the class attributes ``version``, ``header_len`` and ``layout`` (the
    ``struct`` of the header: the version byte, then one item per dataclass field in declaration
    order) and has at least the fields ``suite``, ``key_version``, ``plaintext_length`` and
    ``iv``; :meth:`check_own_fields` checks the fields its version adds.
    """

    version: ClassVar[int]
    header_len: ClassVar[int]
    layout: ClassVar[struct.Struct]
    suite: int
    key_version: int
    plaintext_length: int
    iv: bytes

    @property
    def key_len(self) -> int:
        """The AES key length of the header's suite, in bytes."""
        return SUITE_KEY_LEN[self.suite]

    @property
    def frame_size(self) -> int:
        """The size of the whole frame: header, ciphertext and tag."""
        return self.header_len + self.plaintext_length + TAG_LEN

    def check_own_fields(self) -> None:
        """``ValueError`` for an out-of-range field this version adds (none by default)."""

    def pack(self) -> bytes:
        """The header bytes; ``ValueError`` (``FrameFormatError`` for an unknown suite) for
        out-of-range fields."""
        check_fields(self.suite, self.key_version, self.plaintext_length, self.iv)
        self.check_own_fields()
        values = (getattr(self, f.name) for f in dataclasses.fields(self))  # type: ignore[arg-type]
        return self.layout.pack(self.version, *values)

    @classmethod
    def unpack(cls: type[_Base], frame: memoryview) -> _Base:
        """Parse the header at the start of ``frame``; ``FrameFormatError`` if it is not one."""
        return cls(*unpack_fields(cls.layout, cls.version, frame))

    @classmethod
    def read(cls: type[_Base], frame: memoryview, plaintext_len: int) -> _Base:
        """Parse and check the header of a frame that must decrypt to ``plaintext_len`` bytes;
        ``FrameFormatError`` for a wrong length or a truncated frame (:func:`check_read`)."""
        return check_read(cls.unpack(frame), frame, plaintext_len)


_Base = TypeVar("_Base", bound=BoundHeaderBase)
_Header = TypeVar("_Header", bound=BoundHeader)


def suite_for_key_len(key_len: int) -> int:
    """The suite byte for an AES key of ``key_len`` bytes (16 or 32)."""
    for suite, length in SUITE_KEY_LEN.items():
        if length == key_len:
            return suite
    raise ValueError(f"aesgcm serde: AES key length must be 16 or 32 bytes, got {key_len}")


def check_fields(suite: int, key_version: int, plaintext_length: int, iv: bytes) -> None:
    """Check the header fields every bound frame has before they are packed:
    ``FrameFormatError`` for an unknown suite, ``ValueError`` for an out-of-range field."""
    if suite not in SUITE_KEY_LEN:
        raise FrameFormatError(f"aesgcm serde: unknown suite 0x{suite:02x}")
    if not 0 <= key_version <= MAX_KEY_VERSION:
        raise ValueError(
            f"aesgcm serde: key version must be in [0, {MAX_KEY_VERSION}], got {key_version}"
        )
    if not 0 <= plaintext_length <= MAX_PLAINTEXT_LEN:
        raise ValueError(
            f"aesgcm serde: plaintext of {plaintext_length} bytes exceeds the AES-GCM "
            f"limit of {MAX_PLAINTEXT_LEN} bytes per frame"
        )
    if len(iv) != IV_LEN:
        raise ValueError(f"aesgcm serde: IV must be {IV_LEN} bytes, got {len(iv)}")


def unpack_fields(layout: struct.Struct, version: int, frame: memoryview) -> tuple[Any, ...]:
    """Unpack the header at the start of ``frame`` with ``layout`` (version byte first, suite
    byte second) and return its fields after the version byte; ``FrameFormatError`` for a
    truncated frame, another version or an unknown suite."""
    if len(frame) < layout.size:
        raise FrameFormatError(
            f"aesgcm serde: truncated frame: {len(frame)} bytes cannot hold the "
            f"{layout.size}-byte version-{version} header"
        )
    found, *fields = layout.unpack_from(frame)
    if found != version:
        raise FrameFormatError(f"aesgcm serde: not a version-{version} frame (version {found})")
    suite = fields[0]
    if suite not in SUITE_KEY_LEN:
        raise FrameFormatError(
            f"aesgcm serde: unknown suite 0x{suite:02x} in version-{version} frame header "
            "(known: 0x01 AES-128-GCM, 0x02 AES-256-GCM)"
        )
    return tuple(fields)


def _length_prefixed(data: bytes) -> bytes:
    return _U32.pack(len(data)) + data


def associated_data(header: bytes, key: ObjectKeyLike) -> bytes:
    """The associated data that binds a frame with ``header`` to the object ``key``::

        header || u32 len(model_name UTF-8) || model_name UTF-8 || i64 kv_rank
        || u64 object_group_id || u32 len(chunk_hash) || chunk_hash
        || u32 len(cache_salt UTF-8) || cache_salt UTF-8
    """
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
    header: BoundHeader,
    plaintext: memoryview,
    out: memoryview,
    key: ObjectKeyLike,
) -> int:
    """Encrypt ``plaintext`` straight into ``out`` as the frame ``header`` describes, bound to
    ``key``; return the frame size."""
    if header.plaintext_length != len(plaintext):
        raise ValueError(
            f"aesgcm serde: header says {header.plaintext_length} plaintext bytes, "
            f"got {len(plaintext)}"
        )
    size = header.frame_size
    if len(out) < size:
        raise FrameFormatError(
            f"aesgcm serde: destination holds {len(out)} bytes, a version-{header.version} "
            f"frame of {len(plaintext)} plaintext bytes needs {size}"
        )
    header_bytes = header.pack()
    header_len = header.header_len
    out[:header_len] = header_bytes
    aead.encrypt_into(
        header.iv, plaintext, associated_data(header_bytes, key), out[header_len:size]
    )
    return size


def check_read(header: _Header, frame: memoryview, plaintext_len: int) -> _Header:
    """Return ``header``, parsed from ``frame``, once it is known to describe a whole frame that
    decrypts to ``plaintext_len`` bytes; ``FrameFormatError`` for a wrong length or a
    truncated frame."""
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
    aead: AESGCM, header: BoundHeader, frame: memoryview, out: memoryview, key: ObjectKeyLike
) -> None:
    """Authenticate and decrypt ``frame`` (its ``header`` checked by :func:`check_read`) bound
    to ``key`` straight into ``out``. On ``InvalidTag`` ``out`` holds unauthenticated bytes: the
    caller must wipe it."""
    header_len = header.header_len
    aad = associated_data(bytes(frame[:header_len]), key)
    body = frame[header_len : header.frame_size]
    aead.decrypt_into(header.iv, body, aad, out)
