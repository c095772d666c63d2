"""The EncodedKV header (codec version 1), byte-compatible with LMCache's ``kv_codec``.

Layout (all integers little-endian; see ``docs/formats/encoded_kv.md``)::

    magic "LMCKV\\x01\\x00\\x01" | version u16 | scale_scope u16 | k/v/scale dtype ids u16 x3 |
    reserved u16 | layer_id, chunk_id, chunk_size, page_size, kv_head_count, head_dim i64 x6 |
    scale_shape_n i64 | scale_shape i64 x n | k/v/scale payload lengths i64 x3 |
    hash_count u16 | (u16-prefixed UTF-8 key, u16-prefixed UTF-8 value) x hash_count |
    crc32 u32 (of the payload) | payload = K bytes, V bytes, scale bytes

:meth:`EncodedKVHeader.unpack` checks structure only; :func:`locate_payload` adds the length check
against the buffer, and the caller verifies the CRC (possibly in parallel, see ``crc32``).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from functools import cached_property, lru_cache

import torch

from lmserde_asym_k16_v8.dtype_ids import dtype_from_id, dtype_to_id
from lmserde_asym_k16_v8.scale_scope import ScaleScope

__all__ = [
    "CODEC_VERSION",
    "MAGIC",
    "MAX_SCALE_DIMS",
    "PROVENANCE_KEYS",
    "CorruptEncodedKVError",
    "EncodedKVHeader",
    "PayloadLocation",
    "locate_payload",
]

MAGIC = b"LMCKV\x01\x00\x01"
CODEC_VERSION = 1
MAX_SCALE_DIMS = 8
PROVENANCE_KEYS: tuple[str, ...] = (
    "model_id",
    "model_revision_hash",
    "tokenizer_hash",
    "rope_config_hash",
    "attention_backend",
    "kv_layout",
)
"""Provenance keys in the order LMCache writes them; all six are written, empty when unknown."""

_FIXED = struct.Struct("<8s6H7q")  # magic .. scale_shape_n: 76 bytes
_I64 = struct.Struct("<q")
_LENGTHS = struct.Struct("<3q")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_U16_MAX = 0xFFFF


class CorruptEncodedKVError(ValueError):
    """A blob is not a readable EncodedKV v1 blob: bad magic, version, CRC, structure or length."""


def _default_provenance() -> tuple[tuple[str, str], ...]:
    return tuple((key, "") for key in PROVENANCE_KEYS)


@dataclass(frozen=True)
class EncodedKVHeader:
    """Every field of an EncodedKV v1 header. ``crc32`` is the CRC-32 of the payload."""

    k_dtype: torch.dtype | None
    v_dtype: torch.dtype | None
    scale_dtype: torch.dtype | None
    k_payload_len: int
    v_payload_len: int
    scale_payload_len: int
    scale_scope: ScaleScope = ScaleScope.PER_TENSOR
    crc32: int = 0
    layer_id: int = -1
    chunk_id: int = -1
    chunk_size: int = -1
    page_size: int = -1
    kv_head_count: int = -1
    head_dim: int = -1
    scale_shape: tuple[int, ...] = ()
    provenance: tuple[tuple[str, str], ...] = field(default_factory=_default_provenance)

    @property
    def payload_len(self) -> int:
        """Bytes of K, V and scale payloads together."""
        return self.k_payload_len + self.v_payload_len + self.scale_payload_len

    @cached_property
    def header_len(self) -> int:
        """Bytes of the header, CRC field included."""
        entries = sum(
            2 * _U16.size + len(k.encode("utf-8")) + len(v.encode("utf-8"))
            for k, v in self.provenance
        )
        return (
            _FIXED.size
            + _I64.size * len(self.scale_shape)
            + _LENGTHS.size
            + _U16.size
            + entries
            + _U32.size
        )

    @property
    def blob_len(self) -> int:
        """Bytes of the whole blob: header plus payload."""
        return self.header_len + self.payload_len

    def pack(self) -> bytes:
        """The header bytes (``header_len`` of them); ``ValueError`` for unrepresentable fields."""
        return _pack(self)

    def _pack_uncached(self) -> bytes:
        if len(self.scale_shape) > MAX_SCALE_DIMS:
            raise ValueError(
                f"scale_shape has {len(self.scale_shape)} dims; the format allows {MAX_SCALE_DIMS}"
            )
        for name in ("k_payload_len", "v_payload_len", "scale_payload_len"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)}")
        if len(self.provenance) > _U16_MAX:
            raise ValueError(f"too many provenance entries ({len(self.provenance)})")
        if not 0 <= self.crc32 <= 0xFFFFFFFF:
            raise ValueError(f"crc32 must fit in 32 bits, got {self.crc32}")
        parts = [
            _FIXED.pack(
                MAGIC,
                CODEC_VERSION,
                int(self.scale_scope),
                dtype_to_id(self.k_dtype),
                dtype_to_id(self.v_dtype),
                dtype_to_id(self.scale_dtype),
                0,
                self.layer_id,
                self.chunk_id,
                self.chunk_size,
                self.page_size,
                self.kv_head_count,
                self.head_dim,
                len(self.scale_shape),
            )
        ]
        parts.extend(_I64.pack(d) for d in self.scale_shape)
        parts.append(_LENGTHS.pack(self.k_payload_len, self.v_payload_len, self.scale_payload_len))
        parts.append(_U16.pack(len(self.provenance)))
        for key, value in self.provenance:
            for text in (key, value):
                raw = text.encode("utf-8")
                if len(raw) > _U16_MAX:
                    raise ValueError(f"provenance text of {len(raw)} bytes exceeds {_U16_MAX}")
                parts.append(_U16.pack(len(raw)))
                parts.append(raw)
        parts.append(_U32.pack(self.crc32))
        return b"".join(parts)

    @classmethod
    def unpack(cls, buf: memoryview | bytes) -> EncodedKVHeader:
        """Parse the header at the start of ``buf``; trailing bytes are not looked at.

        Raises :class:`CorruptEncodedKVError` for bad magic, an unsupported version, unknown ids,
        impossible fields or a header cut short.
        """
        view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
        if len(view) < len(MAGIC) or bytes(view[: len(MAGIC)]) != MAGIC:
            raise CorruptEncodedKVError(
                f"EncodedKV: bad magic {bytes(view[: len(MAGIC)])!r}, expected {MAGIC!r}"
            )
        reader = _Reader(view)
        fixed = reader.take(_FIXED)
        (_, version, scope_id, k_id, v_id, scale_id, _reserved, *ints) = fixed
        if version != CODEC_VERSION:
            hint = " (version 2 is the RAW_UNIT bytethrough codec)" if version == 2 else ""
            raise CorruptEncodedKVError(
                f"EncodedKV: unsupported codec version {version}{hint}; this reader reads "
                f"version {CODEC_VERSION}"
            )
        try:
            scope = ScaleScope(scope_id)
        except ValueError:
            raise CorruptEncodedKVError(f"EncodedKV: unknown scale_scope id {scope_id}") from None
        try:
            k_dtype, v_dtype, scale_dtype = (dtype_from_id(i) for i in (k_id, v_id, scale_id))
        except ValueError as exc:
            raise CorruptEncodedKVError(f"EncodedKV: {exc}") from None
        layer_id, chunk_id, chunk_size, page_size, kv_head_count, head_dim, n_dims = ints
        if not 0 <= n_dims <= MAX_SCALE_DIMS:
            raise CorruptEncodedKVError(
                f"EncodedKV: scale_shape_n {n_dims} outside 0..{MAX_SCALE_DIMS}"
            )
        scale_shape = tuple(reader.take(_I64)[0] for _ in range(n_dims))
        if any(d < 0 for d in scale_shape):
            raise CorruptEncodedKVError(f"EncodedKV: negative scale_shape {scale_shape}")
        k_len, v_len, scale_len = reader.take(_LENGTHS)
        if min(k_len, v_len, scale_len) < 0:
            raise CorruptEncodedKVError(
                f"EncodedKV: negative payload length (k={k_len}, v={v_len}, scale={scale_len})"
            )
        (count,) = reader.take(_U16)
        provenance = tuple((reader.text(), reader.text()) for _ in range(count))
        (crc,) = reader.take(_U32)
        return cls(
            k_dtype=k_dtype,
            v_dtype=v_dtype,
            scale_dtype=scale_dtype,
            k_payload_len=k_len,
            v_payload_len=v_len,
            scale_payload_len=scale_len,
            scale_scope=scope,
            crc32=crc,
            layer_id=layer_id,
            chunk_id=chunk_id,
            chunk_size=chunk_size,
            page_size=page_size,
            kv_head_count=kv_head_count,
            head_dim=head_dim,
            scale_shape=scale_shape,
            provenance=provenance,
        )


@lru_cache(maxsize=256)
def _pack(header: EncodedKVHeader) -> bytes:
    # Headers repeat (same layouts, CRC 0 before it is known): packing is cached per header.
    return header._pack_uncached()


class _Reader:
    """Sequential reads from a header buffer; running past the end is a truncation error."""

    def __init__(self, view: memoryview) -> None:
        self._view = view
        self._pos = 0

    def _need(self, n: int, what: str) -> int:
        start = self._pos
        if start + n > len(self._view):
            raise CorruptEncodedKVError(
                f"EncodedKV: truncated header: {what} needs bytes {start}..{start + n} but the "
                f"blob has {len(self._view)}"
            )
        self._pos += n
        return start

    def take(self, fmt: struct.Struct) -> tuple[int, ...]:
        start = self._need(fmt.size, "field")
        return fmt.unpack_from(self._view, start)

    def text(self) -> str:
        (n,) = self.take(_U16)
        start = self._need(n, "provenance text")
        try:
            return bytes(self._view[start : start + n]).decode("utf-8")
        except UnicodeDecodeError:
            raise CorruptEncodedKVError(
                "EncodedKV: provenance entry is not valid UTF-8"
            ) from None


@dataclass(frozen=True)
class PayloadLocation:
    """Where a blob's payload sections sit, as byte offsets into the blob."""

    header: EncodedKVHeader
    k_offset: int
    v_offset: int
    scale_offset: int
    end: int


def locate_payload(buf: memoryview | bytes) -> PayloadLocation:
    """Parse the header of ``buf`` and check the payload fits; bytes past the blob are ignored.

    Raises :class:`CorruptEncodedKVError` if the header is bad or the blob is truncated. The CRC
    is not checked here.
    """
    view = memoryview(buf).cast("B") if not isinstance(buf, bytes) else memoryview(buf)
    header = EncodedKVHeader.unpack(view)
    start = header.header_len
    end = start + header.payload_len
    if end > len(view):
        raise CorruptEncodedKVError(
            f"EncodedKV: truncated blob: header announces {end} bytes "
            f"({start} header + {header.payload_len} payload) but only {len(view)} are present"
        )
    return PayloadLocation(
        header=header,
        k_offset=start,
        v_offset=start + header.k_payload_len,
        scale_offset=start + header.k_payload_len + header.v_payload_len,
        end=end,
    )
