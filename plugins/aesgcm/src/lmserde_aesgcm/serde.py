"""The aesgcm serializer and deserializer: encrypt straight into the frame, decrypt straight into
the destination, wipe the destination on any failure."""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from lmserde import Deserializer, MemoryLayoutDesc, MemoryObj, ObjectKey, Serializer

from lmserde_aesgcm import frame_v1, frame_v2
from lmserde_aesgcm.cipher_cache import CipherCache
from lmserde_aesgcm.errors import (
    FrameAuthenticationError,
    FrameFormatError,
    KeyUnavailableError,
    UnknownKeyVersionError,
)
from lmserde_aesgcm.key_provider import KeyProvider

__all__ = [
    "FRAME_VERSIONS",
    "DEFAULT_FRAME_VERSION",
    "frame_overhead",
    "AesGcmSerializer",
    "AesGcmDeserializer",
]

FRAME_VERSIONS = (1, 2)
DEFAULT_FRAME_VERSION = 2
_AES_BITS = (128, 256)


def frame_overhead(frame_version: int) -> int:
    """Bytes a frame adds to its plaintext: 29 for version 1, 42 for version 2."""
    if frame_version == 1:
        return frame_v1.OVERHEAD
    if frame_version == 2:
        return frame_v2.OVERHEAD
    raise ValueError(f"aesgcm serde: frame_version must be 1 or 2, got {frame_version!r}")


def _key_len(aes_bits: int) -> int:
    if aes_bits not in _AES_BITS:
        raise ValueError(f"aes_bits must be one of (128, 256), got {aes_bits!r}")
    return aes_bits // 8


def _byte_view(obj: MemoryObj, role: str) -> memoryview:
    """``obj``'s logical bytes (``get_size()``) as a flat, format-"B" view (no copy)."""
    view = memoryview(obj.byte_array).cast("B")
    size = obj.get_size()
    if len(view) < size:
        raise ValueError(f"aesgcm serde: {role} byte_array holds {len(view)} bytes, fewer than "
                         f"its get_size() of {size}")
    return view[:size]


def _wipe(view: memoryview) -> None:
    """Zero every byte of the writable view ``view``."""
    n = len(view)
    if n:
        ctypes.memset(ctypes.addressof(ctypes.c_char.from_buffer(view)), 0, n)


def _random_iv() -> bytes:
    return os.urandom(frame_v2.IV_LEN)


class AesGcmSerializer(Serializer):
    """Encrypts an object's bytes (``src.byte_array``, ``get_size()`` bytes) into one frame.

    ``frame_version=2`` (default) binds the frame to its object key and names the key version;
    ``frame_version=1`` writes LMCache's frame. Each frame gets a fresh random 96-bit IV, so the
    same object encrypts differently every time. The estimate is exact: plaintext + 42 (v2) or
    + 29 (v1). ``iv_source`` exists for test vectors only. ``authenticates_output`` is true for
    frame version 2 (authenticated and bound to the object key), false for version 1 (LMCache's
    frame does not bind the key).
    """

    def __init__(
        self,
        key_provider: KeyProvider | CipherCache,
        *,
        aes_bits: int = 128,
        frame_version: int = DEFAULT_FRAME_VERSION,
        iv_source: Callable[[], bytes] = _random_iv,
    ) -> None:
        self._key_len = _key_len(aes_bits)
        self._overhead = frame_overhead(frame_version)
        self._frame_version = frame_version
        # Version-2 frames are authenticated and bound to the object key (AAD): a damaged or
        # moved frame fails deserialize, so a stored-object frame may skip its checksum.
        self.authenticates_output = frame_version == 2
        self._suite = frame_v2.suite_for_key_len(self._key_len)
        self._ciphers = (
            key_provider if isinstance(key_provider, CipherCache) else CipherCache(key_provider)
        )
        self._iv_source = iv_source

    @property
    def frame_version(self) -> int:
        return self._frame_version

    @property
    def aes_bits(self) -> int:
        return self._key_len * 8

    def __repr__(self) -> str:
        return (f"AesGcmSerializer(frame_version={self._frame_version}, aes_bits={self.aes_bits}, "
                f"ciphers={self._ciphers!r})")

    def estimate_serialized_size(self, layout_desc: MemoryLayoutDesc) -> int:
        return int(layout_desc.nbytes) + self._overhead

    def serialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> int:
        plaintext = _byte_view(src, "src")
        out = memoryview(dst.byte_array).cast("B")
        tenant = key.cache_salt
        version = self._ciphers.current(tenant)
        aead = self._ciphers.get(tenant, version, self._key_len)
        iv = self._iv_source()
        if self._frame_version == 1:
            return frame_v1.seal_into(aead, iv, plaintext, out)
        header = frame_v2.FrameV2Header(self._suite, version, len(plaintext), iv)
        return frame_v2.seal_into(aead, header, plaintext, out, key)


