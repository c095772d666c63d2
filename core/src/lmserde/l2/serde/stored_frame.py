"""The stored-object frame: a 64-byte header the serde wrapper writes in front of every object.

The header says what wrote the payload and for which key, so that a load can refuse bytes that
are not the right ones before any serde decodes them. All integers are little-endian::

    offset size field
     0      4   magic  b"LMSF"
     4      1   frame version (1)
     5      1   flags: bit 0 = payload checksum present, bit 1 = layout stored inline
     6      2   reserved, zero
     8      8   payload length in bytes
    16      8   payload checksum (0 when bit 0 is clear): XXH3-64 of the payload, or for payloads
                over 4 MiB the XXH3-64 of the XXH3-64s of its 4 MiB segments
    24      8   config fingerprint: XXH3-64 of the serde's canonical config (``get_config()``)
    32      8   key fingerprint: XXH3-64 of the object key's fields
    40     20   layout: inline encoding (bit 1 set) or the XXH3-64 of that encoding, zero-padded
    60      4   header checksum: low 32 bits of XXH3-64 of bytes 0..59

The payload (the serde's output) follows at offset 64, so it stays 64-byte aligned. Every check
raises :class:`FrameRejected` with a ``reason`` (:data:`REJECT_REASONS`); the wrapper turns it
into a miss for that key, and deletes the object only for a reason that proves it damaged
(:data:`DAMAGE_REASONS`); an object another reader wrote (:data:`NOT_MINE_REASONS`) is left in
place. The fingerprints detect accidents (a moved file, a changed config,
bit rot), not an adversary who can rewrite the file: against tampering, an adapter's frame key
makes the wrapper write the authenticated frame (version 2,
:mod:`lmserde.l2.serde.authenticated_frame`), and an authenticating serde (aesgcm frame v2/v3)
checks its own bytes, which is why such a serde may skip the payload checksum.

XXH3-64 (the ``xxhash`` package, bindings of the reference C implementation) was chosen by
measurement over CRC32C and CRC32: see ``docs/formats/stored-object.md``.

This module is over 400 lines because the byte format (header, layout encoding, checks) and its
one codec (``ObjectFramer``) must change together; the payload checksum lives in
:mod:`lmserde.l2.serde.payload_checksum`.
"""

from __future__ import annotations

import ctypes
import functools
import json
import struct
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import torch

from lmserde import frame_checksum
from lmserde.frame_checksum import FramedPayload
from lmserde.keys import ObjectKey
from lmserde.l2.serde.payload_checksum import (
    CHECKSUM_SEGMENT_BYTES,
    payload_checksum,
    start_payload_checksum,
    tensor_bytes,
    xxh3_64,
    xxh3_of_tensor,
)
from lmserde.l2.serde.payload_views import PayloadViews
from lmserde.layout import MemoryLayoutDesc
from lmserde.memory import MemoryObj, TensorMemoryObj

__all__ = [
    "FRAME_MAGIC",
    "FRAME_VERSION",
    "FRAME_HEADER_BYTES",
    "DEFAULT_MAX_OBJECT_BYTES",
    "CHECKSUM_SEGMENT_BYTES",
    "REJECT_REASONS",
    "DAMAGE_REASONS",
    "NOT_MINE_REASONS",
    "FrameRejected",
    "FrameHeader",
    "config_fingerprint",
    "key_fingerprint",
    "key_bytes",
    "encode_layout",
    "decode_layout",
    "payload_checksum",
    "tensor_bytes",
    "start_payload_checksum",
    "layout_field",
    "build_header",
    "parse_header",
    "check_header",
    "stored_config_fingerprint",
    "ObjectFramer",
    "PendingHeader",
]

FRAME_MAGIC = b"LMSF"
FRAME_VERSION = 1
FRAME_HEADER_BYTES = 64

#: The largest stored object a walk over the storage reads back (4 GiB: a Llama-3-405B chunk of
#: 2,048 tokens in bf16 is 1 GiB): ``lmserde scrub``'s default ``--max-object-bytes``, and the
#: bound on the objects a hidden-names listing reads its key records from. A bigger one is never
#: read (no buffer of its size is allocated).
DEFAULT_MAX_OBJECT_BYTES = 4 << 30

