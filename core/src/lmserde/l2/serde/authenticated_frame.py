"""The authenticated stored-object frame (frame version 2): a keyed MAC instead of the checksum.

With a frame key (adapter option ``frame_key_path`` or ``frame_keyring_path``,
:mod:`lmserde.l2.serde.frame_keys`) the serde wrapper writes this frame instead of version 1.
Its header is 128 bytes (the payload stays 64-byte aligned); integers are little-endian::

    offset size field
     0      4   magic  b"LMSF"
     4      1   frame version (2)
     5      1   flags: bit 1 = layout stored inline, bit 2 = key record present (hidden names;
                bit 0, v1's checksum flag, is never set)
     6      1   MAC suite: 1 = AES-256-GMAC under a per-object key
     7      1   reserved, zero
     8      8   payload length in bytes
    16      4   key version (of the object key's tenant) that keyed the MAC
    20      4   key record length (bit 2 set), else zero
    24      8   config fingerprint (as version 1)
    32      8   key fingerprint (as version 1)
    40     20   layout (as version 1)
    60      4   header checksum: low 32 bits of XXH3-64 of bytes 0..59
    64     16   object salt: random, per object
    80     16   MAC tag
    96     32   reserved, zero
   128   1024   only with hidden names (bit 2): the encrypted key record, zero-padded
                (:mod:`~lmserde.l2.serde.hidden_names`); the payload then starts at 1152

The MAC, with the tenant's MAC key at the header's key version (HKDF from the root key,
:mod:`~.frame_keys`)::

    object_key = HMAC-SHA256(tenant MAC key, "lmserde frame v2 object key" || object salt
                             || u32 len || key bytes || SHA-256(canonical config)
                             || u32 len || layout encoding)
    segment i  = bytes [64 MiB * i, 64 MiB * (i + 1)) of the stored object, its tag bytes zeroed
                 (the last segment shorter; n = the number of segments, at least 1)
    t_i        = AES-256-GCM(object_key, nonce = 4 zero bytes || u64 i,
                             plaintext = empty, associated data = segment i)
    tag        = AES-256-GCM(object_key, nonce = 4 bytes 0xff || u64 n,
                             plaintext = empty, associated data = t_0 || ... || t_(n-1))

The key bytes are every field of the object key (``stored_frame.key_bytes``), the layout
encoding the full one (not the 20-byte field): the object key binds tenant (through the tenant's
key), model, rank, group, chunk hash, config and layout in full, not only their 64-bit
fingerprints, which a forger could collide; the GMACs cover the header and the payload. Every
object has its own GCM key (a fresh random 128-bit salt), and within an object every GMAC has
its own nonce (segment index; the final one another prefix and the segment count, so segments
cannot be reordered, dropped or added). The MAC replaces the payload checksum: one keyed pass
over the object, read in place (the header sits right before the payload), its segments on the
checksum threads in parallel while the adapter writes (store) or the serde decodes (load).
AES-GMAC was chosen by measurement (``benchmarks/mac_candidates.py``;
``docs/formats/stored-object.md``).

Refusals, in order: a header cut short or failing its own checksum (``format``) or of another
length than stored (``length``) is damage, as in version 1; no lmserde magic, another frame
version, unknown flags, suite or reserved bytes, or a key version newer than every one the
frame key holds for the tenant (not yet distributed) is ``foreign``; a tenant or key version the
frame key does not (or no longer) hold (forgotten, retired) is ``unkeyed``, which ``lmserde scrub
--delete-unkeyed`` reclaims; another config, key or
layout is ``config``/``key``/``layout``; a version-1 (unauthenticated) frame, or a MAC that does
not verify, is ``auth``. ``auth`` is "not mine" (kept; the next store of the key replaces it): a
failed MAC cannot tell bit rot from a forgery, or from a genuine object another fleet wrote
under another frame key with the same version number, and deleting the latter would destroy an
object this reader merely cannot read. The fingerprints and the header checksum only sort
accidents into the right reason; they give no protection.
"""

from __future__ import annotations

import ctypes
import hashlib
import hmac
import os
import struct
from collections.abc import Callable, Mapping
from typing import Any

import torch

