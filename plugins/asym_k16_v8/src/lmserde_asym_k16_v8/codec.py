"""Encode K and V tensors into one EncodedKV v1 blob, and decode them back.

Tensor-level and independent of the serde machinery: :class:`AsymCodec` writes K bytes and V codes
straight into the caller's destination buffer (no intermediate payload copy) and hashes the payload
in parallel with the conversion work. A ``None`` K gives a V-only blob (``k_payload_len = 0``).
"""

from __future__ import annotations

import ctypes
import zlib
from dataclasses import dataclass
from functools import lru_cache

import torch

from lmserde_asym_k16_v8.chunked import (
    CHUNK_BYTES,
    ChunkedRun,
    chunk_for,
    copy_and_crc32,
    crc32_at,
    crc32_of_runs,
    shared_pool,
)
from lmserde_asym_k16_v8.crc32 import crc32_combine
from lmserde_asym_k16_v8.dtype_ids import DTYPE_TO_ID
from lmserde_asym_k16_v8.encoded_kv import (
    CorruptEncodedKVError,
    EncodedKVHeader,
    PayloadLocation,
    locate_payload,
)
from lmserde_asym_k16_v8.quantization import (
    SUPPORTED_FP8_DTYPES,
    SUPPORTED_SCALE_DTYPES,
    dequantize_v,
    finite_absmax,
    pack_scale,
    quantize_v,
    scale_for_absmax,
    unpack_scale,
)
from lmserde_asym_k16_v8.scale_scope import SUPPORTED_SCALE_SCOPES, ScaleScope

__all__ = ["HEADER_ALLOWANCE", "V_DTYPES", "AsymCodec", "estimate_blob_size"]

HEADER_ALLOWANCE = 1024
"""Header bytes reserved by the size estimate (LMCache's allowance; a default header is 213)."""

V_DTYPES: tuple[torch.dtype, ...] = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
"""Dtypes V may have on encode and on decode."""


def estimate_blob_size(k_nbytes: int, v_numel: int, scale_nbytes: int) -> int:
    """Upper bound on a blob's size: header allowance + K bytes + one byte per V element + scale."""
    return HEADER_ALLOWANCE + k_nbytes + v_numel + scale_nbytes


def _dtype_name(dtype: torch.dtype | None) -> str:
    return "None" if dtype is None else str(dtype).removeprefix("torch.")


def _names(dtypes: tuple[torch.dtype, ...]) -> str:
    return ", ".join(_dtype_name(d) for d in dtypes)


def _byte_view(t: torch.Tensor) -> memoryview:
    """A memoryview over a contiguous CPU uint8 tensor's memory (keeps the tensor alive)."""
    n = t.numel()
    if n == 0:
        return memoryview(b"")
    array = (ctypes.c_uint8 * n).from_address(t.data_ptr())
    array._owner = t  # type: ignore[attr-defined]
    return memoryview(array).cast("B")


def _flat_bytes(t: torch.Tensor) -> torch.Tensor:
    """The bytes of ``t`` in row-major order as a flat uint8 tensor (a view when contiguous)."""
    flat = t.contiguous().reshape(-1)
    return flat.view(torch.uint8) if flat.numel() else torch.empty(0, dtype=torch.uint8)


def _check_cpu(t: torch.Tensor, what: str) -> None:
    if t.device.type != "cpu":
        raise ValueError(f"asym_k16_v8: {what} must be a CPU tensor, got device {t.device}")


#: The header of a blob layout, built from the first seven :class:`EncodedKVHeader` fields (in
#: their order: K, V and scale dtypes, K, V and scale payload lengths, scale scope). One instance
#: per layout, so its length and packed bytes are computed once.
_blob_header = lru_cache(maxsize=256)(EncodedKVHeader)