#: Why a stored object was refused (``decode``: the frame was fine, the serde could not decode;
#: ``foreign``: not an object this reader can read — no lmserde frame, another frame version, or
#: key material the serde does not hold; ``unkeyed``: key material its key provider no longer holds,
#: a forgotten tenant or a retired key version; ``auth``: an authenticated frame's MAC does not
#: verify under the frame key, or a frame lacks the MAC its reader's frame key requires — see
#: :mod:`lmserde.l2.serde.authenticated_frame`).
REJECT_REASONS = ("format", "length", "config", "key", "layout", "checksum", "decode", "foreign",
                  "unkeyed", "auth")

#: Refusals that prove the object damaged: a header that fails its own checksum or is cut short,
#: a payload of another length than its header says, a payload checksum mismatch, bytes the serde
#: refuses under a frame that vouched for config and key. Only these are deleted by a load.
DAMAGE_REASONS = frozenset({"format", "length", "checksum", "decode"})

#: Refusals that say "not mine": the object may be intact and another reader's (another serde
#: configuration, key, layout, frame version or key material). A miss, never a deletion; a
#: store of the key replaces it (:mod:`lmserde.l2.contract.replacing_store`).
#: ``auth`` is one of them: a MAC that does not verify cannot tell bit rot from a forgery or from
#: a genuine object written under another frame key of the same version number.
NOT_MINE_REASONS = frozenset({"config", "key", "layout", "foreign", "unkeyed", "auth"})
assert set(REJECT_REASONS) == DAMAGE_REASONS | NOT_MINE_REASONS
assert not DAMAGE_REASONS & NOT_MINE_REASONS

FLAG_CHECKSUM = 0x01
FLAG_LAYOUT_INLINE = 0x02
_KNOWN_FLAGS = FLAG_CHECKSUM | FLAG_LAYOUT_INLINE

_HEAD = struct.Struct("<4sBBHQQQQ20s")  # bytes 0..59
_LAYOUT_FIELD = 20
_HEADER_CHECKSUM = struct.Struct("<I")
assert _HEAD.size + _HEADER_CHECKSUM.size == FRAME_HEADER_BYTES

#: Stable one-byte codes of the dtypes a layout may use. Never renumber: codes are on disk.
_DTYPE_CODES: dict[torch.dtype, int] = {
    torch.uint8: 1, torch.int8: 2, torch.int16: 3, torch.int32: 4, torch.int64: 5,
    torch.float16: 6, torch.bfloat16: 7, torch.float32: 8, torch.float64: 9, torch.bool: 10,
    torch.float8_e4m3fn: 11, torch.float8_e5m2: 12, torch.uint16: 13, torch.uint32: 14,
    torch.uint64: 15, torch.complex64: 16, torch.complex128: 17,
}
_CODE_DTYPES = {code: dtype for dtype, code in _DTYPE_CODES.items()}


class FrameRejected(ValueError):
    """A stored object failed a frame check; ``reason`` is one of :data:`REJECT_REASONS`."""

    def __init__(self, reason: str, message: str) -> None:
        if reason not in REJECT_REASONS:
            raise ValueError(f"unknown reject reason {reason!r}")
        super().__init__(f"{reason}: {message}")
        self.reason = reason


@dataclass(frozen=True)
class FrameHeader:
    """A parsed header (its own checksum already verified)."""

    payload_length: int
    payload_checksum: int | None  # None: the writer skipped it (authenticating serde)
    config_fingerprint: int
    key_fingerprint: int
    layout_field: bytes  # inline layout encoding, or the 8-byte digest of it
    layout_inline: bool
    #: An authenticated frame (version 2): its MAC, checked on open, covers the payload.
    authenticated: bool = False

    def layout(self) -> MemoryLayoutDesc | None:
        """The object's layout when it was stored inline, else ``None``."""
        return decode_layout(self.layout_field) if self.layout_inline else None


def _canonical_json(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True,
                      default=str).encode("ascii")