class AesGcmDeserializer(Deserializer):
    """Authenticates and decrypts a frame of either version into ``dst`` (``get_size()`` bytes).

    Version-1 frames are decrypted with the tenant's current key at ``aes_bits``; version-2 frames
    with the key version and suite their header names. Any failure (malformed, truncated, unknown
    version, wrong key or tenant, tampered or moved frame) raises and leaves ``dst`` zeroed, so
    unauthenticated plaintext never stays in the destination. Bytes after the frame are ignored.
    Failures about the bytes raise ``ValueError`` subclasses; a key the provider cannot supply
    raises :class:`~lmserde_aesgcm.KeyUnavailableError` (a ``RuntimeError``), so that the serde
    wrapper keeps the object through a key-service outage instead of deleting it.
    """

    def __init__(
        self, key_provider: KeyProvider | CipherCache, *, aes_bits: int = 128
    ) -> None:
        self._key_len = _key_len(aes_bits)
        self._ciphers = (
            key_provider if isinstance(key_provider, CipherCache) else CipherCache(key_provider)
        )

    def __repr__(self) -> str:
        return f"AesGcmDeserializer(aes_bits={self._key_len * 8}, ciphers={self._ciphers!r})"

    def deserialize(self, src: MemoryObj, dst: MemoryObj, key: ObjectKey) -> None:
        out = _byte_view(dst, "dst")
        try:
            self._open(_byte_view(src, "src"), out, key)
        except BaseException as exc:
            _wipe(out)
            if isinstance(exc, InvalidTag) and not isinstance(exc, FrameAuthenticationError):
                raise FrameAuthenticationError(_auth_failure_message(key)) from None
            raise

    def _open(self, frame: memoryview, out: memoryview, key: ObjectKey) -> None:
        if len(frame) == 0:
            raise FrameFormatError(
                "aesgcm serde: malformed frame or unknown version: the source is empty"
            )
        version = frame[0]
        tenant = key.cache_salt
        if version == frame_v1.VERSION:
            frame_v1.check_frame(frame, len(out))
            aead = self._cipher(tenant, None, self._key_len)
            frame_v1.open_into(aead, frame, out)
        elif version == frame_v2.VERSION:
            header = frame_v2.read_header(frame, len(out))
            aead = self._cipher(tenant, header.key_version, header.key_len)
            frame_v2.open_into(aead, header, frame, out, key)
        else:
            raise FrameFormatError(
                f"aesgcm serde: malformed frame or unknown version: version byte 0x{version:02x} "
                "(known: 0x01, 0x02)"
            )

    def _cipher(self, tenant: str, version: int | None, key_len: int) -> AESGCM:
        """The AEAD for ``tenant`` at ``version`` (``None``: the provider's current version).

        Any failure to get the key is :class:`KeyUnavailableError` (not about the bytes), except
        :class:`UnknownKeyVersionError` for a ``version`` read from a frame: the provider says it
        does not hold the version the bytes name, which will not change, so it propagates (a
        ``ValueError``) and the object is deleted. Other ``ValueError``s are not trusted to mean
        that: KMS clients raise them for garbled answers too (a gateway's HTML error page fails
        ``json.loads``), and deleting on those would wipe the tier during an outage.
        """
        try:
            current = self._ciphers.current(tenant) if version is None else version
            return self._ciphers.get(tenant, current, key_len)
        except UnknownKeyVersionError as exc:
            if version is None:  # the provider's own current version: not the bytes' doing
                raise self._unavailable(tenant, exc) from exc
            raise
        except Exception as exc:  # unreachable KMS, garbled answer, unknown tenant, bad secret
            raise self._unavailable(tenant, exc) from exc

    def _unavailable(self, tenant: str, exc: Exception) -> KeyUnavailableError:
        return KeyUnavailableError(
            f"aesgcm serde: no key for tenant {tenant!r} from key provider "
            f"{self._ciphers.provider.describe()}: {type(exc).__name__}: {exc}")


def _auth_failure_message(key: Any) -> str:
    return (
        f"aesgcm serde: frame failed authentication for chunk "
        f"{bytes(key.chunk_hash).hex()[:32]} of tenant {key.cache_salt!r}: wrong key or tenant, "
        "tampered bytes, or a frame moved from another object key"
    )