from lmserde.keys import ObjectKey
from lmserde.l2.serde.frame_keys import FrameKeys, KeyNotHeld
from lmserde.l2.serde.frame_mac import start_mac
from lmserde.l2.serde.hidden_names import NameHider
from lmserde.l2.serde.payload_checksum import CHECKSUM_SEGMENT_BYTES, xxh3_64
from lmserde.l2.serde.stored_frame import (
    FRAME_HEADER_BYTES,
    FRAME_MAGIC,
    FrameHeader,
    FrameRejected,
    ObjectFramer,
    PendingHeader,
    _canonical_json,
    _get_header,
    check_header,
    encode_layout,
    key_bytes,
    key_fingerprint,
)
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj, TensorMemoryObj

__all__ = ["AUTH_FRAME_VERSION", "AUTH_HEADER_BYTES", "KEY_RECORD_REGION", "MAC_SUITE_GMAC",
           "TAG_BYTES", "AuthenticatedFramer", "parse_auth_header"]

AUTH_FRAME_VERSION = 2
AUTH_HEADER_BYTES = 128
MAC_SUITE_GMAC = 1
SALT_BYTES = 16
TAG_BYTES = 16
_SALT_AT = FRAME_HEADER_BYTES
_TAG_AT = _SALT_AT + SALT_BYTES
_RESERVED_AT = _TAG_AT + TAG_BYTES
_ZERO_TAIL = bytes(AUTH_HEADER_BYTES - _RESERVED_AT)
_ZERO_TAG = bytes(TAG_BYTES)
_OBJECT_KEY_LABEL = b"lmserde frame v2 object key"

_FLAG_LAYOUT_INLINE = 0x02
_FLAG_KEY_RECORD = 0x04
_KNOWN_FLAGS = _FLAG_LAYOUT_INLINE | _FLAG_KEY_RECORD
#: Room for the encrypted key record of a hidden-names frame (after the 128 header bytes).
KEY_RECORD_REGION = 1024
_HEAD = struct.Struct("<4sBBBBQIIQQ20s")  # bytes 0..59
_HEADER_CHECKSUM = struct.Struct("<I")
_U32 = struct.Struct("<I")
assert _HEAD.size + _HEADER_CHECKSUM.size == FRAME_HEADER_BYTES


def _head(payload_length: int, key_version: int, config_id: int, key: ObjectKey,
          layout_bytes: tuple[bytes, bool], record_length: int | None) -> bytes:
    """Bytes 0..63 of an authenticated header (``record_length``: of the key record, if any)."""
    field, inline = layout_bytes
    flags = ((_FLAG_LAYOUT_INLINE if inline else 0)
             | (_FLAG_KEY_RECORD if record_length is not None else 0))
    head = _HEAD.pack(FRAME_MAGIC, AUTH_FRAME_VERSION, flags, MAC_SUITE_GMAC, 0, payload_length,
                      key_version, record_length or 0, config_id, key_fingerprint(key), field)
    return head + _HEADER_CHECKSUM.pack(xxh3_64(head) & 0xFFFFFFFF)