def config_fingerprint(config: Mapping[str, Any]) -> int:
    """Fingerprint of a canonical serde config (the dict ``SerdeProcessor.get_config()`` returns)."""
    return xxh3_64(_canonical_json(config))


def key_bytes(key: ObjectKey) -> bytes:
    """Every field of ``key``, length-prefixed so that fields cannot run together."""
    model = key.model_name.encode("utf-8", "surrogatepass")
    salt = key.cache_salt.encode("utf-8", "surrogatepass")
    return b"".join((
        struct.pack("<I", len(key.chunk_hash)), key.chunk_hash,
        struct.pack("<I", len(model)), model,
        struct.pack("<qQ", key.kv_rank, key.object_group_id),
        struct.pack("<I", len(salt)), salt,
    ))


def key_fingerprint(key: ObjectKey) -> int:
    """Fingerprint of every field of ``key`` (XXH3-64 of :func:`key_bytes`)."""
    return xxh3_64(key_bytes(key))


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def encode_layout(layout: MemoryLayoutDesc) -> bytes:
    """``num_groups`` then, per group, dtype code, rank and each dimension as a LEB128 varint."""
    out = bytearray([layout.num_groups])
    if layout.num_groups > 255:
        raise ValueError(f"a layout of {layout.num_groups} groups cannot be framed (at most 255)")
    for shape, dtype in zip(layout.shapes, layout.dtypes):
        code = _DTYPE_CODES.get(dtype)
        if code is None:
            raise ValueError(f"dtype {dtype} has no stored-object frame code")
        if len(shape) > 255:
            raise ValueError(f"a shape of rank {len(shape)} cannot be framed (at most 255)")
        out += bytes([code, len(shape)])
        for dim in shape:
            out += _varint(int(dim))
    return bytes(out)


def decode_layout(data: bytes) -> MemoryLayoutDesc:
    """Inverse of :func:`encode_layout`; trailing zero padding is ignored.

    Raises :class:`FrameRejected` (``format``) for an encoding that does not parse.
    """
    pos = 0

    def take() -> int:
        nonlocal pos
        if pos >= len(data):
            raise FrameRejected("format", "layout field ends inside the layout")
        value = data[pos]
        pos += 1
        return value

    def varint() -> int:
        value = shift = 0
        while True:
            byte = take()
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7
            if shift > 63:
                raise FrameRejected("format", "layout dimension does not fit 64 bits")

    groups = take()
    shapes: list[list[int]] = []
    dtypes: list[torch.dtype] = []
    for _ in range(groups):
        code = take()
        dtype = _CODE_DTYPES.get(code)
        if dtype is None:
            raise FrameRejected("format", f"unknown dtype code {code} in layout")
        rank = take()
        shapes.append([varint() for _ in range(rank)])
        dtypes.append(dtype)
    if any(data[pos:]):
        raise FrameRejected("format", "non-zero bytes after the layout")
    return MemoryLayoutDesc(shapes, dtypes)


def layout_field(layout: MemoryLayoutDesc) -> tuple[bytes, bool]:
    """The 20-byte layout field of ``layout`` and whether it is stored inline."""
    encoded = encode_layout(layout)
    if len(encoded) <= _LAYOUT_FIELD:
        return encoded.ljust(_LAYOUT_FIELD, b"\0"), True
    return struct.pack("<Q", xxh3_64(encoded)).ljust(_LAYOUT_FIELD, b"\0"), False


def build_header(
    *,
    payload_length: int,
    checksum: int | None,
    config_id: int,
    key: ObjectKey,
    layout_bytes: tuple[bytes, bool],
) -> bytes:
    """The 64 header bytes for one object (``checksum=None``: no payload checksum)."""
    field, inline = layout_bytes
    flags = (FLAG_CHECKSUM if checksum is not None else 0) | (FLAG_LAYOUT_INLINE if inline else 0)
    head = _HEAD.pack(FRAME_MAGIC, FRAME_VERSION, flags, 0, payload_length, checksum or 0,
                      config_id, key_fingerprint(key), field)
    return head + _HEADER_CHECKSUM.pack(xxh3_64(head) & 0xFFFFFFFF)


