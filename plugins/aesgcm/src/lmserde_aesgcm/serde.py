"""The aesgcm serializer and deserializer: encrypt straight into the frame, decrypt straight into
the destination, wipe the destination on any failure, and tell "not my key" from "damaged"."""

from __future__ import annotations

import ctypes
import hmac
import os
from collections.abc import Callable
from typing import Any

from cryptography.exceptions import InvalidTag
from lmserde import Deserializer, MemoryLayoutDesc, MemoryObj, ObjectKey, Serializer
from lmserde.tenant_keys import KeyProvider, key_withdrawn

from lmserde_aesgcm import frame_v1, frame_v2, frame_v3
from lmserde_aesgcm.cipher_cache import CipherCache, CipherEntry
from lmserde_aesgcm.errors import (
    ForeignKeyError,
    FrameAuthenticationError,
    FrameFormatError,
    KeyMismatchError,
    KeyUnavailableError,
    UnattributedAuthenticationError,
    UnknownKeyVersionError,
    UnknownTenantError,
    WithdrawnKeyError,
)

__all__ = [
    "FRAME_VERSIONS",
    "DEFAULT_FRAME_VERSION",
    "frame_overhead",
    "AesGcmSerializer",
    "AesGcmDeserializer",
]

FRAME_VERSIONS = (1, 2, 3)
DEFAULT_FRAME_VERSION = 3
_AES_BITS = (128, 256)
_OVERHEADS = {1: frame_v1.OVERHEAD, 2: frame_v2.OVERHEAD, 3: frame_v3.OVERHEAD}