def parse_auth_header(header: bytes | memoryview) -> tuple[FrameHeader, int, int | None]:
    """Parse and self-check an authenticated header (at least its first 64 bytes; salt, tag and
    reserved tail are the framer's): the header, its key version and the length of its key
    record (``None``: it has none). Raises
    :class:`FrameRejected`: ``auth`` for a version-1 frame (it carries no MAC), ``foreign`` for
    another magic, version, flags or suite, ``format`` for a short or self-inconsistent one."""
    if len(header) < FRAME_HEADER_BYTES:
        raise FrameRejected("format", f"object of {len(header)} bytes is shorter than the header")
    raw = bytes(header[:FRAME_HEADER_BYTES])
    (magic, version, flags, suite, reserved, length, key_version, reserved2, config_id, key_id,
     field) = _HEAD.unpack_from(raw)
    if magic != FRAME_MAGIC:
        raise FrameRejected("foreign", f"bad magic {magic!r} (not an lmserde stored object)")
    if version == 1:
        raise FrameRejected("auth", "a plain (version 1) frame, which carries no MAC; this "
                            "reader's frame key requires authenticated frames")
    if version != AUTH_FRAME_VERSION:
        raise FrameRejected("foreign", f"frame version {version} is not supported (this reader "
                            f"reads authenticated frames, version {AUTH_FRAME_VERSION})")
    (stored_check,) = _HEADER_CHECKSUM.unpack_from(raw, _HEAD.size)
    if stored_check != xxh3_64(raw[:_HEAD.size]) & 0xFFFFFFFF:
        raise FrameRejected("format", "header checksum mismatch")
    record = reserved2 if flags & _FLAG_KEY_RECORD else None
    if (flags & ~_KNOWN_FLAGS or suite != MAC_SUITE_GMAC or reserved
            or (record is None and reserved2) or (record or 0) > KEY_RECORD_REGION):
        raise FrameRejected("foreign", f"unknown flags 0x{flags:02x}, MAC suite {suite} or "
                            "reserved bytes (written by another frame revision)")
    inline = bool(flags & _FLAG_LAYOUT_INLINE)
    parsed = FrameHeader(payload_length=length, payload_checksum=None,
                         config_fingerprint=config_id, key_fingerprint=key_id,
                         layout_field=field if inline else field[:8], layout_inline=inline,
                         authenticated=True)
    return parsed, key_version, record


def _cpu_bytes(raw: torch.Tensor, what: str) -> None:
    if not (raw.is_cpu and raw.dtype == torch.uint8 and raw.dim() == 1
            and raw.is_contiguous()):
        raise ValueError(f"an authenticated frame is {what} in a contiguous CPU byte buffer only")


def _store_bytes(raw: torch.Tensor, offset: int, data: bytes) -> None:
    ctypes.memmove(raw.data_ptr() + offset, data, len(data))