def parse_header(header: bytes | memoryview) -> FrameHeader:
    """Parse and self-check 64 header bytes; :class:`FrameRejected` (``format``) if they are not one."""
    if len(header) < FRAME_HEADER_BYTES:
        raise FrameRejected("format", f"object of {len(header)} bytes is shorter than the header")
    raw = bytes(header[:FRAME_HEADER_BYTES])
    magic, version, flags, reserved, length, checksum, config_id, key_id, field = _HEAD.unpack_from(raw)
    if magic != FRAME_MAGIC:  # an unframed writer's object (LMCache, frame=False) is not damage
        raise FrameRejected("foreign", f"bad magic {magic!r} (not an lmserde stored object)")
    # the version before the header checksum: another frame version may lay out (and check)
    # its header otherwise; it is its writer's object, never damage to this reader
    if version != FRAME_VERSION:
        raise FrameRejected("foreign", f"frame version {version} is not supported (this is {FRAME_VERSION})")
    (stored_check,) = _HEADER_CHECKSUM.unpack_from(raw, _HEAD.size)
    if stored_check != xxh3_64(raw[: _HEAD.size]) & 0xFFFFFFFF:
        raise FrameRejected("format", "header checksum mismatch")
    if flags & ~_KNOWN_FLAGS or reserved:
        raise FrameRejected("foreign", f"unknown flags 0x{flags:02x} / reserved 0x{reserved:04x} "
                            "(written by another frame revision)")
    inline = bool(flags & FLAG_LAYOUT_INLINE)
    return FrameHeader(
        payload_length=length,
        payload_checksum=checksum if flags & FLAG_CHECKSUM else None,
        config_fingerprint=config_id,
        key_fingerprint=key_id,
        layout_field=field if inline else field[:8],
        layout_inline=inline,
    )


def check_header(
    header: FrameHeader,
    *,
    stored_payload_bytes: int,
    payload_bound: int,
    config_id: int,
    key: ObjectKey,
    layout_bytes: tuple[bytes, bool] | None,
) -> None:
    """Check a parsed header against what the reader expects; raises :class:`FrameRejected`.

    Order: the stored length against the header's (a cut or padded object: damage), then config,
    key and layout (another reader's object: "not mine", :data:`NOT_MINE_REASONS`; the layout is
    skipped when ``layout_bytes`` is ``None``), then the serde's bound, which only a damaged or
    miswritten object of this very config, key and layout can exceed. The payload checksum is
    checked by :meth:`ObjectFramer.open` / :meth:`ObjectFramer.open_deferred`.
    """
    if header.payload_length != stored_payload_bytes:
        raise FrameRejected(
            "length", f"header says {header.payload_length} payload bytes, the object holds "
            f"{stored_payload_bytes}")
    if header.config_fingerprint != config_id:
        raise FrameRejected("config", "written by another serde configuration")
    if header.key_fingerprint != key_fingerprint(key):
        raise FrameRejected("key", "written for another key")
    if layout_bytes is not None:
        field, inline = layout_bytes
        expected = field if inline else field[:8]
        if header.layout_inline != inline or header.layout_field != expected:
            raise FrameRejected("layout", "written for an object of another layout")
    if header.payload_length > payload_bound:
        raise FrameRejected(
            "length", f"header says {header.payload_length} payload bytes, more than the serde "
            f"can write for this layout ({payload_bound})")


def stored_config_fingerprint(buffer: MemoryObj,
                              read_header: Callable[[bytes], FrameHeader] = parse_header,
                              ) -> int | None:
    """The config fingerprint the frame header at the start of ``buffer`` names (which serde
    configuration wrote the object), or ``None`` when ``buffer`` holds no header that
    ``read_header`` (a framer's :meth:`ObjectFramer.read_header`: this frame version's parser by
    default) accepts. Only the first 64 header bytes are read (every frame version keeps the
    fingerprint there); nothing is vouched for the payload. The one place a reader peeks at a
    header to choose among configurations (:mod:`lmserde.l2.serde.read_configs`)."""
    if buffer.get_size() < FRAME_HEADER_BYTES:
        return None
    try:
        return read_header(_get_header(buffer.raw_data)).config_fingerprint
    except FrameRejected:
        return None