@dataclass(frozen=True)
class AsymCodec:
    """K16/V8 blob codec settings; every field is written into (and checked against) headers.

    ``k_dtype_tag`` is the K dtype id a V-only blob carries (LMCache writes bfloat16 there; it is
    informational, no K bytes follow).
    """

    fp8_dtype: torch.dtype = torch.float8_e4m3fn
    scale_dtype: torch.dtype = torch.float32
    scale_scope: ScaleScope = ScaleScope.PER_TENSOR
    k_dtype_tag: torch.dtype = torch.bfloat16

    def __post_init__(self) -> None:
        if self.fp8_dtype not in SUPPORTED_FP8_DTYPES:
            raise ValueError(
                f"fp8_dtype {_dtype_name(self.fp8_dtype)} is not supported by the EncodedKV codec; "
                f"supported: {_names(SUPPORTED_FP8_DTYPES)}"
            )
        if self.scale_dtype not in SUPPORTED_SCALE_DTYPES:
            raise ValueError(
                f"scale_dtype {_dtype_name(self.scale_dtype)} is not supported; "
                f"supported: {_names(SUPPORTED_SCALE_DTYPES)}"
            )
        if self.scale_scope not in SUPPORTED_SCALE_SCOPES:
            raise ValueError(
                f"ScaleScope {self.scale_scope.name} is not supported by asym_k16_v8; supported: "
                + ", ".join(s.name for s in SUPPORTED_SCALE_SCOPES)
            )
        if self.k_dtype_tag not in DTYPE_TO_ID:
            raise ValueError(f"k_dtype_tag {_dtype_name(self.k_dtype_tag)} has no EncodedKV id")

    @property
    def scale_nbytes(self) -> int:
        """Bytes of the scale payload (one float32 for a per-tensor scale)."""
        return self.scale_dtype.itemsize

    def estimate(self, k_nbytes: int, v_numel: int) -> int:
        """Upper bound on the blob size for these K bytes and V elements."""
        return estimate_blob_size(k_nbytes, v_numel, self.scale_nbytes)

    # -- encode ---------------------------------------------------------------------------------

    def header_for(self, k: torch.Tensor | None, v: torch.Tensor) -> EncodedKVHeader:
        """The header (CRC still 0) of the blob :meth:`encode_into` writes for ``k`` and ``v``."""
        if k is not None and k.dtype not in DTYPE_TO_ID:
            raise ValueError(
                f"asym_k16_v8: K dtype {_dtype_name(k.dtype)} cannot be stored; the format stores "
                + _names(tuple(d for d in DTYPE_TO_ID if d is not None))
            )
        if v.dtype not in V_DTYPES:
            raise ValueError(
                f"asym_k16_v8: V must be one of {_names(V_DTYPES)} to be quantized to fp8, got "
                f"{_dtype_name(v.dtype)}"
            )
        return _blob_header(
            self.k_dtype_tag if k is None else k.dtype,
            self.fp8_dtype,
            self.scale_dtype,
            0 if k is None else k.numel() * k.element_size(),
            v.numel(),
            self.scale_nbytes,
            self.scale_scope,
        )

    def encode_into(self, out: torch.Tensor, k: torch.Tensor | None, v: torch.Tensor) -> int:
        """Write the blob of ``k`` (``None``: V-only) and ``v`` at the start of the flat uint8
        tensor ``out``; return its length. ``ValueError`` if ``out`` is too small or the inputs
        cannot be encoded; bytes of ``out`` past the blob are not touched.
        """
        _check_cpu(v, "V")
        if k is not None:
            _check_cpu(k, "K")
        if out.dtype != torch.uint8 or out.dim() != 1 or not out.is_contiguous():
            raise ValueError("asym_k16_v8: destination must be a flat contiguous uint8 buffer")
        _check_cpu(out, "the destination buffer")
        header = self.header_for(k, v)
        hlen, total = header.header_len, header.blob_len
        if out.numel() < total:
            raise ValueError(
                f"asym_k16_v8: destination buffer too small: the blob needs {total} bytes, the "
                f"buffer holds {out.numel()}"
            )
        pool, helpers = shared_pool()
        base = out.data_ptr()
        v_off = hlen + header.k_payload_len
        scale_off = v_off + header.v_payload_len
        v_flat = v.reshape(-1)
        codes = out[v_off:scale_off]
        k_src = _flat_bytes(k) if k is not None else torch.empty(0, dtype=torch.uint8)
        k_addr = k_src.data_ptr()
        scale = 1.0

        def encode_v(a: int, b: int) -> int:
            quantize_v(v_flat[a:b], codes[a:b], self.fp8_dtype, scale)
            return crc32_at(base + v_off + a, b - a)

        # Helpers copy and hash K while this thread finds the V abs-max; then everyone (this
        # thread included) takes the remaining K chunks and the V chunks.
        k_run = ChunkedRun(lambda a, b: copy_and_crc32(base + hlen + a, k_addr + a, b - a),
                           header.k_payload_len, CHUNK_BYTES)
        v_run = ChunkedRun(encode_v, header.v_payload_len, chunk_for(header.v_payload_len, helpers))

        def find_scale() -> None:
            nonlocal scale
            scale = scale_for_absmax(finite_absmax(v_flat), self.fp8_dtype)

        crc = crc32_of_runs(k_run, v_run, pool, helpers, between=find_scale)
        scale_bytes = pack_scale(scale)
        out[scale_off:total].copy_(torch.frombuffer(bytearray(scale_bytes), dtype=torch.uint8))
        crc = crc32_combine(crc, zlib.crc32(scale_bytes), len(scale_bytes))
        head = bytearray(header.pack())
        head[-4:] = crc.to_bytes(4, "little")
        out[:hlen].copy_(torch.frombuffer(head, dtype=torch.uint8))
        return total

    # -- decode ---------------------------------------------------------------------------------

    @staticmethod
    def locate(blob: torch.Tensor) -> PayloadLocation:
        """Parse and length-check the header of the flat uint8 ``blob`` (CRC not yet checked)."""
        if blob.dtype != torch.uint8 or blob.dim() != 1 or not blob.is_contiguous():
            raise ValueError("asym_k16_v8: source must be a flat contiguous uint8 buffer")
        _check_cpu(blob, "the source buffer")
        return locate_payload(_byte_view(blob))

    def check_header(self, header: EncodedKVHeader) -> None:
        """``ValueError`` unless this codec can decode a blob with ``header``."""
        if header.scale_scope not in SUPPORTED_SCALE_SCOPES:
            raise ValueError(
                f"asym_k16_v8: blob uses scale scope {header.scale_scope.name}; this reader "
                "supports " + ", ".join(s.name for s in SUPPORTED_SCALE_SCOPES)
            )
        if header.v_dtype != self.fp8_dtype:
            raise ValueError(
                f"asym_k16_v8: blob stores V as {_dtype_name(header.v_dtype)}, this deserializer "
                f"reads {_dtype_name(self.fp8_dtype)}"
            )
        if header.scale_dtype != self.scale_dtype or header.scale_payload_len != self.scale_nbytes:
            raise ValueError(
                f"asym_k16_v8: blob scale is {header.scale_payload_len} bytes of "
                f"{_dtype_name(header.scale_dtype)}, expected one {_dtype_name(self.scale_dtype)}"
            )
        if header.scale_shape:
            raise ValueError(
                f"asym_k16_v8: a per-tensor scale has no scale_shape, blob has {header.scale_shape}"
            )

    def decode_into(
        self,
        blob: torch.Tensor,
        loc: PayloadLocation,
        k_out: torch.Tensor | None,
        v_out: torch.Tensor | None,
    ) -> None:
        """Restore K (bit-exact) into ``k_out`` and dequantized V into ``v_out``; ``None`` outputs
        are skipped and never touched. The CRC covers the whole payload and is always verified.

        Raises ``ValueError`` when the blob does not fit the outputs and
        :class:`CorruptEncodedKVError` on a CRC mismatch; on a CRC mismatch the outputs may
        already hold decoded (wrong) data, which callers treat as a miss.
        """
        header = loc.header
        self.check_header(header)
        if k_out is not None:
            _check_cpu(k_out, "K destination")
            k_nbytes = k_out.numel() * k_out.element_size()
            if header.k_payload_len != k_nbytes or header.k_dtype != k_out.dtype:
                raise ValueError(
                    f"asym_k16_v8: blob K is {header.k_payload_len} bytes of "
                    f"{_dtype_name(header.k_dtype)}, the K destination is {k_nbytes} bytes of "
                    f"{_dtype_name(k_out.dtype)}"
                )
        if v_out is not None:
            _check_cpu(v_out, "V destination")
            if v_out.dtype not in V_DTYPES:
                raise ValueError(
                    f"asym_k16_v8: V destination must be one of {_names(V_DTYPES)}, got "
                    f"{_dtype_name(v_out.dtype)}"
                )
            if header.v_payload_len != v_out.numel():
                raise ValueError(
                    f"asym_k16_v8: blob V has {header.v_payload_len} elements, the V destination "
                    f"has {v_out.numel()}"
                )
        pool, helpers = shared_pool()
        base = blob.data_ptr()
        k_len, v_len = header.k_payload_len, header.v_payload_len
        v_target: torch.Tensor | None = None
        if v_out is not None and v_len:
            v_target = v_out.view(-1) if v_out.is_contiguous() else torch.empty(v_len, dtype=v_out.dtype)
        k_staged: torch.Tensor | None = None
        if k_out is not None and k_len and not k_out.is_contiguous():
            k_staged = torch.empty(k_out.shape, dtype=k_out.dtype)
        k_target = k_out if k_staged is None else k_staged
        scale = unpack_scale(bytes(_byte_view(blob[loc.scale_offset : loc.end])))
        codes = blob[loc.v_offset : loc.scale_offset]

        def decode_v(a: int, b: int) -> int:
            if v_target is not None:
                dequantize_v(codes[a:b], v_target[a:b], self.fp8_dtype, scale)
            return crc32_at(base + loc.v_offset + a, b - a)

        if k_target is not None and k_len:  # copy and hash K (straight into k_out if contiguous)
            k_addr = k_target.data_ptr()
            k_run = ChunkedRun(lambda a, b: copy_and_crc32(k_addr + a, base + loc.k_offset + a, b - a),
                               k_len, CHUNK_BYTES)
        else:  # hash only
            k_run = ChunkedRun(lambda a, b: crc32_at(base + loc.k_offset + a, b - a), k_len,
                               CHUNK_BYTES)
        crc = crc32_of_runs(k_run, ChunkedRun(decode_v, v_len, chunk_for(v_len, helpers)), pool,
                            helpers)
        scale_crc = crc32_at(base + loc.scale_offset, header.scale_payload_len)
        crc = crc32_combine(crc, scale_crc, header.scale_payload_len)
        if crc != header.crc32:
            raise CorruptEncodedKVError(
                f"EncodedKV: payload CRC-32 mismatch (header 0x{header.crc32:08x}, payload "
                f"0x{crc:08x}): the blob is corrupted"
            )
        if v_target is not None and v_out is not None and v_target.data_ptr() != v_out.data_ptr():
            v_out.copy_(v_target.view(v_out.shape))
        if k_staged is not None and k_out is not None:
            k_out.copy_(k_staged)