class AuthenticatedFramer(ObjectFramer):
    """Frames of one serde configuration under a frame key: version 2 (see the module
    docstring). Same contract as :class:`~lmserde.l2.serde.stored_frame.ObjectFramer`, with a
    128-byte header; ``keys`` supplies the per-tenant MAC keys. Buffers must be contiguous CPU
    byte tensors (L1 temporaries are). Thread-safe."""

    def __init__(self, config: Mapping[str, Any], keys: FrameKeys,
                 names: NameHider | None = None) -> None:
        super().__init__(config, checksum=False)  # no XXH3 checksum: the MAC replaces it
        self._keys = keys
        self._names = names
        #: With hidden names (``names``) the encrypted key record follows the 128 header bytes.
        self.header_bytes = AUTH_HEADER_BYTES + (KEY_RECORD_REGION if names is not None else 0)
        self._zero_head = bytes(self.header_bytes)
        self._config_digest = hashlib.sha256(_canonical_json(config)).digest()
        self._layout_codes: dict[MemoryLayoutDesc, bytes] = {}

    @property
    def keys(self) -> FrameKeys:
        return self._keys

    @property
    def defers_heads(self) -> bool:
        """Always: the header's tag waits for the MAC over the payload."""
        return True

    def describe(self) -> str:
        """``"authenticated (AES-256-GMAC; <where the keys come from>)"``: no key material."""
        hidden = ", hidden names" if self._names is not None else ""
        return f"authenticated (AES-256-GMAC; {self._keys.describe()}){hidden}"

    def read_header(self, header: bytes | memoryview) -> FrameHeader:
        """Parse an authenticated header (:func:`parse_auth_header`)."""
        return parse_auth_header(header)[0]

    @property
    def names(self) -> NameHider | None:
        """The name hider of a hidden-names framer."""
        return self._names

    def payload_view(self, buffer: MemoryObj, bound: int) -> TensorMemoryObj:
        """A byte object over the payload region of ``buffer`` (at offset 128)."""
        return self._views.view(buffer, self.header_bytes, self.header_bytes + bound,
                                hashing=False)

    def _layout_code(self, layout: MemoryLayoutDesc) -> bytes:
        code = self._layout_codes.get(layout)
        if code is None:
            if len(self._layout_codes) >= self._LAYOUT_CACHE_LIMIT:
                self._layout_codes.clear()
            encoded = encode_layout(layout)
            code = self._layout_codes[layout] = _U32.pack(len(encoded)) + encoded
        return code

    def _object_key(self, mac_key: bytes, salt: bytes, key: ObjectKey, layout_code: bytes
                    ) -> bytes:
        packed = key_bytes(key)
        message = b"".join((_OBJECT_KEY_LABEL, salt, _U32.pack(len(packed)), packed,
                            self._config_digest, layout_code))
        return hmac.digest(mac_key, message, "sha256")

    def _prepare_seal(self, buffer: MemoryObj, payload_length: int, key: ObjectKey,
                      layout: MemoryLayoutDesc) -> Callable[[], Callable[[], bytes]]:
        """Check that the object can be sealed and narrow ``buffer`` to the frame; the returned
        ``begin()`` writes the header with a zero tag and starts the MAC, and gives the call
        that waits for the tag. :class:`KeyNotHeld` when the frame key has no key for the
        tenant; ``ValueError`` for a layout or key (hidden names: its record) that does not fit."""
        total = self.header_bytes + payload_length
        raw = buffer.raw_data
        _cpu_bytes(raw, "sealed")
        tenant = key.cache_salt
        version = self._keys.current_version(tenant)
        mac_key = self._keys.mac_key(tenant, version)
        salt = os.urandom(SALT_BYTES)
        record = None if self._names is None else self._names.seal_record(key, salt)
        if record is not None and len(record) > KEY_RECORD_REGION:
            raise ValueError(f"the key's record takes {len(record)} bytes, more than a hidden-"
                             f"names frame holds ({KEY_RECORD_REGION}): a model name or tenant "
                             "this long cannot be stored with hide_names")
        layout_field, layout_code = self._layout_field(layout), self._layout_code(layout)
        _store_bytes(raw, 0, self._zero_head)  # no stale header is ever there to be accepted
        buffer.set_used_size(total)

        def begin() -> Callable[[], bytes]:
            header = (_head(payload_length, version, self.config_id, key, layout_field,
                            None if record is None else len(record))
                      + salt + _ZERO_TAG + _ZERO_TAIL)
            if record is not None:
                header += record.ljust(KEY_RECORD_REGION, b"\0")
            _store_bytes(raw, 0, header)
            return start_mac(self._object_key(mac_key, salt, key, layout_code), raw, total)

        return begin

    def seal(self, buffer: MemoryObj, payload_length: int, key: ObjectKey,
             layout: MemoryLayoutDesc, *, checksum: int | None = None) -> None:
        """Write the authenticated header (the MAC computed here) and narrow ``buffer`` to the
        frame. ``checksum`` is ignored (the MAC replaces it). Raises :class:`KeyNotHeld` for a
        tenant the frame key holds no key for (nothing is stored then)."""
        tag = self._prepare_seal(buffer, payload_length, key, layout)()()
        _store_bytes(buffer.raw_data, _TAG_AT, tag)

    def seal_deferred(self, buffer: MemoryObj, payload_length: int, key: ObjectKey,
                      layout: MemoryLayoutDesc, *, checksum: int | None = None) -> PendingHeader:
        """Like :meth:`seal`, the header written and the MAC started by the returned head's
        ``start()`` (on the checksum threads, while the caller goes on). Every refusal
        (:class:`KeyNotHeld`, ``ValueError``) is raised here. Until the head's
        ``finish_head()`` the header in the buffer carries a zero tag, which no load accepts
        (``auth``)."""
        begin = self._prepare_seal(buffer, payload_length, key, layout)
        raw = buffer.raw_data
        return PendingHeader(begin, lambda tag: _store_bytes(raw, _TAG_AT, tag),
                             head_bytes=self.header_bytes)

    def open_deferred(self, buffer: MemoryObj, key: ObjectKey, layout: MemoryLayoutDesc | None,
                      bound: int, *, serde_hashes: bool = False,
                      ) -> tuple[TensorMemoryObj, Callable[[], None]]:
        """Verify the authenticated frame in ``buffer``; the MAC over an object of more than one
        checksum segment runs while the caller decodes, and ``confirm()`` raises
        :class:`FrameRejected` (``auth``) when it does not verify. Every header check (and the
        MAC of a smaller object) is done before this returns. The tag bytes in ``buffer`` are
        zeroed (the MAC is computed in place). ``serde_hashes`` is ignored."""
        size = buffer.get_size()
        raw = buffer.raw_data
        if size < FRAME_HEADER_BYTES:
            raise FrameRejected("format", f"object of {size} bytes is shorter than the header")
        header, version, record = parse_auth_header(_get_header(raw))
        if (record is None) != (self._names is None):
            if record is None:  # a hidden-names reader requires the key record
                raise FrameRejected("auth", "the frame carries no key record, which hidden "
                                    "names require")
            raise FrameRejected("foreign", "a hidden-names frame (this reader does not hide "
                                "names)")
        head_bytes = self.header_bytes
        if size < head_bytes:
            raise FrameRejected("format", f"object of {size} bytes is shorter than the "
                                f"{head_bytes}-byte authenticated header")
        _cpu_bytes(raw, "opened")
        extension = ctypes.string_at(raw.data_ptr() + _SALT_AT, AUTH_HEADER_BYTES - _SALT_AT)
        if extension[_RESERVED_AT - _SALT_AT:] != _ZERO_TAIL:
            raise FrameRejected("foreign", "non-zero reserved header bytes (written by another "
                                "frame revision)")
        salt = extension[:SALT_BYTES]
        stored_tag = extension[SALT_BYTES:SALT_BYTES + TAG_BYTES]
        layout_bytes = None if layout is None else self._layout_field(layout)
        check_header(header, stored_payload_bytes=size - head_bytes, payload_bound=bound,
                     config_id=self.config_id, key=key, layout_bytes=layout_bytes)
        try:
            mac_key = self._keys.mac_key(key.cache_salt, version)
        except KeyNotHeld as exc:  # forgotten tenant / retired version: unkeyed; newer: foreign
            raise FrameRejected("unkeyed" if exc.withdrawn else "foreign",
                                f"key version {version}: {exc}") from None
        except Exception as exc:  # a provider that fails: not a verdict on the bytes, not damage
            raise FrameRejected("foreign", f"the frame key provider failed for key version "
                                f"{version}: {type(exc).__name__}") from None
        layout_code = (self._layout_code(layout) if layout is not None
                       else self._recorded_layout_code(header))
        object_key = self._object_key(mac_key, salt, key, layout_code)
        _store_bytes(raw, _TAG_AT, _ZERO_TAG)
        pending = start_mac(object_key, raw, size)
        view = self._views.view(buffer, head_bytes, size, hashing=False)

        def confirm() -> None:
            if not hmac.compare_digest(pending(), stored_tag):
                raise FrameRejected("auth", "the MAC does not verify under the frame key")

        if size <= CHECKSUM_SEGMENT_BYTES:
            confirm()  # already computed: refuse before anything is decoded
            return view, _verified
        return view, confirm

    def read_key_record(self, head: bytes, hidden: ObjectKey) -> ObjectKey:
        """The real key in the key record of a hidden-names frame whose first
        :attr:`header_bytes` bytes are ``head``, stored under ``hidden``. ``ValueError`` (or
        :class:`FrameRejected`) when it is none, or not under this names key. The record is
        authenticated by its own encryption; the frame's MAC is checked on load."""
        if self._names is None:
            raise ValueError("this framer does not hide names")
        _header, _version, record = parse_auth_header(head)
        if record is None or len(head) < AUTH_HEADER_BYTES + record:
            raise ValueError("the frame carries no key record")
        salt = head[_SALT_AT:_SALT_AT + SALT_BYTES]
        return self._names.open_record(head[AUTH_HEADER_BYTES:AUTH_HEADER_BYTES + record], salt,
                                       hidden)

    def _recorded_layout_code(self, header: FrameHeader) -> bytes:
        """The layout encoding for a MAC check without an expected layout (offline scrubbing):
        the recorded one when inline; a layout stored as a digest cannot be checked then."""
        layout = header.layout()
        if layout is None:
            raise FrameRejected("layout", "the layout is stored as a digest: its MAC can only be "
                                "checked against an expected layout")
        return self._layout_code(layout)


def _verified() -> None:
    """The ``confirm()`` of an object whose MAC was checked before decoding."""