def _is_plain_cpu_bytes(raw: torch.Tensor, nbytes: int) -> bool:
    """``raw`` (a ``MemoryObj.raw_data``: a flat uint8 tensor) is in CPU memory and holds at
    least ``nbytes`` bytes."""
    return raw.is_cpu and raw.numel() >= nbytes


def _put_header(raw: torch.Tensor, header: bytes) -> None:
    """Write the header bytes at the start of ``raw``. A header is written and read on the data
    path right after a pass over a large payload has flushed the CPU caches, where every torch
    operation costs tens of microseconds: a plain CPU byte buffer is written with one
    ``memmove`` instead."""
    if _is_plain_cpu_bytes(raw, len(header)):
        ctypes.memmove(raw.data_ptr(), header, len(header))
    else:
        raw[:len(header)].copy_(torch.frombuffer(bytearray(header), dtype=torch.uint8))


def _get_header(raw: torch.Tensor) -> bytes:
    """The first ``FRAME_HEADER_BYTES`` of ``raw`` (which has at least that many), copied out
    (with one ``string_at`` from a plain CPU byte buffer: see :func:`_put_header`)."""
    if _is_plain_cpu_bytes(raw, FRAME_HEADER_BYTES):
        return ctypes.string_at(raw.data_ptr(), FRAME_HEADER_BYTES)
    return bytes(tensor_bytes(raw[:FRAME_HEADER_BYTES].contiguous().cpu()))


#: The header's fast path (``lmserde._checksum_copy.write_header`` / ``accept_header``, C; see
#: ``core/csrc/frame_header.c``), or ``None`` without the kernel. On the data path a header is
#: written right after a pass over a payload of many MiB and read right before one, with the CPU
#: caches cold for the interpreter: the Python codec here took 50 us to write a header and 80 us
#: to accept one there, against a few microseconds in one C call. Only for plain CPU byte
#: buffers; any header the fast path does not accept goes through the Python checks, which name
#: the reason.
_HEADER_KERNEL: Any = (frame_checksum._kernel
                       if hasattr(frame_checksum._kernel, "accept_header") else None)

#: What the fast path raises for a key field Python's ``struct`` would refuse too: the Python
#: path then runs and raises its own error.
_KEY_FIELD_ERRORS = (OverflowError, TypeError, ValueError)


def _fast_write_header(raw: torch.Tensor, payload_length: int, checksum: int | None,
                       config_id: int, key: ObjectKey, layout_bytes: tuple[bytes, bool]) -> bool:
    """Write the header with the C fast path; ``False`` when it does not apply."""
    kernel = _HEADER_KERNEL
    if kernel is None or not _is_plain_cpu_bytes(raw, FRAME_HEADER_BYTES):
        return False
    field, inline = layout_bytes
    try:
        kernel.write_header(raw.data_ptr(), payload_length, checksum, config_id, key.chunk_hash,
                            key.model_name, key.kv_rank, key.object_group_id, key.cache_salt,
                            field, inline)
    except _KEY_FIELD_ERRORS:
        return False
    return True


#: :func:`_fast_accept_header`'s answer when the fast path does not vouch for the header.
_NOT_ACCEPTED: Any = object()


def _fast_accept_header(raw: torch.Tensor, stored_payload_bytes: int, payload_bound: int,
                        config_id: int, key: ObjectKey,
                        layout_bytes: tuple[bytes, bool] | None) -> Any:
    """The header's payload checksum (``None``: it has none) when the C fast path accepts the
    header at the start of ``raw`` for these expectations; :data:`_NOT_ACCEPTED` otherwise."""
    kernel = _HEADER_KERNEL
    if kernel is None or not _is_plain_cpu_bytes(raw, FRAME_HEADER_BYTES):
        return _NOT_ACCEPTED
    field, inline = layout_bytes if layout_bytes is not None else (None, False)
    try:
        found = kernel.accept_header(raw.data_ptr(), stored_payload_bytes, payload_bound,
                                     config_id, key.chunk_hash, key.model_name, key.kv_rank,
                                     key.object_group_id, key.cache_salt, field, inline)
    except _KEY_FIELD_ERRORS:
        return _NOT_ACCEPTED
    return _NOT_ACCEPTED if found is False else found