def frame_overhead(frame_version: int) -> int:
    """Bytes a frame adds to its plaintext: 29 for version 1, 42 for version 2, 50 for 3."""
    try:
        return _OVERHEADS[frame_version]
    except (KeyError, TypeError):
        raise ValueError(
            f"aesgcm serde: frame_version must be 1, 2 or 3, got {frame_version!r}") from None


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

    ``frame_version=3`` (default) binds the frame to its object key and names the key version
    and the key id; ``frame_version=2`` the same without the key id; ``frame_version=1`` writes
    LMCache's frame. Each frame gets a fresh random 96-bit IV, so the same object encrypts
    differently every time. The estimate is exact: plaintext + 50 (v3), + 42 (v2) or + 29 (v1).
    ``iv_source`` exists for test vectors only. ``authenticates_output`` is true for frame
    versions 2 and 3 (authenticated and bound to the object key), false for version 1 (LMCache's
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
        # Version-2 and -3 frames are authenticated and bound to the object key (AAD): a damaged
        # or moved frame fails deserialize, so a stored-object frame may skip its checksum.
        self.authenticates_output = frame_version != 1
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
        entry = self._ciphers.entry(tenant, version, self._key_len)
        iv = self._iv_source()
        if self._frame_version == 3:
            header3 = frame_v3.FrameV3Header(self._suite, version, entry.key_id, len(plaintext),
                                             iv)
            return frame_v3.seal_into(entry.aead, header3, plaintext, out, key)
        if self._frame_version == 1:
            return frame_v1.seal_into(entry.aead, iv, plaintext, out)
        header = frame_v2.FrameV2Header(self._suite, version, len(plaintext), iv)
        return frame_v2.seal_into(entry.aead, header, plaintext, out, key)


class AesGcmDeserializer(Deserializer):
    """Authenticates and decrypts a frame of any version into ``dst`` (``get_size()`` bytes).

    Version-1 frames are decrypted with the tenant's current key at ``aes_bits``; version-2 and
    -3 frames with the key version and suite their header names. Any failure leaves ``dst``
    zeroed, so unauthenticated plaintext never stays in the destination. Bytes after the frame
    are ignored. What a failure raises says what the reader knows about the bytes:

    * ``ValueError`` (damaged: the serde wrapper deletes the object): a malformed, truncated or
      unknown-version frame (``FrameFormatError``); a version-3 frame that fails authentication
      although its key id is this reader's (``FrameAuthenticationError``).
    * :class:`~lmserde_aesgcm.ForeignKeyError`, an ``lmserde.ForeignObjectError`` (someone
      else's: kept, a miss): a tenant or key version the provider does not hold, a version-3 key
      id that is not this reader's (``KeyMismatchError``, before any decryption), or an
      authentication failure of a frame that names no key identity (versions 1 and 2:
      ``UnattributedAuthenticationError``). A tenant the provider does not hold, or a version it
      retired, is the subclass ``WithdrawnKeyError`` (also an ``lmserde.UnkeyedObjectError``:
      reason ``unkeyed``). For version 1 that is sound and loses nothing: a
      framed version-1 object carries the stored-object frame's payload checksum (version 1
      does not ``authenticates_output``), which the serde wrapper confirms before it weighs this
      error (a mismatch is ``checksum`` damage, deleted); bytes that are exactly what their
      writer wrote and still fail the tag were written under another key. Unframed, nothing
      proves damage either.
    * :class:`~lmserde_aesgcm.KeyUnavailableError`, a ``RuntimeError`` (an outage: kept): the
      provider failed in any other way.
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
        except BaseException:
            _wipe(out)
            raise

    def _open(self, frame: memoryview, out: memoryview, key: ObjectKey) -> None:
        if len(frame) == 0:
            raise FrameFormatError(
                "aesgcm serde: malformed frame or unknown version: the source is empty"
            )
        version = frame[0]
        tenant = key.cache_salt
        if version == frame_v3.VERSION:
            header3 = frame_v3.read_header(frame, len(out))
            entry = self._entry(tenant, header3.key_version, header3.key_len)
            if not hmac.compare_digest(entry.key_id, header3.key_id):
                raise KeyMismatchError(_mismatch_message(key, header3, entry))
            try:
                frame_v3.open_into(entry.aead, header3, frame, out, key)
            except InvalidTag:
                raise FrameAuthenticationError(_auth_failure_message(key)) from None
        elif version == frame_v2.VERSION:
            header = frame_v2.read_header(frame, len(out))
            entry = self._entry(tenant, header.key_version, header.key_len)
            try:
                frame_v2.open_into(entry.aead, header, frame, out, key)
            except InvalidTag:
                raise UnattributedAuthenticationError(_unattributed_message(key, 2)) from None
        elif version == frame_v1.VERSION:
            frame_v1.check_frame(frame, len(out))
            entry = self._entry(tenant, None, self._key_len)
            try:
                frame_v1.open_into(entry.aead, frame, out)
            except InvalidTag:
                raise UnattributedAuthenticationError(_unattributed_message(key, 1)) from None
        else:
            raise FrameFormatError(
                f"aesgcm serde: malformed frame or unknown version: version byte 0x{version:02x} "
                "(known: 0x01, 0x02, 0x03)"
            )

    def _entry(self, tenant: str, version: int | None, key_len: int) -> CipherEntry:
        """The AEAD and key id for ``tenant`` at ``version`` (``None``: the provider's current
        version, for version-1 frames, which name none).

        The provider saying it does not hold the tenant (``UnknownTenantError``), or the
        ``version`` a frame names (``UnknownKeyVersionError``), is :class:`ForeignKeyError`: the
        object was written with key material this reader lacks, and is someone else's. Any other
        failure is :class:`KeyUnavailableError` (an outage), including ``ValueError``s: KMS
        clients raise them for garbled answers too (a gateway's HTML error page fails
        ``json.loads``). Neither is a ``ValueError``, so the object is kept either way.
        """
        try:
            current = self._ciphers.current(tenant) if version is None else version
            return self._ciphers.entry(tenant, current, key_len)
        except UnknownTenantError as exc:
            raise WithdrawnKeyError(
                f"aesgcm serde: key provider {self._ciphers.provider.describe()} holds no key "
                f"for tenant {tenant!r}: the object was written with key material this reader "
                f"does not hold (left in place): {exc}") from exc
        except UnknownKeyVersionError as exc:
            if version is None:  # the provider's own current version: not the bytes' doing
                raise self._unavailable(tenant, exc) from exc
            foreign = WithdrawnKeyError if key_withdrawn(exc) else ForeignKeyError
            raise foreign(
                f"aesgcm serde: the frame names key version {version} of tenant {tenant!r}, "
                f"which key provider {self._ciphers.provider.describe()} does not hold: "
                f"written with key material this reader does not hold (left in place): {exc}"
            ) from exc
        except Exception as exc:  # unreachable KMS, garbled answer, bad secret
            raise self._unavailable(tenant, exc) from exc

    def _unavailable(self, tenant: str, exc: Exception) -> KeyUnavailableError:
        return KeyUnavailableError(
            f"aesgcm serde: no key for tenant {tenant!r} from key provider "
            f"{self._ciphers.provider.describe()}: {type(exc).__name__}: {exc}")


def _chunk(key: Any) -> str:
    return bytes(key.chunk_hash).hex()[:32]


def _auth_failure_message(key: Any) -> str:
    return (
        f"aesgcm serde: frame failed authentication for chunk {_chunk(key)} of tenant "
        f"{key.cache_salt!r} under the key that wrote it: tampered or damaged bytes, or a frame "
        "moved from another object key"
    )


def _mismatch_message(key: Any, header: frame_v3.FrameV3Header, entry: CipherEntry) -> str:
    return (
        f"aesgcm serde: the frame for chunk {_chunk(key)} of tenant {key.cache_salt!r} was "
        f"written with key id {header.key_id.hex()} (key version {header.key_version}); this "
        f"reader's key for that version has key id {entry.key_id.hex()}: another master key or "
        "keyring wrote it (not this reader's to decrypt; left in place)"
    )


def _unattributed_message(key: Any, version: int) -> str:
    return (
        f"aesgcm serde: version-{version} frame for chunk {_chunk(key)} of tenant "
        f"{key.cache_salt!r} failed authentication; it names no key id, so another key and "
        "damaged bytes cannot be told apart (left in place; version-3 frames name their key)"
    )