def _confirmed() -> None:
    """The ``confirm()`` of a payload without checksum: nothing to wait for."""


class PendingHeader:
    """A frame header that :meth:`finish_head` writes once its payload checksum (or MAC) is
    ready (a :class:`~lmserde.l2.contract.head_last.DeferredHead`).

    ``begin()`` starts that work (on the checksum threads) and returns the call that waits for
    its value; ``write(value)`` puts the header into the buffer. The work starts at
    :meth:`start`, which the store path calls once the inner adapter holds the object, so that
    the adapter's write of the body gets going first and the checksum threads start beside it
    (measured: starting them before the submit delayed the write by about 0.3 ms per 32 MiB
    chunk on 2 cores); or at :meth:`finish_head` when the adapter gets there first. Thread-safe.
    """

    def __init__(self, begin: Callable[[], Callable[[], Any]], write: Callable[[Any], None], *,
                 head_bytes: int = FRAME_HEADER_BYTES) -> None:
        self._begin = begin
        self._write = write
        self._wait: Callable[[], Any] | None = None
        self._lock = threading.Lock()
        self.head_bytes = head_bytes

    def _started(self) -> Callable[[], Any]:
        with self._lock:
            if self._wait is None:
                try:
                    self._wait = self._begin()
                except Exception as exc:  # the head cannot be produced: finish_head() says so
                    self._wait = functools.partial(_raise, exc)
            return self._wait

    def start(self) -> None:
        """Start the checksum (or MAC) work, once; later calls do nothing. Never raises: work
        that cannot start makes :meth:`finish_head` raise (the object is not published)."""
        self._started()

    def finish_head(self) -> None:
        """Wait for the payload checksum (starting it if :meth:`start` has not) and write the
        header into the buffer. Raises after :meth:`settle` abandoned a head never started."""
        self._write(self._started()())

    def settle(self) -> None:
        """Wait until the checksum threads are done with the buffer (whatever they found): call
        before the buffer is reused when :meth:`finish_head` may not have run. A head never
        started is abandoned instead: nothing reads the buffer, and a later ``finish_head()``
        raises (the object must not be published)."""
        with self._lock:
            wait = self._wait
            if wait is None:
                self._wait = functools.partial(_raise, RuntimeError(
                    "the store gave this object up before its header was started"))
                return
        try:
            wait()
        except Exception:  # the header is not wanted any more; only the wait matters
            pass


def _raise(error: Exception) -> Any:
    """The wait of a head whose work failed to start, or that was abandoned before it did."""
    raise error


class ObjectFramer:
    """Frames the objects of one serde configuration: seals them on store, opens them on load.

    ``config`` is the serde's canonical config; ``checksum`` says whether payloads get one (an
    authenticating serde may skip it). Buffers are byte objects of ``FRAME_HEADER_BYTES`` plus
    the serde's bound; the payload lives at offset ``FRAME_HEADER_BYTES``. Thread-safe.
    """

    _LAYOUT_CACHE_LIMIT = 256
    #: Bytes in front of the payload (the payload's offset in a stored object).
    header_bytes = FRAME_HEADER_BYTES

    def __init__(self, config: Mapping[str, Any], *, checksum: bool) -> None:
        self.config_id = config_fingerprint(config)
        self.checksum = checksum
        self._layouts: dict[MemoryLayoutDesc, tuple[bytes, bool]] = {}
        self._views = PayloadViews()

    def _layout_field(self, layout: MemoryLayoutDesc) -> tuple[bytes, bool]:
        field = self._layouts.get(layout)
        if field is None:
            if len(self._layouts) >= self._LAYOUT_CACHE_LIMIT:
                self._layouts.clear()
            field = self._layouts[layout] = layout_field(layout)
        return field

    @property
    def defers_heads(self) -> bool:
        """Whether the header waits for a pass over the payload (:meth:`seal_deferred` applies:
        an adapter that writes heads last overlaps that pass with its write)."""
        return self.checksum

    def read_header(self, header: bytes | memoryview) -> FrameHeader:
        """Parse the header at the start of a stored object (:func:`parse_header`)."""
        return parse_header(header)

    def describe(self) -> str:
        """The frame mode, for status reports: ``"plain"`` (checksummed header and payload, no
        key) or ``"plain, payload checksum left to the serde"``."""
        return "plain" if self.checksum else "plain, payload checksum left to the serde"

    def check_layout(self, layout: MemoryLayoutDesc) -> None:
        """Raise ``ValueError`` when ``layout`` cannot be framed (unknown dtype, > 255 groups)."""
        self._layout_field(layout)

    def payload_view(self, buffer: MemoryObj, bound: int) -> TensorMemoryObj:
        """A byte object over the payload region of ``buffer`` (``bound`` bytes at offset 64),
        whose bytes the serde may hash in its own pass when this framer stores a checksum
        (:mod:`lmserde.frame_checksum`; :meth:`serde_checksum` reads the result)."""
        return self._views.view(buffer, FRAME_HEADER_BYTES, FRAME_HEADER_BYTES + bound,
                                hashing=self.checksum)

    @staticmethod
    def serde_checksum(payload: MemoryObj, nbytes: int) -> int | None:
        """The checksum of ``payload``'s first ``nbytes`` bytes when the serde's pass computed it
        with the payload's bound hasher over exactly those bytes, else ``None``."""
        return payload.verified_checksum(nbytes) if isinstance(payload, FramedPayload) else None

    def seal(self, buffer: MemoryObj, payload_length: int, key: ObjectKey,
             layout: MemoryLayoutDesc, *, checksum: int | None = None) -> None:
        """Write the header for ``payload_length`` payload bytes and narrow ``buffer`` to the frame.

        ``checksum``: the payload checksum when the caller has it (the serde computed it while
        writing the payload); otherwise it is computed here.
        """
        if not self.checksum:
            checksum = None
        elif checksum is None:
            raw = buffer.raw_data
            checksum = payload_checksum(raw[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + payload_length])
        self._write_header(buffer, payload_length, checksum, key, self._layout_field(layout))

    def seal_deferred(self, buffer: MemoryObj, payload_length: int, key: ObjectKey,
                      layout: MemoryLayoutDesc, *, checksum: int | None = None) -> PendingHeader:
        """Like :meth:`seal`, but the payload checksum runs on the checksum threads, from the
        returned head's ``start()``, while the caller goes on (an adapter writes the payload);
        its ``finish_head()`` waits for it and writes the header. With ``checksum`` given (the
        serde computed it) nothing runs in the background and ``finish_head()`` writes that.

        The buffer is narrowed to the frame now and its header zeroed (no load accepts that)
        until ``finish_head()``. The payload must stay unchanged until then. Only for a framer
        with ``checksum``.
        """
        if not self.checksum:
            raise ValueError("this framer stores no payload checksum: use seal()")
        layout_bytes = self._layout_field(layout)  # refuses an unframeable layout now
        raw = buffer.raw_data
        raw[:FRAME_HEADER_BYTES].zero_()
        buffer.set_used_size(FRAME_HEADER_BYTES + payload_length)
        if checksum is None:
            payload = raw[FRAME_HEADER_BYTES:FRAME_HEADER_BYTES + payload_length]
            begin: Callable[[], Callable[[], Any]] = lambda: start_payload_checksum(payload)  # noqa: E731
        else:
            known = checksum
            begin = lambda: lambda: known  # noqa: E731
        return PendingHeader(begin, lambda value: self._write_header(
            buffer, payload_length, value, key, layout_bytes))

    def _write_header(self, buffer: MemoryObj, payload_length: int, checksum: int | None,
                      key: ObjectKey, layout_bytes: tuple[bytes, bool]) -> None:
        raw = buffer.raw_data
        if not _fast_write_header(raw, payload_length, checksum, self.config_id, key,
                                  layout_bytes):
            _put_header(raw, build_header(payload_length=payload_length, checksum=checksum,
                                          config_id=self.config_id, key=key,
                                          layout_bytes=layout_bytes))
        buffer.set_used_size(FRAME_HEADER_BYTES + payload_length)

    def open(self, buffer: MemoryObj, key: ObjectKey, layout: MemoryLayoutDesc | None,
             bound: int) -> TensorMemoryObj:
        """Verify the frame in ``buffer`` (its ``get_size()`` bytes) and return its payload.

        ``layout`` is the object's expected layout (``None``: not checked, for offline scrubbing);
        ``bound`` the serde's payload bound. Raises :class:`FrameRejected` with the first failed
        check's reason.
        """
        payload, confirm = self.open_deferred(buffer, key, layout, bound)
        confirm()
        return payload

    def open_deferred(self, buffer: MemoryObj, key: ObjectKey, layout: MemoryLayoutDesc | None,
                      bound: int, *, serde_hashes: bool = False,
                      ) -> tuple[TensorMemoryObj, Callable[[], None]]:
        """Like :meth:`open`, but the payload checksum runs in the background.

        Every header check is done before this returns (and, for a payload of one checksum
        segment, the checksum too: it was just read and is still in the cache). Otherwise the
        returned ``confirm()`` waits for the checksum and raises :class:`FrameRejected`
        (``checksum``) on a mismatch: the caller may decode the payload meanwhile, but must not
        use what it decoded before ``confirm()`` returned. The buffer must stay unchanged until
        then.

        ``serde_hashes``: the serde hashes the payload while it decodes, with the payload's bound
        hasher (:mod:`lmserde.frame_checksum`): for a payload over one segment nothing is hashed
        now, and ``confirm()`` compares that hasher's digest — or, when it did not cover the whole
        payload, hashes the payload then. A payload of one segment is still checked here, before
        any decoding (it is in the cache; the serde is not asked).
        """
        size = buffer.get_size()
        raw = buffer.raw_data
        if size < FRAME_HEADER_BYTES:
            raise FrameRejected("format", f"object of {size} bytes is shorter than the header")
        layout_bytes = None if layout is None else self._layout_field(layout)
        expected = _fast_accept_header(raw, size - FRAME_HEADER_BYTES, bound, self.config_id,
                                       key, layout_bytes)
        if expected is _NOT_ACCEPTED:  # the Python checks name the reason (or accept it)
            header = parse_header(_get_header(raw))
            check_header(header, stored_payload_bytes=size - FRAME_HEADER_BYTES,
                         payload_bound=bound, config_id=self.config_id, key=key,
                         layout_bytes=layout_bytes)
            expected = header.payload_checksum
        hashing = (expected is not None and serde_hashes
                   and size - FRAME_HEADER_BYTES > CHECKSUM_SEGMENT_BYTES)
        view = self._views.view(buffer, FRAME_HEADER_BYTES, size, hashing=hashing)
        if expected is None:
            if self.checksum:  # this config always writes one: a frame without it is not its own
                raise FrameRejected("checksum", "the frame carries no payload checksum, which "
                                    "this serde configuration always writes")
            # the writer's serde authenticates its bytes (same config: ours too)
            return view, _confirmed
        payload = view.raw_data
        if hashing:

            def confirm_serde_hash() -> None:
                found = self.serde_checksum(view, payload.numel())
                if found is None:  # the serde's pass did not hash all of it: hash it now
                    found = payload_checksum(payload)
                if found != expected:
                    raise FrameRejected("checksum", "payload checksum mismatch")

            return view, confirm_serde_hash
        if payload.numel() <= CHECKSUM_SEGMENT_BYTES:  # one segment, just read into the cache:
            if xxh3_of_tensor(payload) != expected:  # hashing it here beats a hand-off to a thread
                raise FrameRejected("checksum", "payload checksum mismatch")
            return view, _confirmed
        pending = start_payload_checksum(payload)

        def confirm() -> None:
            if pending() != expected:
                raise FrameRejected("checksum", "payload checksum mismatch")

        return view, confirm
